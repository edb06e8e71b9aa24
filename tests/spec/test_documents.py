"""Spec validation: good examples pass, bad specs fail naming the exact field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlmodelscope.spec import (
    EvaluationSpec,
    SpecValidationError,
    load_evaluations,
    parse_duration,
    parse_evaluation,
)

EXAMPLES_DIR = Path(__file__).parents[2] / "examples"
EXAMPLES = sorted([*EXAMPLES_DIR.glob("*.yaml"), *EXAMPLES_DIR.glob("cluster/*.yaml")])

GOOD: dict[str, Any] = {
    "apiVersion": "mlmodelscope.io/v1alpha1",
    "kind": "ModelEvaluation",
    "metadata": {"name": "good"},
    "spec": {
        "model": {
            "name": "digits",
            "uri": "file:///models/digits.onnx",
            "format": "onnx",
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
        },
        "framework": {"name": "onnxruntime"},
        "dataset": {"type": "digits"},
    },
}


def mutate(path: str, value: Any) -> dict[str, Any]:
    """GOOD with the dotted ``path`` set to ``value`` (``...`` deletes it)."""
    document = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return document


def test_good_spec_parses_with_defaults() -> None:
    evaluation = parse_evaluation(GOOD)
    assert evaluation.spec.scenario.type == "SingleStream"
    assert evaluation.spec.scenario.batch_sizes == [1]
    assert evaluation.spec.hardware.gpu_count == 0


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(EXAMPLES_DIR)))
def test_every_example_validates(example: Path) -> None:
    assert load_evaluations(example)


def bad(case: str, field: str, value: Any, path: str, text: str) -> Any:
    """A bad-spec case: set ``field`` to ``value``; expect a problem at ``path`` saying
    ``text``."""
    return pytest.param(field, value, path, text, id=case)


PROVIDER = "CUDAExecutionProvider"
BAD_SPECS = [
    bad("typo hint", "spec.scenario.batchSize", [1], "spec.scenario.batchSize", "did you mean"),
    bad("format enum", "spec.model.format", "pickle", "spec.model.format", "'onnx', 'torchscript'"),
    bad("framework enum", "spec.framework.name", "caffe", "spec.framework.name", "'pytorch'"),
    bad(
        "server needs qps",
        "spec.scenario",
        {"type": "Server"},
        "spec.scenario.targetQPS",
        "required when type is Server",
    ),
    bad(
        "qps only for server",
        "spec.scenario",
        {"targetQPS": 10},
        "spec.scenario.targetQPS",
        "applies only to scenario type Server",
    ),
    bad(
        "unique batch sizes",
        "spec.scenario",
        {"batchSizes": [1, 2, 1]},
        "spec.scenario.batchSizes",
        "must be unique",
    ),
    bad(
        "positive batch sizes",
        "spec.scenario",
        {"batchSizes": [0, 4]},
        "spec.scenario.batchSizes",
        "must be > 0",
    ),
    bad("gpus need gpu", "spec.hardware", {"gpus": 2}, "spec.hardware.gpus", "needs device: gpu"),
    bad(
        "product needs gpu",
        "spec.hardware",
        {"gpuProduct": "NVIDIA-A100"},
        "spec.hardware.gpuProduct",
        "needs device: gpu",
    ),
    bad(
        "synthetic needs shape",
        "spec.dataset",
        {"type": "synthetic"},
        "spec.dataset.shape",
        "required when type is synthetic",
    ),
    bad(
        "imagefolder needs path",
        "spec.dataset",
        {"type": "imagefolder"},
        "spec.dataset.path",
        "required when type is imagefolder",
    ),
    bad("bad duration", "spec.timeout", "ten minutes", "spec.timeout", "not a duration"),
    # Values the API server would refuse in the Job (issue 15, defect 1): refused in the spec.
    bad(
        "memory quantity",
        "spec.hardware",
        {"resources": {"requests": {"memory": "4GB!"}}},
        "spec.hardware.resources.requests.memory",
        "not a Kubernetes quantity",
    ),
    bad(
        "gpu product label value",
        "spec.hardware",
        {"device": "gpu", "gpuProduct": "NVIDIA A100"},
        "spec.hardware.gpuProduct",
        "should match pattern",
    ),
    bad(
        "exists toleration with value",
        "spec.hardware",
        {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
        "spec.hardware.tolerations[0].value",
        "leave value empty",
    ),
    bad(
        "ttl overflows int32",
        "spec.ttlAfterFinished",
        "1000000h",
        "spec.ttlAfterFinished",
        "must be at most 596523h",
    ),
    bad("timeout overflows int32", "spec.timeout", "1000000h", "spec.timeout", "at most 596523h"),
    bad("bad sha256", "spec.model.sha256", "abc", "spec.model.sha256", "should match pattern"),
    bad("missing uri", "spec.model.uri", ..., "spec.model.uri", "required field is missing"),
    bad(
        "shape dims",
        "spec.model.inputs.0.shape",
        [-1, 0, 8],
        "spec.model.inputs[0].shape",
        "dimensions must be positive",
    ),
    bad(
        "two step members",
        "spec.preprocessing",
        [{"scale": {"factor": 2}, "toFloat": {}}],
        "spec.preprocessing[0]",
        "set exactly one of",
    ),
    bad(
        "normalize lengths",
        "spec.preprocessing",
        [{"normalize": {"mean": [0.5], "std": [1, 2]}}],
        "spec.preprocessing[0].normalize.std",
        "same number of channels",
    ),
    bad(
        "provider only for ort",
        "spec.framework",
        {"name": "pytorch", "executionProvider": PROVIDER},
        "spec.framework.executionProvider",
        "applies only to framework onnxruntime",
    ),
    bad(
        "format for framework",
        "spec.framework",
        {"name": "tensorflow"},
        "spec.model.format",
        "cannot be loaded by framework 'tensorflow'",
    ),
    bad(
        "cuda provider on cpu",
        "spec.framework",
        {"name": "onnxruntime", "executionProvider": PROVIDER},
        "spec.framework.executionProvider",
        "needs hardware.device: gpu",
    ),
    bad("bad name", "metadata.name", "Not_A_DNS_Name!", "metadata.name", "should match pattern"),
    bad(
        "sampling bound",
        "spec.tracing",
        {"sampling": 1.5},
        "spec.tracing.sampling",
        "less than or equal to 1",
    ),
]


@pytest.mark.parametrize(("field", "value", "path", "expected"), BAD_SPECS)
def test_bad_spec_names_the_field(field: str, value: Any, path: str, expected: str) -> None:
    with pytest.raises(SpecValidationError) as info:
        parse_evaluation(mutate(field, value), "bad.yaml")
    messages = [str(p) for p in info.value.problems]
    assert any(m.startswith(f"{path}: ") and expected in m for m in messages), messages


def test_enough_bad_specs() -> None:
    assert len(BAD_SPECS) >= 10


def test_error_lists_every_problem_and_the_source(tmp_path: Path) -> None:
    document = mutate("spec.scenario", {"type": "Server", "batchSizes": [2, 2]})
    file = tmp_path / "two.yaml"
    file.write_text(yaml.safe_dump_all([GOOD, document]))
    with pytest.raises(SpecValidationError) as info:
        load_evaluations(file)
    text = str(info.value)
    assert "document 2" in text
    assert "spec.scenario" in text


def test_wrong_kind_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(SpecValidationError, match="kind: ModelEvaluation"):
        parse_evaluation({**GOOD, "kind": "Pod"})
    file = tmp_path / "broken.yaml"
    file.write_text("spec: [unclosed")
    with pytest.raises(SpecValidationError, match="not valid YAML"):
        load_evaluations(file)


def test_fractional_qps_may_be_a_string() -> None:
    spec = EvaluationSpec.model_validate(
        {**GOOD["spec"], "scenario": {"type": "Server", "targetQPS": "12.5"}}
    )
    assert spec.scenario.target_qps == 12.5
    spec = EvaluationSpec.model_validate(
        {**GOOD["spec"], "scenario": {"type": "Server", "targetQPS": "auto"}}
    )
    assert spec.scenario.target_qps == "auto"


@pytest.mark.parametrize(
    ("text", "seconds"), [("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0), ("10us", 1e-5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_roundtrip_keeps_camel_case() -> None:
    evaluation = parse_evaluation(mutate("spec.scenario", {"type": "Server", "targetQPS": 5}))
    dumped = evaluation.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["spec"]["scenario"]["targetQPS"] == 5
    assert parse_evaluation(dumped) == evaluation
