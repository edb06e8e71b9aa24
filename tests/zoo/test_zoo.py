"""The zoo builds small variants of its architectures, exports them, and caches them by key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from mlmodelscope.analysis.graph import layer_costs
from mlmodelscope.cli import app
from mlmodelscope.zoo import ENTRIES, ensure_zoo_model
from mlmodelscope.zoo.build import sha256_of, zoo_key


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zoo-cache")


def test_the_zoo_has_the_issue_architectures() -> None:
    assert {"resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vgg16", "bert_base"} <= set(
        ENTRIES
    )


def test_onnx_export_agrees_with_pytorch_and_is_cached(cache: Path) -> None:
    artifact = ensure_zoo_model("resnet18", small=True, cache_dir=cache)
    assert artifact.path.is_file() and artifact.path.parent.parent.name == "resnet18"
    assert artifact.card["onnxMaxAbsDiff"] < 1e-3  # checked against PyTorch at build time
    assert artifact.sha256 == sha256_of(artifact.path)
    assert artifact.card["flops"] == sum(c.flops for c in layer_costs(artifact.path))
    assert artifact.card["inputs"] == [
        {"name": "input", "shape": ["batch", 3, 32, 32], "dtype": "float32"}
    ]
    mtime = artifact.path.stat().st_mtime_ns
    again = ensure_zoo_model("resnet18", small=True, cache_dir=cache)
    assert again.path == artifact.path and again.path.stat().st_mtime_ns == mtime
    params = dict(artifact.card["params"])
    key = zoo_key("resnet18", "onnx", 1, params)
    assert artifact.path.parent.name == key  # the parameters, batch and format are the key
    assert zoo_key("resnet18", "onnx", 1, {**params, "resolution": 48}) != key
    assert zoo_key("resnet18", "onnx", 2, params) != key
    assert zoo_key("resnet18", "torchscript", 1, params) != key


def test_bert_takes_token_ids_and_runs_in_onnx_runtime_at_any_batch(cache: Path) -> None:
    artifact = ensure_zoo_model("bert_base", small=True, cache_dir=cache)
    session = ort.InferenceSession(str(artifact.path), providers=["CPUExecutionProvider"])
    ids = np.ones((3, 16), dtype=np.int64)
    (hidden,) = session.run(None, {"input_ids": ids})
    assert hidden.shape == (3, 16, 64)
    assert {c.op_type for c in layer_costs(artifact.path)} >= {"MatMul", "Softmax"}


def test_torchscript_and_torch_export_match_pytorch(cache: Path) -> None:
    script = ensure_zoo_model(
        "mlp", "torchscript", small=True, params={"hidden": 16}, cache_dir=cache
    )
    assert script.path.name == "model.torchscript.pt" and script.card["maxAbsDiff"] < 1e-4
    exported = ensure_zoo_model("mlp", "torch-export", small=True, cache_dir=cache)
    assert exported.path.name == "model.pt2" and exported.card["maxAbsDiff"] < 1e-4


def test_bad_requests_name_the_field(cache: Path) -> None:
    with pytest.raises(ValueError, match="name: no zoo model 'alexnet'"):
        ensure_zoo_model("alexnet", cache_dir=cache)
    with pytest.raises(ValueError, match="format: bert_base has no SavedModel"):
        ensure_zoo_model("bert_base", "savedmodel", cache_dir=cache)
    with pytest.raises(ValueError, match="params: resnet18 has no parameter 'depth'"):
        ensure_zoo_model("resnet18", params={"depth": 2}, cache_dir=cache)
    with pytest.raises(ValueError, match="format: 'tflite' is not one of"):
        ensure_zoo_model("resnet18", "tflite", cache_dir=cache)


def test_cli_lists_and_builds(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLMS_CACHE_DIR", str(cache))
    listed = CliRunner().invoke(app, ["zoo", "list"])
    assert listed.exit_code == 0 and "efficientnet_b0" in listed.output
    built = CliRunner().invoke(
        app, ["zoo", "build", "mlp", "--small", "--param", "hidden=16", "--format", "torchscript"]
    )
    assert built.exit_code == 0, built.output
    path = Path(built.output.splitlines()[0])
    assert path.is_file() and path.is_relative_to(cache)  # the test above built it
    assert f"sha256 {sha256_of(path)}" in built.output
    bad = CliRunner().invoke(app, ["zoo", "build", "nope"])
    assert bad.exit_code == 2 and "no zoo model 'nope'" in bad.output


def test_savedmodel_comes_from_keras_applications(cache: Path) -> None:
    """Same architecture, other random weights, NHWC: the card says so."""
    import tensorflow as tf

    artifact = ensure_zoo_model("mobilenet_v2", "savedmodel", small=True, cache_dir=cache)
    card = artifact.card["savedmodel"]
    assert card["layout"] == "NHWC" and "not the PyTorch weights" in card["weights"]
    assert artifact.sha256 == sha256_of(artifact.path)
    serve = tf.saved_model.load(str(artifact.path)).signatures["serving_default"]
    (spec,) = card["inputs"]
    (logits,) = serve(**{spec["name"]: tf.zeros((2, 32, 32, 3))}).values()
    assert tuple(logits.shape) == (2, 1000)


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_a_trace_made_on_the_cpu_names_no_device(name: str) -> None:
    """The zoo traces on the CPU; a device constant in the graph (``torch.arange(...,
    device=x.device)`` makes one) would pin CPU tensors into a model served on CUDA."""
    import torch

    from mlmodelscope.zoo.build import _example
    from mlmodelscope.zoo.registry import torch_factory

    zoo_entry = ENTRIES[name]
    params = zoo_entry.resolve(small=True)
    model = torch_factory(name)(params).eval()
    with torch.no_grad():
        traced = torch.jit.trace(model, tuple(_example(zoo_entry, params, 2)), check_trace=False)
    graph = str(traced.inlined_graph)
    assert 'value="cpu"' not in graph, [line for line in graph.splitlines() if '"cpu"' in line]
