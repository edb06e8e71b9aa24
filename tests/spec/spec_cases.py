"""Spec documents shared by the local validation tests and the same cases on the real API
server: a good ModelEvaluation, ways to break it, and the bad-spec table whose every case
must be refused naming the same field by pydantic, `mlms validate` and the CRD."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlmodelscope.spec import MAX_CHILDREN

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
    bad(
        "fresh processes need repetitions",
        "spec.scenario",
        {"repetitionProcess": "fresh"},
        "spec.scenario.repetitionProcess",
        "set repetitions 2 or more",
    ),
    bad(
        "fresh processes need the builtin driver",
        "spec.scenario",
        {"repetitionProcess": "fresh", "driver": "loadgen"},
        "spec.scenario.repetitionProcess",
        "remove repetitionProcess or set driver builtin",
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
    bad(
        "coco needs annotations",
        "spec.dataset",
        {"type": "coco", "path": "pvc://data/images"},
        "spec.dataset.annotations",
        "required when type is coco",
    ),
    bad(
        "coco needs path",
        "spec.dataset",
        {"type": "coco", "annotations": "pvc://data/instances.json"},
        "spec.dataset.path",
        "masks, pairs or coco (the folder of images)",
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
    # Values the API server would refuse in the Job's pod (issue 32): label syntax.
    bad(
        "node selector key",
        "spec.hardware",
        {"nodeSelector": {"Bad Key!": "gpu"}},
        "spec.hardware.nodeSelector",
        "key 'Bad Key!' is not a label key",
    ),
    bad(
        "node selector key prefix",
        "spec.hardware",
        {"nodeSelector": {"Example.com/pool": "gpu"}},
        "spec.hardware.nodeSelector",
        "is not a label key",
    ),
    bad(
        "node selector value",
        "spec.hardware",
        {"nodeSelector": {"pool": "a b!"}},
        "spec.hardware.nodeSelector.pool",
        "'a b!' is not a label value",
    ),
    bad(
        "toleration key",
        "spec.hardware",
        {"tolerations": [{"key": "Bad Key!", "operator": "Exists"}]},
        "spec.hardware.tolerations[0].key",
        "must be a label key",
    ),
    bad(
        "toleration without key",
        "spec.hardware",
        {"tolerations": [{"effect": "NoSchedule"}]},
        "spec.hardware.tolerations[0].key",
        "required unless operator is Exists",
    ),
    bad(
        "toleration value",
        "spec.hardware",
        {"tolerations": [{"key": "dedicated", "value": "a b!"}]},
        "spec.hardware.tolerations[0].value",
        "'a b!' is not a label value",
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
    *(
        bad(
            f"crop border {value!r}",
            "spec.task",
            {"cropBorder": value},
            "spec.task.cropBorder",
            "must be a number of pixels from 0 to 16777216, or 'scale'",
        )
        for value in (-1, "half", "4", 2.5)
    ),
    bad("channels enum", "spec.task", {"channels": "Y"}, "spec.task.channels", "'rgb' or 'y'"),
]


# ---------------------------------------------------------------------------- sweeps

MODEL: dict[str, Any] = {
    "name": "digits-cnn",
    "uri": "file:///models/digits.onnx",
    "format": "onnx",
    "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
}
EXPORTS = [
    {"format": "torchscript", "uri": "file:///models/digits.torchscript.pt"},
    {"format": "savedmodel", "uri": "file:///models/digits_savedmodel"},
]
SWEEP: dict[str, Any] = {
    "apiVersion": "mlmodelscope.io/v1alpha1",
    "kind": "EvaluationSweep",
    "metadata": {"name": "s"},
    "spec": {
        "matrix": {
            "models": [{"name": "digits", "model": MODEL, "exports": EXPORTS}],
            "frameworks": ["onnxruntime"],
        },
        "template": {"dataset": {"type": "digits"}},
    },
}


def sweep(**matrix: Any) -> dict[str, Any]:
    """SWEEP with matrix axes replaced (None deletes one)."""
    document = copy.deepcopy(SWEEP)
    for key, value in matrix.items():
        if value is None:
            document["spec"]["matrix"].pop(key, None)
        else:
            document["spec"]["matrix"][key] = value
    return document


def with_spec(document: dict[str, Any], **spec: Any) -> dict[str, Any]:
    document = copy.deepcopy(document)
    document["spec"].update(spec)
    return document


HOSTILE: list[Any] = [
    pytest.param(
        sweep(models=[]), "spec.matrix.models: an empty axis creates no ModelEvaluations",
        id="empty models",
    ),
    pytest.param(
        sweep(frameworks=[]), "spec.matrix.frameworks: an empty axis", id="empty frameworks"
    ),
    pytest.param(sweep(hardware=[]), "spec.matrix.hardware: an empty axis", id="empty hardware"),
    pytest.param(
        sweep(scenarios=[]), "spec.matrix.scenarios: an empty axis", id="empty scenarios"
    ),
    pytest.param(
        sweep(batchSizes=[]), "spec.matrix.batchSizes: an empty axis", id="empty batch sizes"
    ),
    pytest.param(
        sweep(
            models=[{"name": f"m{i}", "model": MODEL, "exports": EXPORTS} for i in range(10)],
            frameworks=["onnxruntime", "pytorch", "tensorflow"],
            batchSizes=[1, 2, 4, 8, 16, 32, 64],
        ),
        f"spec.matrix: the matrix has more than {MAX_CHILDREN} combinations",
        id="over the cap",
    ),
    pytest.param(
        sweep(models=[{"name": "a", "model": MODEL}, {"name": "a", "model": MODEL}]),
        "spec.matrix.models: model names must be unique",
        id="duplicate model names",
    ),
    pytest.param(
        sweep(frameworks=["onnxruntime", "onnxruntime"]),
        "spec.matrix.frameworks: frameworks must be unique",
        id="duplicate frameworks",
    ),
    pytest.param(
        sweep(hardware=[{"device": "gpu", "gpuProduct": p} for p in ("T4", "t4")]),
        "spec.matrix.hardware: hardware entries must be unique",
        id="duplicate hardware",
    ),
    pytest.param(
        sweep(scenarios=["Offline", "Offline"]),
        "spec.matrix.scenarios: scenarios must be unique",
        id="duplicate scenarios",
    ),
    pytest.param(
        sweep(batchSizes=[8, 8]), "spec.matrix.batchSizes: batch sizes must be unique",
        id="duplicate batch sizes",
    ),
    pytest.param(
        sweep(batchSizes=[0]), "spec.matrix.batchSizes: every batch size must be > 0",
        id="batch size 0",
    ),
    pytest.param(
        sweep(models=[{"name": "x" * 41, "model": MODEL}]),
        "spec.matrix.models[0].name: String should have at most 40 characters",
        id="model name too long",
    ),
    pytest.param(
        sweep(models=[{"name": "Digits_v2", "model": MODEL}]),
        "spec.matrix.models[0].name: String should match pattern",
        id="model name not a DNS label",
    ),
    pytest.param(
        with_spec(sweep(), parallelism=0),
        "spec.parallelism: Input should be greater than or equal to 1",
        id="parallelism 0",
    ),
    pytest.param(
        with_spec(sweep(), repeats=0),
        "spec.repeats: Input should be greater than or equal to 1",
        id="repeats 0",
    ),
    pytest.param(
        with_spec(sweep(batchSizes=list(range(1, 12))), repeats=20),
        "spec.repeats: the matrix's combinations times repeats make more than 200",
        id="repeats over the cap",
    ),
    pytest.param(
        with_spec(sweep(), failurePolicy="Retry"),
        "spec.failurePolicy: Input should be 'Continue' or 'Stop'",
        id="unknown failure policy",
    ),
    pytest.param(
        sweep(frameworks=["onnxruntime"], modelRef="digits"),
        "spec.matrix.modelRef: unknown field",
        id="model refs are not supported yet",
    ),
    pytest.param(
        with_spec(sweep(), template={"dataset": {"type": "digits"}, "model": MODEL}),
        "spec.template.model: unknown field",
        id="model in the template",
    ),
    pytest.param(
        sweep(models=[{"name": "d", "model": MODEL, "exports": [EXPORTS[0], EXPORTS[0]]}]),
        "spec.matrix.models[0].exports: each format may appear once in exports",
        id="duplicate export formats",
    ),
    pytest.param(
        with_spec(sweep(), template={"task": {"type": "classification"}}),
        "spec.template.dataset: required unless every spec.matrix.models entry sets its own",
        id="no dataset in the template or the entry",
    ),
    pytest.param(
        sweep(models=[{"name": "s", "model": MODEL, "task": {"type": "segmentation"}}]),
        "spec.matrix.models[0].task.numClasses: required when type is segmentation",
        id="an entry's segmentation task without numClasses",
    ),
    pytest.param(
        sweep(models=[{"name": "s", "model": MODEL, "dataset": {"type": "masks", "path": "i"}}]),
        "spec.matrix.models[0].dataset.masks: required when type is masks",
        id="an entry's masks dataset without masks",
    ),
]  # fmt: skip


# ---------------------------------------------------------------------------- Models

API = "mlmodelscope.io/v1alpha1"
SCALE = [{"scale": {"factor": 0.0625}}, {"layout": {"from": "HWC", "to": "CHW"}}]
DIGITS: dict[str, Any] = {
    "apiVersion": API,
    "kind": "Model",
    "metadata": {"name": "digits-cnn"},
    "spec": {
        "task": "image-classification",
        "dataset": "digits",
        "model": {
            "name": "digits-cnn",
            "uri": "file:///models/digits.onnx",
            "format": "onnx",
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
            "outputs": [{"name": "logits", "shape": [-1, 10]}],
        },
        "exports": [{"format": "torchscript", "uri": "file:///models/digits.torchscript.pt"}],
        "preprocessing": SCALE,
        "postprocessing": [{"softmax": {}}, {"topk": {"k": 5}}],
    },
}


def model(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Model", "metadata": {"name": name}, "spec": spec}


def evaluation(framework: str = "onnxruntime", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModelEvaluation",
        "metadata": {"name": "e", "namespace": "team"},
        "spec": {
            "modelRef": {"name": "digits-cnn"},
            "framework": {"name": framework},
            "dataset": {"type": "digits"},
            **spec,
        },
    }


# ---------------------------------------------------------------------------------- the kind


def ref_sweep(*entries: dict[str, Any], frameworks: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "EvaluationSweep",
        "metadata": {"name": "s"},
        "spec": {
            "matrix": {
                "models": list(entries),
                "frameworks": frameworks or ["onnxruntime", "pytorch"],
            },
            "template": {"dataset": {"type": "digits"}},
        },
    }
