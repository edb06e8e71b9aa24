"""The Model catalog (examples/catalog/): every manifest validates and resolves, none pins a
digest it could not have computed, the ImageNet manifests carry ImageNet's statistics, and the
Models the project builds run for real through `mlms run --models examples/catalog/` (the
digits CNN and a pitfall variant, the random-weight ResNet-18). The Models whose weights CI
does not have run their steps and tensors on stand-in networks of the same signature."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mlmodelscope.agent.processing import Preprocessor
from mlmodelscope.cli import app
from mlmodelscope.spec.manifest import ModelManifest, resolve_model
from mlmodelscope.spec.resources import FileModels

ROOT = Path(__file__).parents[2]
CATALOG = ROOT / "examples" / "catalog"
CATALOG_FILES = sorted(CATALOG.glob("*.yaml"))
SWEEP = ROOT / "examples" / "sweeps" / "digits-catalog.yaml"
API = "mlmodelscope.io/v1alpha1"
CLAIM = "mlmodelscope-examples"

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
TORCHVISION_IMAGENET = ["resnet50", "resnet50-bgr", "mobilenetv2", "efficientnet-b0"]
"""Models with torchvision's ImageNet eval transform: resize 256, crop 224, /255, mean/std."""
IMAGENET_ONNX = [*TORCHVISION_IMAGENET, "resnet50-no-crop"]
DIGITS_PITFALLS = ["digits-cnn-scale-255", "digits-cnn-unscaled", "digits-cnn-imagenet-normalized"]
BASED_ON = {"resnet50-bgr": "resnet50", "resnet50-no-crop": "resnet50"} | dict.fromkeys(
    DIGITS_PITFALLS, "digits-cnn"
)
QUICK = {"type": "Offline", "batchSizes": [32], "warmup": 1, "minQueryCount": 2,
         "minDuration": "10ms"}  # fmt: skip


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture(scope="module")
def catalog() -> FileModels:
    found = FileModels.read([CATALOG])
    assert [str(e) for e in found.errors] == []
    return found


def evaluation(name: str, model_ref: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModelEvaluation",
        "metadata": {"name": name},
        "spec": {"modelRef": {"name": model_ref}, **spec},
    }


def run(spec: Path, models: Path, out: Path, **env: str) -> dict[str, dict[str, Any]]:
    """`mlms run SPEC --models MODELS --no-store -o OUT`; the result documents by name."""
    result = CliRunner().invoke(
        app,
        ["run", str(spec), "--models", str(models), "--no-store", "-o", str(out)],
        env={**os.environ, "OTEL_SDK_DISABLED": "true", **env},
    )
    assert result.exit_code == 0, result.output
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json") if p.stem != "comparison"}


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


# ------------------------------------------------------------------------- the manifests


def test_the_catalog_and_its_sweep_validate_with_the_cli() -> None:
    """`mlms validate examples/catalog/ examples/sweeps/digits-catalog.yaml`: every Model
    document is checked (✓ per document), and the sweep's modelRefs resolve against them."""
    result = CliRunner().invoke(app, ["validate", str(CATALOG), str(SWEEP)])
    assert result.exit_code == 0, result.output
    names = [d["metadata"]["name"] for f in CATALOG_FILES for d in documents(f)]
    assert len(names) == len(set(names)) >= 12
    for name in names:
        assert f", {name})" in result.output
    assert "digits-catalog): 4 ModelEvaluations" in result.output
    assert "✗" not in result.output


def test_every_model_parses_and_its_chain_resolves(catalog: FileModels) -> None:
    names = {d["metadata"]["name"] for f in CATALOG_FILES for d in documents(f)}
    assert set(catalog.models) == names
    for name in names:
        resolved = resolve_model(name, catalog.lookup())
        chain = [m.metadata.name for m in resolved.chain]
        assert chain == ([name, BASED_ON[name]] if name in BASED_ON else [name])
        assert resolved.task and resolved.dataset
        assert resolved.postprocessing
    for variant, base in BASED_ON.items():
        resolved, root = (resolve_model(n, catalog.lookup()) for n in (variant, base))
        assert resolved.model == root.model and resolved.exports == root.exports
        assert resolved.postprocessing == root.postprocessing
        assert resolved.preprocessing != root.preprocessing  # the only thing a pitfall changes


@pytest.mark.parametrize("path", CATALOG_FILES, ids=lambda p: p.name)
def test_no_manifest_pins_a_digest_and_each_says_how(path: Path) -> None:
    """Never an invented digest: the catalog pins none, and says how to pin yours."""
    text = path.read_text()
    assert "mlms hash" in text
    assert "sha256:" not in "\n".join(line.split("#")[0] for line in text.splitlines())
    for document in documents(path):
        spec = document["spec"]
        blocks = [spec.get("model") or {}, *spec.get("exports", [])]
        assert [b for b in blocks if "sha256" in b] == []


def steps(resolved_steps: Any) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json", by_alias=True, exclude_unset=True) for s in resolved_steps]


@pytest.mark.parametrize("name", IMAGENET_ONNX)
def test_imagenet_manifests_use_imagenet_statistics(catalog: FileModels, name: str) -> None:
    resolved = resolve_model(name, catalog.lookup())
    assert (resolved.task, resolved.dataset) == ("image-classification", "imagenet-1k")
    pre = {next(iter(s)): next(iter(s.values())) for s in steps(resolved.preprocessing)}
    assert pre["normalize"] == {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    assert pre["scale"]["factor"] == pytest.approx(1 / 255)
    order = list(pre)
    assert order[0] == "decode" and order[-1] == "layout"
    assert pre["layout"] == {"from": "HWC", "to": "CHW"}
    tensor = resolved.model.inputs[0]
    assert (tensor.shape, tensor.layout) == ([-1, 3, 224, 224], "NCHW")
    assert resolved.model.outputs[0].shape == [-1, 1000]
    if name in TORCHVISION_IMAGENET:
        assert (pre["resize"]["height"], pre["resize"]["width"]) == (256, 256)
        assert pre["centerCrop"] == {"height": 224, "width": 224}
        bicubic = name == "efficientnet-b0"  # torchvision: BICUBIC for EfficientNet only
        assert pre["resize"]["interpolation"] == ("bicubic" if bicubic else "bilinear")
    assert ("channelOrder" in pre) == (name == "resnet50-bgr")


def png(height: int, width: int, seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def test_preprocessing_yields_what_each_image_model_takes(catalog: FileModels) -> None:
    """The agent's own preprocessing on a non-square image: the declared input shape, and the
    value range each architecture trained on (ImageNet-normalized, or [-1, 1] for Inception)."""
    image = png(375, 500, seed=1)
    for name in [*IMAGENET_ONNX, "inception-v3"]:
        resolved = resolve_model(name, catalog.lookup())
        assert resolved.preprocessing is not None
        x = Preprocessor(resolved.preprocessing)(image)
        assert [-1, *x.shape] == resolved.model.inputs[0].shape, name
        assert x.dtype == np.float32
        if name == "inception-v3":  # NHWC, no transpose, scaled to [-1, 1]
            assert x.shape[-1] == 3 and -1.0 <= x.min() < -0.9 and 0.9 < x.max() <= 1.0
            white = Preprocessor(resolved.preprocessing)(png(300, 300, seed=2))
            assert white.min() >= -1.0 and white.max() <= 1.0
        else:  # CHW; per-channel (x - mean) / std of [0, 1] values
            lows = (0 - np.array(IMAGENET_MEAN)) / IMAGENET_STD
            highs = (1 - np.array(IMAGENET_MEAN)) / IMAGENET_STD
            assert np.all(x.reshape(3, -1).min(1) >= lows - 1e-5), name
            assert np.all(x.reshape(3, -1).max(1) <= highs + 1e-5), name


# ------------------------------------------------------------------ real runs: the digits


@pytest.fixture()
def digits_claim(tmp_path: Path, digits_models: Path) -> Path:
    """A $MLMS_PVC_ROOT whose examples claim is the built digits models (as the dev cluster's
    claim holds them), so the catalog's pvc:// URIs resolve locally."""
    root = tmp_path / "pvc"
    root.mkdir()
    (root / CLAIM).symlink_to(digits_models, target_is_directory=True)
    return root


def test_the_digits_catalog_model_runs_and_a_pitfall_scores_lower(
    tmp_path: Path, digits_claim: Path
) -> None:
    """The catalog's digits-cnn through a ModelEvaluation's modelRef, the real agent on the
    built model; its basedOn variant digits-cnn-scale-255 runs the same file and loses."""
    common = {
        "framework": {"name": "onnxruntime"},
        "dataset": {"type": "digits", "split": "test"},
        "scenario": QUICK,
    }
    spec = write(
        tmp_path / "eval.yaml",
        evaluation("digits-by-ref", "digits-cnn", **common),
        evaluation("digits-scale-255", "digits-cnn-scale-255", **common),
    )
    results = run(spec, CATALOG, tmp_path / "out", MLMS_PVC_ROOT=str(digits_claim))
    good, bad = results["digits-by-ref"], results["digits-scale-255"]
    print(f"\ntop-1: digits-cnn {good['accuracy']['top1']:.4f}, "
          f"digits-cnn-scale-255 {bad['accuracy']['top1']:.4f}")  # fmt: skip
    assert good["status"] == "Succeeded" and good["accuracy"]["top1"] > 0.9
    assert bad["accuracy"]["top1"] < 0.5
    manifest = good["evaluation"]["model_manifest"]
    assert manifest["name"] == "digits-cnn"
    assert [c["name"] for c in manifest["chain"]] == ["digits-cnn"]
    assert manifest["chain"][0]["source"].startswith(str(CATALOG / "digits-cnn.yaml"))
    assert (manifest["task"], manifest["dataset"]) == ("image-classification", "digits")
    chain = bad["evaluation"]["model_manifest"]["chain"]
    assert [c["name"] for c in chain] == ["digits-cnn-scale-255", "digits-cnn"]
    assert chain[0]["source"].startswith(str(CATALOG / "digits-pitfalls.yaml"))
    assert good["spec"]["model"] == bad["spec"]["model"]  # the same file, other preprocessing
    assert good["spec"]["model"]["uri"] == f"pvc://{CLAIM}/digits.onnx"
    assert good["spec"]["preprocessing"][0] == {"scale": {"factor": 0.0625}}


# ------------------------------------------------------------ real runs: random ResNet-18


def ensure_resnet18(size: int) -> Path:
    """benchmarks/resnet18.py's cached build (under $MLMS_CACHE_DIR or the user cache, shared
    with the benchmarks): ~30 s on two cores the first time, then reused."""
    script = ROOT / "benchmarks" / "resnet18.py"
    spec = importlib.util.spec_from_file_location("catalog_resnet18", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built: Path = module.ensure_resnet18_models(size)
    return built


@pytest.mark.frameworks
@pytest.mark.slow
def test_the_random_resnet18_catalog_model_runs_on_synthetic_data(tmp_path: Path) -> None:
    """resnet18-random as the catalog says: built by benchmarks/resnet18.py at 224, read from
    the examples claim, synthetic CHW samples, no preprocessing, no accuracy pass."""
    claim = tmp_path / "pvc" / CLAIM
    claim.mkdir(parents=True)
    (claim / "resnet18").symlink_to(ensure_resnet18(224), target_is_directory=True)
    spec = write(
        tmp_path / "eval.yaml",
        evaluation(
            "resnet18-timing",
            "resnet18-random",
            framework={"name": "onnxruntime"},
            dataset={"type": "synthetic", "shape": [3, 224, 224], "layout": "CHW", "size": 4},
            scenario={**QUICK, "type": "SingleStream", "batchSizes": [1], "accuracy": False},
        ),
    )
    (result,) = run(spec, CATALOG, tmp_path / "out", MLMS_PVC_ROOT=str(tmp_path / "pvc")).values()
    assert result["status"] == "Succeeded"
    assert result["evaluation"]["model_manifest"]["chain"][0]["source"].startswith(
        str(CATALOG / "resnet18-random.yaml")
    )
    assert result["spec"]["model"]["uri"] == f"pvc://{CLAIM}/resnet18/resnet18.onnx"
    (measured,) = result["results"]
    # Measured, VALID or not: two queries on a busy machine may be unstable (not this test's).
    assert measured["batch_size"] == 1 and measured["latency_ms"]["p50"] > 0
    assert result.get("accuracy") is None


# --------------------------------------------------- the others, on stand-in networks


def stand_in_onnx(path: Path, input_name: str, shape: list[int], dtype: str, classes: int) -> Path:
    """A tiny ONNX network with the given input signature and output 'logits' [N, classes]:
    per-sample mean over every non-batch axis, times a fixed row of weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    elem = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64}[dtype]
    dims: list[int | str] = ["batch", *shape[1:]]
    weights = np.linspace(-1, 1, classes, dtype=np.float32).reshape(1, classes)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", [input_name], ["x"], to=TensorProto.FLOAT),
            helper.make_node("Flatten", ["x"], ["flat"], axis=1),
            helper.make_node("ReduceMean", ["flat", "axes"], ["mean"], keepdims=1),
            helper.make_node("MatMul", ["mean", "w"], ["logits"]),
        ],
        "stand_in",
        [helper.make_tensor_value_info(input_name, elem, dims)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes"),
         numpy_helper.from_array(weights, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def catalog_copy(folder: Path, uris: dict[str, str]) -> Path:
    """The catalog's Model files, with the named Models' URIs replaced (exports dropped)."""
    folder.mkdir(parents=True)
    for path in CATALOG_FILES:
        docs = copy.deepcopy(documents(path))
        for document in docs:
            name = document["metadata"]["name"]
            if name in uris:
                document["spec"]["model"]["uri"] = uris[name]
                document["spec"].pop("exports", None)
        write(folder / path.name, *docs)
    return folder


def image_folder(root: Path) -> Path:
    for label, sizes in (("n01440764", [(375, 500), (240, 320)]), ("n01443537", [(500, 333)])):
        (root / label).mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            (root / label / f"{i}.png").write_bytes(png(h, w, seed=10 + i))
    return root


def test_the_imagenet_and_bert_manifests_run_on_stand_ins(tmp_path: Path) -> None:
    """Each ONNX Model of the catalog whose weights CI lacks, with a stand-in file of the same
    input and output tensors: the agent accepts the declared tensors, runs the Model's own
    steps on real (decoded, non-square) images or pre-tokenized ids, and records them."""
    image_net = stand_in_onnx(tmp_path / "imagenet.onnx", "input", [-1, 3, 224, 224],
                              "float32", 1000)  # fmt: skip
    bert = stand_in_onnx(tmp_path / "bert.onnx", "input_ids", [-1, 128], "int64", 2)
    models = catalog_copy(
        tmp_path / "catalog",
        {"resnet50": str(image_net), "mobilenetv2": str(image_net),
         "efficientnet-b0": str(image_net), "bert-base-sst2": str(bert)},
    )  # fmt: skip
    images = image_folder(tmp_path / "val")
    ids = np.random.default_rng(0).integers(1, 30522, (6, 128), dtype=np.int64)
    ids[:, 100:] = 0  # padding
    np.savez(tmp_path / "sst2.npz", x=ids, y=np.array([0, 1, 1, 0, 1, 0], dtype=np.int64))
    quick = {**QUICK, "batchSizes": [2]}
    runs = [
        evaluation(name, name, framework={"name": "onnxruntime"},
                   dataset={"type": "imagefolder", "path": str(images)}, scenario=quick)
        for name in IMAGENET_ONNX
    ] + [
        evaluation("bert-base-sst2", "bert-base-sst2", framework={"name": "onnxruntime"},
                   dataset={"type": "npz", "uri": str(tmp_path / "sst2.npz")}, scenario=quick)
    ]  # fmt: skip
    results = run(write(tmp_path / "eval.yaml", *runs), models, tmp_path / "out")
    assert sorted(results) == sorted([*IMAGENET_ONNX, "bert-base-sst2"])
    found = FileModels.read([models])
    for name, result in results.items():
        assert result["status"] == "Succeeded", name
        resolved = resolve_model(name, found.lookup())
        assert result["spec"]["preprocessing"] == steps(resolved.preprocessing or [])
        assert result["accuracy"]["samples"] == (6 if name == "bert-base-sst2" else 3)


@pytest.mark.frameworks
@pytest.mark.slow
def test_the_nhwc_savedmodel_manifest_runs_in_tensorflow(tmp_path: Path) -> None:
    """inception-v3 with a stand-in SavedModel of its signature (NHWC 'input' [N,299,299,3],
    'predictions' [N,1000]) on the tensorflow framework: images reach it HWC, untransposed.
    TensorFlow runs in subprocesses so its process state stays out of this one."""
    saved = tmp_path / "inception_v3_savedmodel"
    build = f"""
import tensorflow as tf
w = tf.Variable(tf.linspace(-1.0, 1.0, 1000)[tf.newaxis, :])
@tf.function(input_signature=[tf.TensorSpec([None, 299, 299, 3], tf.float32, name="input")])
def serve(input):
    return {{"predictions": tf.nn.softmax(tf.reduce_mean(input, [1, 2, 3])[:, None] * w)}}
module = tf.Module(); module.w = w; module.serve = serve
tf.saved_model.save(module, {str(saved)!r}, signatures={{"serving_default": serve}})
"""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "OTEL_SDK_DISABLED": "true"}
    subprocess.run([sys.executable, "-c", build], check=True, env=env, timeout=300)
    models = catalog_copy(tmp_path / "catalog", {"inception-v3": str(saved)})
    spec = write(
        tmp_path / "eval.yaml",
        evaluation(
            "inception-v3", "inception-v3", framework={"name": "tensorflow"},
            dataset={"type": "imagefolder", "path": str(image_folder(tmp_path / "val"))},
            scenario={**QUICK, "batchSizes": [2]},
        ),
    )  # fmt: skip
    out = tmp_path / "out"
    mlms = Path(sys.executable).parent / "mlms"
    answer = subprocess.run(
        [str(mlms), "run", str(spec), "--models", str(models), "--no-store", "-o", str(out)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stdout + answer.stderr
    result = json.loads((out / "inception-v3.json").read_text())
    assert result["status"] == "Succeeded"
    assert not any("layout" in step for step in result["spec"]["preprocessing"])
    assert result["spec"]["postprocessing"] == [{"topk": {"k": 5}}]
    assert result["spec"]["model"]["inputs"][0]["layout"] == "NHWC"


def test_the_catalog_sweep_is_the_pitfalls_sweep_by_reference(catalog: FileModels) -> None:
    """examples/sweeps/digits-catalog.yaml: the same entries, frameworks and template
    (postprocessing aside: the Models carry it) as digits-pitfalls.yaml, each entry's
    preprocessing now the referenced Model's, and the same file for every child."""
    from mlmodelscope.spec import expand, parse_sweep

    inline = yaml.safe_load((ROOT / "examples" / "sweeps" / "digits-pitfalls.yaml").read_text())
    by_ref = yaml.safe_load(SWEEP.read_text())
    inline_models = {m["name"]: m for m in inline["spec"]["matrix"]["models"]}
    refs = {m["name"]: m["modelRef"]["name"] for m in by_ref["spec"]["matrix"]["models"]}
    assert list(refs) == list(inline_models)
    assert by_ref["spec"]["matrix"]["frameworks"] == inline["spec"]["matrix"]["frameworks"]
    template = {k: v for k, v in inline["spec"]["template"].items() if k != "postprocessing"}
    assert by_ref["spec"]["template"] == template
    for entry, model_name in refs.items():
        resolved = resolve_model(model_name, catalog.lookup())
        assert steps(resolved.preprocessing or []) == inline_models[entry]["preprocessing"]
        assert steps(resolved.postprocessing or []) == inline["spec"]["template"]["postprocessing"]
        manifest: ModelManifest = catalog.models[resolved.chain[-1].metadata.name]
        assert manifest.spec.model is not None
        assert manifest.spec.model.uri == inline_models["correct"]["model"]["uri"]
    children = expand(parse_sweep(by_ref, models=catalog.lookup()), catalog.lookup())
    assert len(children) == 4
