"""Train the example digits CNN and export it, with identical weights, in every format.

Writes digits.onnx, digits.torchscript.pt, digits.pt2 and digits_savedmodel/ (all taking NCHW
float32 ``input`` [-1, 1, 8, 8] = raw pixels / 16 and returning ``logits`` [-1, 10]) plus
manifest.json. The run is repeatable on one machine (seeded, deterministic kernels, one thread),
not across machines: another CPU's float kernels round differently and train slightly different
weights. It checks that all four formats agree on the held-out split, so the framework comparison
in the examples compares frameworks, not models.

    python examples/models/train_digits.py --out examples/models/build
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.agent.digits import MODEL_FILES, digits_split
from mlmodelscope.agent.sources import directory_sha256, file_sha256

SEED = 0
EPOCHS = 15
BATCH_SIZE = 32
LEARNING_RATE = 2e-3
MIN_ACCURACY = 0.95
MAX_ABS_DIFF = 1e-4
Runner = Callable[[np.ndarray], np.ndarray]
DEFAULT_OUT = Path(__file__).resolve().parent / "build"

ONNX_FILE = MODEL_FILES["onnx"]
TORCHSCRIPT_FILE = MODEL_FILES["torchscript"]
EXPORT_FILE = MODEL_FILES["torch-export"]
SAVEDMODEL_DIR = MODEL_FILES["savedmodel"]


def to_nchw(images: np.ndarray) -> np.ndarray:
    """Raw HWC digits (0..16) to the model's input: NCHW float32 in [0, 1]."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2) / np.float32(16.0), dtype=np.float32)


def build_torch_model() -> Any:
    """conv(1→16)-relu-conv(16→32)-relu-maxpool2-flatten-linear(512→64)-relu-linear(64→10)."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def train(x_train: np.ndarray, y_train: np.ndarray) -> Any:
    """Adam on shuffled mini-batches; deterministic given SEED."""
    import torch

    torch.manual_seed(SEED)
    model = build_torch_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.from_numpy(x_train)
    y = torch.from_numpy(y_train)
    generator = torch.Generator().manual_seed(SEED)
    model.train()
    for _ in range(EPOCHS):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            optimizer.zero_grad()
            loss_fn(model(x[batch]), y[batch]).backward()
            optimizer.step()
    return model.eval()


def export_onnx(model: Any, example: Any, path: Path) -> None:
    """ONNX (opset 18) with a dynamic batch axis, via the torch.export-based exporter."""
    import onnx
    import torch

    batch = torch.export.Dim("batch", min=1, max=65536)
    torch.onnx.export(
        model,
        (example,),
        str(path),
        input_names=["input"],
        output_names=["logits"],
        dynamic_shapes=({0: batch},),
        opset_version=18,
        dynamo=True,
        external_data=False,
        verbose=False,
    )
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


def export_torch_export(model: Any, example: Any, path: Path) -> None:
    """A torch.export program whose batch dimension is dynamic."""
    import torch

    batch = torch.export.Dim("batch", min=1, max=65536)
    program = torch.export.export(model, (example,), dynamic_shapes=({0: batch},))
    torch.export.save(program, str(path))


def export_savedmodel(model: Any, path: Path) -> None:
    """The same network in TensorFlow, weights copied, serving NCHW ``input`` → ``logits``.

    Convolutions run NHWC (TensorFlow's CPU layout), so the graph transposes the input to NHWC
    and transposes back to NCHW before flattening, matching torch's C,H,W flatten order.
    """
    import tensorflow as tf

    params = {name: t.detach().numpy() for name, t in model.state_dict().items()}
    module = tf.Module(name="digits")
    # torch conv OIHW -> tf HWIO; torch linear (out, in) -> tf (in, out).
    module.conv1_w = tf.Variable(params["0.weight"].transpose(2, 3, 1, 0), name="conv1_w")
    module.conv1_b = tf.Variable(params["0.bias"], name="conv1_b")
    module.conv2_w = tf.Variable(params["2.weight"].transpose(2, 3, 1, 0), name="conv2_w")
    module.conv2_b = tf.Variable(params["2.bias"], name="conv2_b")
    module.fc1_w = tf.Variable(params["6.weight"].T.copy(), name="fc1_w")
    module.fc1_b = tf.Variable(params["6.bias"], name="fc1_b")
    module.fc2_w = tf.Variable(params["8.weight"].T.copy(), name="fc2_w")
    module.fc2_b = tf.Variable(params["8.bias"], name="fc2_b")

    def serve(input: Any) -> dict[str, Any]:  # the argument name is the signature's input key
        h = tf.transpose(input, [0, 2, 3, 1])
        h = tf.nn.relu(tf.nn.conv2d(h, module.conv1_w, 1, "SAME") + module.conv1_b)
        h = tf.nn.relu(tf.nn.conv2d(h, module.conv2_w, 1, "SAME") + module.conv2_b)
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.reshape(tf.transpose(h, [0, 3, 1, 2]), [-1, 32 * 4 * 4])
        h = tf.nn.relu(tf.matmul(h, module.fc1_w) + module.fc1_b)
        return {"logits": tf.matmul(h, module.fc2_w) + module.fc2_b}

    spec = tf.TensorSpec([None, 1, 8, 8], tf.float32, name="input")
    module.serve = tf.function(serve, input_signature=[spec])
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve.get_concrete_function()}
    )


def onnx_runner(path: Path) -> Runner:
    """ONNX Runtime, or onnx's reference evaluator where ONNX Runtime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        evaluator: Any = ReferenceEvaluator(str(path))
        return lambda x: np.asarray(evaluator.run(["logits"], {"input": x})[0])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda x: np.asarray(session.run(["logits"], {"input": x})[0])


def torch_runner(module: Any) -> Runner:
    """A torch module, TorchScript module or exported-program module."""
    import torch

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return np.asarray(module(torch.from_numpy(x)).numpy())

    return run


def savedmodel_runner(path: Path) -> Runner:
    """The SavedModel's serving_default signature, fed by its ``input`` key."""
    import tensorflow as tf

    signature = tf.saved_model.load(str(path)).signatures["serving_default"]
    return lambda x: np.asarray(signature(input=tf.constant(x))["logits"].numpy())


def versions() -> dict[str, str]:
    """Versions of everything that shaped the artifacts."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name, dists in {
        "torch": ("torch",),
        "tensorflow": ("tensorflow", "tensorflow-cpu"),
        "onnx": ("onnx",),
        "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
        "numpy": ("numpy",),
        "scikit-learn": ("scikit-learn",),
    }.items():
        for dist in dists:
            try:
                found[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def build_digits_models(out_dir: Path) -> dict[str, Any]:
    """Train, export all four formats into ``out_dir``, cross-check them, return the manifest."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    import torch

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    out_dir.mkdir(parents=True, exist_ok=True)
    x_train_raw, y_train = digits_split("train")
    x_test_raw, y_test = digits_split("test")
    x_train, x_test = to_nchw(x_train_raw), to_nchw(x_test_raw)

    model = train(x_train, y_train)
    train_seconds = time.perf_counter() - started
    example = torch.from_numpy(x_test[:2])

    export_onnx(model, example, out_dir / ONNX_FILE)
    jit: Any = torch.jit  # untyped in some torch releases
    jit.trace(model, example).save(str(out_dir / TORCHSCRIPT_FILE))
    export_torch_export(model, example, out_dir / EXPORT_FILE)
    export_savedmodel(model, out_dir / SAVEDMODEL_DIR)

    runners = {
        "onnx": onnx_runner(out_dir / ONNX_FILE),
        "torchscript": torch_runner(jit.load(str(out_dir / TORCHSCRIPT_FILE))),
        "torch-export": torch_runner(torch.export.load(str(out_dir / EXPORT_FILE)).module()),
        "savedmodel": savedmodel_runner(out_dir / SAVEDMODEL_DIR),
    }
    reference = torch_runner(model)(x_test)
    accuracy = {"pytorch-eager": float((reference.argmax(1) == y_test).mean())}
    max_abs_diff = {}
    for fmt, run in runners.items():
        logits = run(x_test)
        accuracy[fmt] = float((logits.argmax(1) == y_test).mean())
        # Batch 1 exercises the dynamic batch axis every export promises.
        max_abs_diff[fmt] = max(
            float(np.abs(logits - reference).max()),
            float(np.abs(run(x_test[:1]) - reference[:1]).max()),
        )

    for fmt, acc in accuracy.items():
        print(f"{fmt:>14}: accuracy {acc:.4f}, max |logit diff| {max_abs_diff.get(fmt, 0.0):.2e}")
    worst = max(max_abs_diff.values())
    assert min(accuracy.values()) >= MIN_ACCURACY, f"accuracy below {MIN_ACCURACY}: {accuracy}"
    assert worst < MAX_ABS_DIFF, f"formats disagree by {worst:.2e} (>= {MAX_ABS_DIFF})"

    files = {
        name: {"format": fmt, "sha256": file_sha256(out_dir / name)}
        for name, fmt in (
            (ONNX_FILE, "onnx"),
            (TORCHSCRIPT_FILE, "torchscript"),
            (EXPORT_FILE, "torch-export"),
        )
    }
    files[SAVEDMODEL_DIR] = {
        "format": "savedmodel",
        "sha256": directory_sha256(out_dir / SAVEDMODEL_DIR),
    }
    manifest: dict[str, Any] = {
        "model": "digits-cnn",
        "input": {"name": "input", "shape": [-1, 1, 8, 8], "dtype": "float32", "layout": "NCHW"},
        "output": {"name": "logits", "shape": [-1, 10], "dtype": "float32"},
        "preprocessing": "raw digits HWC / 16, then HWC -> CHW",
        "files": files,
        "accuracy": accuracy,
        "max_abs_diff": max_abs_diff,
        "test_samples": len(y_test),
        "train_samples": len(y_train),
        "seed": SEED,
        "epochs": EPOCHS,
        "train_seconds": round(train_seconds, 3),
        "seconds": round(time.perf_counter() - started, 3),
        "versions": versions(),
    }
    # Written last: the manifest's presence marks a complete build (ensure_digits_models).
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"max |logit diff| {worst:.2e}; built in {manifest['seconds']:.1f} s into {out_dir}")
    return manifest


def main(out_dir: Path | None = None) -> int:
    """Command-line entry: ``--out DIR`` (default examples/models/build)."""
    if out_dir is None:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
        out_dir = parser.parse_args().out
    build_digits_models(out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
