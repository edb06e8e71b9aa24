"""benchmarks/pitfalls.py, run_all's pitfalls step: the sweep's children over three frameworks
come from the sweep's own expansion, the table is computed from typed scores, and one child
really runs through the agent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from benchmark_scripts import load_script

pitfalls = load_script("pitfalls")
SWEEP: dict[str, Any] = yaml.safe_load(pitfalls.SWEEP.read_text())
Score = pitfalls.Score


def test_every_variant_runs_in_each_framework_in_the_format_it_loads() -> None:
    children = pitfalls.children(SWEEP, pitfalls.FRAMEWORKS)
    variants = [m["name"] for m in SWEEP["spec"]["matrix"]["models"]]
    assert [(c.axes["model"], c.axes["framework"]) for c in children] == [
        (v, f) for v in variants for f in pitfalls.FRAMEWORKS
    ]
    formats = {"onnxruntime": "onnx", "pytorch": "torchscript", "tensorflow": "savedmodel"}
    for child in children:
        spec = child.document["spec"]
        assert spec["model"]["format"] == formats[child.axes["framework"]]
        assert spec["model"]["uri"].startswith("pvc://mlmodelscope-examples/digits")
        entry = next(
            m for m in SWEEP["spec"]["matrix"]["models"] if m["name"] == child.axes["model"]
        )
        assert spec["preprocessing"] == entry["preprocessing"]  # the sweep's variant, as written
    assert pitfalls.claim_of(SWEEP) == "mlmodelscope-examples"
    only = pitfalls.children(SWEEP, ["onnxruntime"], ["scale-255"])
    assert [c.axes["model"] for c in only] == ["scale-255"]


def test_the_table_compares_each_variant_with_correct_in_its_own_framework() -> None:
    scores = [
        Score("correct", "onnxruntime", 360, 0.98, 1.0),
        Score("correct", "pytorch", 360, 0.975, 1.0),
        Score("scale-255", "onnxruntime", 360, 0.2, 0.6),
        Score("scale-255", "pytorch", 360, 0.21, None),
    ]
    text = pitfalls.markdown(scores, {"onnxruntime": "1.0"})
    rows = [line for line in text.splitlines() if line.startswith("| scale-255")]
    assert rows == [
        "| scale-255 | onnxruntime | 20.0 % | 60.0 % | -78.0 | -40.0 |",
        "| scale-255 | pytorch | 21.0 % | - | -76.5 | - |",
    ]
    assert "| correct | pytorch | 97.5 % | 100.0 % | +0.0 | +0.0 |" in text
    assert "(360 samples)" in text and "onnxruntime 1.0" in text
    assert "agree on each variant's top-1 within 1.0 points (widest: scale-255)" in text
    assert pitfalls.agreement(scores) == pytest.approx({"correct": 0.005, "scale-255": 0.01})
    same = [Score("correct", f, 360, 0.98, 1.0) for f in ("onnxruntime", "tensorflow")]
    assert "agree on each variant's top-1 exactly" in pitfalls.markdown(same)
    assert "agree" not in pitfalls.markdown(same[:1])


@pytest.mark.frameworks
def test_a_pitfall_child_runs_through_the_agent(
    digits_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlmodelscope.agent.digits import digits_split

    monkeypatch.setenv("MLMS_PVC_ROOT", "/before")
    (child,) = pitfalls.children(SWEEP, ["onnxruntime"], ["scale-255"])
    with pitfalls.mounted(digits_models, pitfalls.claim_of(SWEEP)) as root:
        assert (root / "mlmodelscope-examples" / "digits.onnx").is_file()
        score = pitfalls.score(child)
    assert os.environ["MLMS_PVC_ROOT"] == "/before"
    assert (score.variant, score.framework) == ("scale-255", "onnxruntime")
    assert score.samples == len(digits_split("test")[1])
    assert score.top1 < 0.5 and score.top5 is not None and score.top5 > score.top1
