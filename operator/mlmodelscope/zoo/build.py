"""Build a zoo model into the cache, once per machine: ONNX, TorchScript, torch.export or a
SavedModel, with a model card (inputs, outputs, parameters, FLOPs) and each artifact's sha256.

The folder is ``$MLMS_CACHE_DIR/models/zoo/<name>/<key>/``; the key hashes this package's
source, the framework versions, the format, the batch size and the parameters, so a change to
any of them builds anew and nothing stale is reused. The export runs in a subprocess (as the
digits models do) so framework threads and seeds never leak into the caller.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlmodelscope.agent.digits import MANIFEST, build_once
from mlmodelscope.agent.sources import default_cache_dir
from mlmodelscope.tensorflow_import import before_tensorflow
from mlmodelscope.zoo.registry import ZooEntry, entry, torch_factory

FORMATS = {
    "onnx": "model.onnx",
    "torchscript": "model.torchscript.pt",
    "torch-export": "model.pt2",
    "savedmodel": "model_savedmodel",
}
"""Format -> artifact name inside the model's folder."""
SEED = 0
OPSET = 17
"""ONNX opset: onnxruntime 1.31 runs it, and the legacy exporter writes it without adapters."""
BUILD_TIMEOUT_S = 1200.0
MAX_ABS_DIFF = 1e-3
"""Largest |output| difference allowed between PyTorch and ONNX Runtime."""
SOURCES = ("architectures.py", "registry.py", "build.py")


@dataclass(frozen=True)
class ZooArtifact:
    """A built model: where it is, its digest and its card (the manifest's contents)."""

    name: str
    format: str
    path: Path
    sha256: str
    card: Mapping[str, Any]


def _versions() -> dict[str, str]:
    from mlmodelscope.agent.digits import _version

    return {
        "torch": _version("torch"),
        "onnx": _version("onnx"),
        "tensorflow": _version("tensorflow", "tensorflow-cpu"),
    }


def zoo_key(name: str, fmt: str, batch: int, params: Mapping[str, Any]) -> str:
    """The cache key: this package's source, framework versions, format, batch and params."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for source in SOURCES:
        digest.update((here / source).read_bytes())
    key = {"name": name, "format": fmt, "batch": batch, "params": dict(params), **_versions()}
    digest.update(json.dumps(key, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def sha256_of(path: Path) -> str:
    """A file's sha256, or for a folder the sha256 over its files' relative paths and digests."""
    if path.is_file():
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()
    digest = hashlib.sha256()
    for child in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{child.relative_to(path)}\0{sha256_of(child)}\n".encode())
    return digest.hexdigest()


def ensure_zoo_model(
    name: str,
    fmt: str = "onnx",
    batch: int = 1,
    params: Mapping[str, Any] | None = None,
    small: bool = False,
    cache_dir: Path | None = None,
) -> ZooArtifact:
    """The zoo model ``name`` in ``fmt``, built on first use. ``small`` picks the entry's test
    size; ``params`` override single parameters (e.g. ``{"resolution": 64}``)."""
    if fmt not in FORMATS:
        raise ValueError(f"format: {fmt!r} is not one of {sorted(FORMATS)}")
    if batch < 1:
        raise ValueError(f"batch: must be >= 1, got {batch}")
    zoo_entry = entry(name)
    if fmt == "savedmodel" and zoo_entry.keras is None:
        raise ValueError(
            f"format: {name} has no SavedModel (keras.applications has no such architecture); "
            "use onnx, torchscript or torch-export"
        )
    resolved = zoo_entry.resolve(params, small)
    root = cache_dir if cache_dir is not None else default_cache_dir()
    final = root / "models" / "zoo" / name / zoo_key(name, fmt, batch, resolved)
    command = [
        sys.executable, "-m", "mlmodelscope.zoo.build", "--name", name, "--format", fmt,
        "--batch", str(batch), "--params", json.dumps(resolved),
    ]  # fmt: skip
    build_once(final, command, f"zoo model {name} ({fmt})", BUILD_TIMEOUT_S)
    card = json.loads((final / MANIFEST).read_text())
    path = final / FORMATS[fmt]
    return ZooArtifact(name, fmt, path, card["artifacts"][FORMATS[fmt]], card)


# --------------------------------------------------------------- the build (in a subprocess)


def _example(zoo_entry: ZooEntry, params: Mapping[str, Any], batch: int) -> list[Any]:
    import torch

    generator = torch.Generator().manual_seed(SEED)
    tensors = []
    for spec in zoo_entry.inputs(params):
        shape = [batch if d == "batch" else int(d) for d in spec.shape]
        if spec.dtype == "int64":
            tensors.append(torch.randint(0, int(params["vocab"]), shape, generator=generator))
        else:
            tensors.append(torch.rand(shape, generator=generator))
    return tensors


def _export_onnx(model: Any, example: list[Any], names: list[str], output: str, path: Path) -> None:
    """The TorchScript-based exporter: it folds eval batch norm into Conv and is ~3x faster
    than the torch.export one here, which matters for tests; the dynamo one is the fallback."""
    import warnings

    import onnx
    import torch

    axes = {n: {0: "batch"} for n in [*names, output]}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model, tuple(example), str(path), input_names=names, output_names=[output],
                dynamic_axes=axes, opset_version=OPSET, dynamo=False,
            )  # fmt: skip
    except Exception as exc:  # pragma: no cover - legacy exporter removed in a later torch
        print(f"legacy ONNX export failed ({type(exc).__name__}: {exc}); using torch.export")  # noqa: T201 - build log
        dims = tuple({0: torch.export.Dim("batch", min=1, max=4096)} for _ in names)
        torch.onnx.export(
            model, tuple(example), str(path), input_names=names, output_names=[output],
            dynamic_shapes=dims, opset_version=18, dynamo=True, external_data=False,
        )  # fmt: skip
    onnx.checker.check_model(str(path))


def _ort_max_diff(path: Path, example: list[Any], names: list[str], expected: Any) -> float:
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {n: t.numpy() for n, t in zip(names, example, strict=True)})
    return float(np.max(np.abs(got - expected)))


def _export_savedmodel(
    zoo_entry: ZooEntry, params: Mapping[str, Any], path: Path
) -> dict[str, Any]:
    """keras.applications' version of the architecture with ``weights=None``: offline, same
    architecture, different random weights (and NHWC input), so TF timings are comparable in
    shape and work, not in numerics."""
    import keras

    r = int(params["resolution"])
    keras.utils.set_random_seed(SEED)
    builder = getattr(keras.applications, str(zoo_entry.keras))
    model = builder(weights=None, input_shape=(r, r, 3), classes=1000)
    model.export(str(path), format="tf_saved_model", verbose=False)
    before_tensorflow()
    import tensorflow as tf

    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    (input_name,) = serve.structured_input_signature[1]
    return {
        "inputs": [{"name": input_name, "shape": ["batch", r, r, 3], "dtype": "float32"}],
        "layout": "NHWC",
        "weights": "keras.applications random init (not the PyTorch weights)",
        "parameters": int(model.count_params()),
    }


def build(name: str, fmt: str, batch: int, params: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """Export ``name`` into ``out`` and write its card last (the build's completion mark)."""
    import tempfile

    import torch

    from mlmodelscope.analysis.graph import layer_costs

    start = time.perf_counter()
    zoo_entry = entry(name)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    from mlmodelscope.zoo.architectures import randomize

    model = randomize(torch_factory(name)(params), SEED)
    inputs = zoo_entry.inputs(params)
    names = [i.name for i in inputs]
    example = _example(zoo_entry, params, batch)
    with torch.no_grad():
        expected = model(*example).numpy()
    artifact = out / FORMATS[fmt]
    card: dict[str, Any] = {
        "name": name,
        "description": zoo_entry.description,
        "format": fmt,
        "batch": batch,
        "params": dict(params),
        "seed": SEED,
        "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in inputs],
        "outputs": [{"name": zoo_entry.output, "shape": ["batch", *expected.shape[1:]]}],
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "versions": _versions(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = artifact if fmt == "onnx" else Path(tmp) / "model.onnx"
        _export_onnx(model, example, names, zoo_entry.output, onnx_path)
        card["onnxMaxAbsDiff"] = _ort_max_diff(onnx_path, example, names, expected)
        costs = layer_costs(onnx_path, batch)
        card["flops"] = sum(c.flops for c in costs)
        card["onnxNodes"] = len(costs)
    if card["onnxMaxAbsDiff"] > MAX_ABS_DIFF:
        raise RuntimeError(f"ONNX Runtime and PyTorch differ by {card['onnxMaxAbsDiff']}")
    if fmt == "torchscript":
        traced = torch.jit.trace(model, tuple(example), check_trace=False)  # type: ignore[no-untyped-call]
        traced.save(str(artifact))
        with torch.no_grad():
            got = torch.jit.load(str(artifact))(*example).numpy()  # type: ignore[no-untyped-call]
        card["maxAbsDiff"] = float(abs(got - expected).max())
    elif fmt == "torch-export":
        # a batch of 1 would specialize the dynamic axis to a constant: trace at 2 or more
        traced_example = _example(zoo_entry, params, max(2, batch))
        batch_dim = torch.export.Dim("batch", min=1, max=4096)
        dims = tuple({0: batch_dim} for _ in names)
        exported = torch.export.export(model, tuple(traced_example), dynamic_shapes=dims)
        torch.export.save(exported, str(artifact))
        with torch.no_grad():
            got = torch.export.load(str(artifact)).module()(*example).numpy()
        card["maxAbsDiff"] = float(abs(got - expected).max())
    elif fmt == "savedmodel":
        card["savedmodel"] = _export_savedmodel(zoo_entry, params, artifact)
    card["artifacts"] = {artifact.name: sha256_of(artifact)}
    card["buildSeconds"] = round(time.perf_counter() - start, 2)
    (out / MANIFEST).write_text(json.dumps(card, indent=2) + "\n")
    return card


def main(argv: list[str] | None = None) -> int:
    """`python -m mlmodelscope.zoo.build --name N --format F --batch B --params JSON --out DIR`."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--name", required=True)
    parser.add_argument("--format", required=True, choices=sorted(FORMATS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--params", default="{}")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    build(args.name, args.format, args.batch, json.loads(args.params), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
