"""Three real result documents for the report tests: the digits CNN run by `mlms run` in ONNX
Runtime and PyTorch, and once more in ONNX Runtime with a wrong preprocessing scale and other
batch sizes, so a comparison has framework, stack and spec differences and an accuracy drop
(the ``results`` fixture, one real run per test module: tests/report/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from mlmodelscope.cli import app

QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}
NAMES = ("ort", "torch", "ort-wrong")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder `mlms run` wrote three real result documents (and comparison.json) to."""
    from mlmodelscope.agent.digits import digits_evaluation, ensure_digits_models

    models = ensure_digits_models()
    folder = tmp_path_factory.mktemp("compare")
    spec = folder / "spec.yaml"
    wrong_scale = [{"scale": {"factor": 1.0}}, {"layout": {"from": "HWC", "to": "CHW"}}]
    spec.write_text(
        yaml.safe_dump_all(
            [
                digits_evaluation(models, "onnxruntime", "ort", scenario={**QUICK}),
                digits_evaluation(models, "pytorch", "torch", scenario={**QUICK}),
                digits_evaluation(
                    models,
                    "onnxruntime",
                    "ort-wrong",
                    scenario={**QUICK, "batchSizes": [1, 4]},
                    preprocessing=wrong_scale,
                ),
            ]
        )
    )
    out = folder / "results"
    result = CliRunner().invoke(app, ["run", str(spec), "-o", str(out)], env=store_env(out))
    assert result.exit_code == 0, result.output
    assert (out / "comparison.json").is_file()
    return out


def store_env(results: Path) -> dict[str, str]:
    """The fixture's own results store (SQLite), which `mlms run` records the runs in."""
    return {"MLMS_STORE_URL": f"sqlite:///{results.parent / 'store.db'}"}


def doc(results: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((results / f"{name}.json").read_text())
    return data
