"""`mlms run --runtime docker`'s plan (agent/container.py) with no engine: every local file the
spec names becomes a read-only mount and the spec points at it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlmodelscope.agent import container
from mlmodelscope.spec import ModelEvaluation

DETECTION = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "detection.yaml"


def test_a_detection_datasets_images_and_annotations_are_both_mounted(tmp_path: Path) -> None:
    document = yaml.safe_load(DETECTION.read_text())
    (tmp_path / "build" / "shapes" / "images").mkdir(parents=True)
    for name in ("build/detector.onnx", "build/shapes/instances.json"):
        (tmp_path / name).write_bytes(b"{}")
    plan = container.plan(ModelEvaluation.model_validate(document), tmp_path)
    dataset = plan.document["spec"]["dataset"]
    assert dataset["path"] == "/mlms/data/images"
    assert dataset["annotations"] == "/mlms/data/instances.json"
    assert plan.mounts[(tmp_path / "build/shapes/instances.json").resolve()] == Path(
        "/mlms/data/instances.json"
    )
    ModelEvaluation.model_validate(plan.document)


def test_a_claim_in_any_dataset_field_is_refused_naming_it(tmp_path: Path) -> None:
    document = yaml.safe_load(DETECTION.read_text())
    (tmp_path / "build" / "shapes" / "images").mkdir(parents=True)
    (tmp_path / "build" / "detector.onnx").write_bytes(b"{}")
    document["spec"]["dataset"]["annotations"] = "pvc://data/instances.json"
    with pytest.raises(container.ContainerRuntimeError, match=r"spec\.dataset\.annotations"):
        container.plan(ModelEvaluation.model_validate(document), tmp_path)
