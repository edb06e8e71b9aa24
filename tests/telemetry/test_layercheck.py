"""The per-layer XSP check's measuring path on the zoo's small MLP: the leveled passes and
the bricks see the same layers, and the comparison has its fields. Timings are not asserted
(a shared CPU decides them)."""

from __future__ import annotations

import math

import pytest

from mlmodelscope.telemetry.layercheck import CheckConfig, check_model, isolated_layers


def test_the_small_mlp_is_checked_layer_by_layer() -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("opentelemetry.sdk")
    from mlmodelscope.zoo import ensure_zoo_model

    path = ensure_zoo_model("mlp", small=True).path
    config = CheckConfig(calls=5, warmup=1, runs=3)
    check = check_model(path, "mlp", config)
    assert check.model == "mlp" and not check.only_in_trace and not check.only_independent
    assert check.matched, check.notes
    assert len(check.matched) + len(check.not_comparable) == len(
        isolated_layers(path, config).layers
    )
    for layer in check.matched:
        assert layer.corrected_s > 0 and layer.independent_s > 0
        assert layer.signature  # the brick's identity rides along
        assert math.isfinite(layer.error) and math.isfinite(layer.share_error)
    d = check.distribution
    assert d.layers == len(check.matched)
    assert d.median_signed is not None and d.time_weighted_abs is not None
    assert d.median_abs is not None and d.p90_abs is not None
    assert 0 <= d.median_abs <= d.p90_abs
    assert d.share_median_abs is not None and d.share_p90_abs is not None
    assert 0 <= d.share_median_abs <= d.share_p90_abs
    assert check.residual is not None and check.untraced_s is not None
