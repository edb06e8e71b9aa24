"""The per-layer XSP check's matching and statistics on hand-made layer times, checked against
numpy's and scipy's percentiles."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mlmodelscope.analysis.xsp_layers import (
    PERCENTILE_METHOD,
    ErrorDistribution,
    LayerTime,
    by_op_type,
    compare,
    pooled,
)

CORRECTED = [
    LayerTime("conv0", "Conv", 12e-6),
    LayerTime("relu0", "Relu", 3e-6),
    LayerTime("conv1", "Conv", 8e-6),
    LayerTime("pool", "MaxPool", 2e-6),
    LayerTime("gemm", "Gemm", 5e-6),
    LayerTime("reorder", "ReorderOutput", 1e-6),
    LayerTime("only_traced", "Flatten", 1e-6),
]
INDEPENDENT = [
    LayerTime("conv0", "Conv", 10e-6, "sig-conv0"),
    LayerTime("relu0", "Relu", 1e-6, "sig-relu"),
    LayerTime("conv1", "Conv", 10e-6, "sig-conv1"),
    LayerTime("pool", "MaxPool", 2.5e-6, "sig-pool"),
    LayerTime("gemm", "Gemm", 4e-6, "sig-gemm"),
    LayerTime("reorder", "ReorderOutput", -0.2e-6, "sig-reorder"),  # under the per-run cost
    LayerTime("only_bricks", "Identity", 1e-6, "sig-id"),
]
ERRORS = np.array([0.2, 2.0, -0.2, -0.2, 0.25])
"""(corrected - independent) / independent of the five comparable layers, in trace order."""


def test_layers_are_matched_by_name_and_unmatched_ones_are_counted() -> None:
    check = compare("toy", CORRECTED, INDEPENDENT, residual=0.01, untraced_s=31e-6)
    assert [m.name for m in check.matched] == ["conv0", "relu0", "conv1", "pool", "gemm"]
    assert check.only_in_trace == ("only_traced",)
    assert check.only_independent == ("only_bricks",)
    assert check.not_comparable == ("reorder",)
    assert [m.error for m in check.matched] == pytest.approx(ERRORS.tolist())
    assert check.matched[0].signature == "sig-conv0"
    assert check.residual == 0.01 and check.untraced_s == 31e-6
    assert check.corrected_sum_s == pytest.approx(30e-6)
    assert check.independent_sum_s == pytest.approx(27.5e-6)
    assert check.sum_error == pytest.approx(30 / 27.5 - 1)


def test_the_distribution_is_numpys_linear_percentile_of_the_absolute_errors() -> None:
    d = compare("toy", CORRECTED, INDEPENDENT).distribution
    absolute = np.abs(ERRORS)
    assert d.method == PERCENTILE_METHOD == "linear"
    assert d.layers == 5
    assert d.median_abs == pytest.approx(np.percentile(absolute, 50, method="linear"))
    assert d.median_abs == pytest.approx(0.2)
    assert d.p90_abs == pytest.approx(np.percentile(absolute, 90, method="linear"))
    # scipy's default interpolation is the same linear rule: 0.25 + 0.6 * (2.0 - 0.25)
    assert d.p90_abs == pytest.approx(stats.scoreatpercentile(absolute, 90))
    assert d.p90_abs == pytest.approx(1.3)
    assert d.median_signed == pytest.approx(float(np.median(ERRORS)))
    # Σ|c - i| / Σ i = (2 + 2 + 2 + 0.5 + 1) / 27.5
    assert d.time_weighted_abs == pytest.approx(7.5 / 27.5)


def test_the_share_error_takes_out_the_gap_between_the_sums() -> None:
    # every layer twice as slow in the trace: 100 % error, no share error
    corrected = [LayerTime(n, "Conv", 2 * t) for n, t in (("a", 1e-6), ("b", 3e-6))]
    independent = [LayerTime(n, "Conv", t) for n, t in (("a", 1e-6), ("b", 3e-6))]
    check = compare("twice", corrected, independent)
    assert [m.error for m in check.matched] == pytest.approx([1.0, 1.0])
    assert [m.share_error for m in check.matched] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert check.distribution.share_median_abs == pytest.approx(0.0, abs=1e-12)
    d = compare("toy", CORRECTED, INDEPENDENT).distribution
    shares = np.abs(
        [c * 27.5 / 30 / i - 1 for c, i in ((12, 10), (3, 1), (8, 10), (2, 2.5), (5, 4))]
    )
    assert d.share_median_abs == pytest.approx(np.percentile(shares, 50, method="linear"))
    assert d.share_p90_abs == pytest.approx(np.percentile(shares, 90, method="linear"))


def test_pooled_and_per_op_type_distributions_count_each_layer_once() -> None:
    one = compare("toy", CORRECTED, INDEPENDENT)
    two = compare("twice", [LayerTime("a", "Conv", 3e-6)], [LayerTime("a", "Conv", 2e-6)])
    everything = pooled([one, two])
    errors = np.abs([*ERRORS, 0.5])
    assert everything.layers == 6
    assert everything.p90_abs == pytest.approx(np.percentile(errors, 90, method="linear"))
    groups = by_op_type([one, two])
    assert next(iter(groups)) == "Conv" and groups["Conv"].layers == 3
    assert groups["Conv"].median_abs == pytest.approx(0.2)
    assert sum(d.layers for d in groups.values()) == 6


def test_no_match_gives_an_empty_distribution_and_a_duplicate_name_is_an_error() -> None:
    empty = compare("none", [LayerTime("a", "Conv", 1e-6)], [LayerTime("b", "Conv", 1e-6)])
    assert empty.distribution == ErrorDistribution(0, None, None, None, None)
    assert empty.sum_error is None
    with pytest.raises(ValueError, match="'a' appears twice"):
        compare("dup", [LayerTime("a", "Conv", 1e-6)] * 2, [])
