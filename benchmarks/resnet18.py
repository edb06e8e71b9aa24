"""A ResNet-18-shaped network written in code, exported to ONNX, TorchScript and a SavedModel.

The benchmarks need a realistic image model in every framework without downloading weights
or importing torchvision (which fails beside this torch build), so the architecture is written
out here: He et al.'s ResNet-18 (BasicBlock x [2, 2, 2, 2], 1000 classes) with random weights
from a fixed seed. The TensorFlow version is the same graph written with ``tf.nn`` ops and the
*same* weights (batch norm folded into a per-channel scale and shift, explicit padding where
TensorFlow's "SAME" would pad asymmetrically), so all formats compute the same function; the
build checks they agree.

Every artifact takes NCHW float32 ``input`` [-1, 3, S, S] and returns ``logits`` [-1, 1000].

    python benchmarks/resnet18.py --out /tmp/resnet18 --size 224   # build into a folder
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

SEED = 0
NUM_CLASSES = 1000
STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))
"""(channels, stride of the first block) of the four stages; each stage has two BasicBlocks."""
BLOCKS_PER_STAGE = 2
MAX_ABS_DIFF = 1e-3
"""Largest |logit| difference allowed between formats (float32, ~1.8 GFLOP of accumulation)."""
MODEL_FILES = {
    "onnx": "resnet18.onnx",
    "torchscript": "resnet18.torchscript.pt",
    "savedmodel": "resnet18_savedmodel",
}
"""Model format -> artifact name inside the folder ``ensure_resnet18_models`` returns."""
MANIFEST = "manifest.json"
"""Written last: its presence marks a complete build."""
BUILD_TIMEOUT_S = 900.0


# ------------------------------------------------------------------------------------ torch


def build_torch_model() -> Any:
    """ResNet-18 in eval mode, seeded weights; batch-norm statistics randomized too, so the
    folded TensorFlow version is actually tested against non-trivial normalization."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.downsample: nn.Module | None = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            result: torch.Tensor = self.relu(out + identity)
            return result

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers: list[nn.Module] = []
            cin = 64
            for cout, stride in STAGES:
                blocks = [BasicBlock(cin, cout, stride)]
                blocks += [BasicBlock(cout, cout, 1) for _ in range(BLOCKS_PER_STAGE - 1)]
                layers.append(nn.Sequential(*blocks))
                cin = cout
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, NUM_CLASSES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            logits: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
            return logits

    torch.manual_seed(SEED)
    model = ResNet18()
    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                n = module.num_features
                assert module.running_mean is not None and module.running_var is not None
                module.weight.copy_(0.5 + torch.rand(n, generator=generator))
                module.bias.copy_(0.1 * torch.randn(n, generator=generator))
                module.running_mean.copy_(0.1 * torch.randn(n, generator=generator))
                module.running_var.copy_(0.5 + torch.rand(n, generator=generator))
    return model.eval()


def export_onnx(model: Any, example: Any, path: Path) -> None:
    """ONNX opset 18 with a dynamic batch axis (torch.export-based exporter, legacy fallback)."""
    import onnx
    import torch

    try:
        batch = torch.export.Dim("batch", min=1, max=4096)
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
    except Exception as exc:  # the dynamo exporter is young; the legacy one exports this too
        print(f"dynamo ONNX export failed ({type(exc).__name__}: {exc}); using the legacy one")
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=18,
            dynamo=False,
        )
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)


# ------------------------------------------------------------------------------- tensorflow


def _folded_bn(params: dict[str, np.ndarray], prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """Eval-mode batch norm as y = x * scale + shift (what the running statistics mean)."""
    eps = 1e-5  # nn.BatchNorm2d's default
    scale = params[f"{prefix}.weight"] / np.sqrt(params[f"{prefix}.running_var"] + eps)
    shift = params[f"{prefix}.bias"] - params[f"{prefix}.running_mean"] * scale
    return scale.astype(np.float32), shift.astype(np.float32)


def export_savedmodel(model: Any, path: Path, size: int) -> None:
    """The same network and weights with ``tf.nn`` ops, serving NCHW ``input`` -> ``logits``.

    Convolutions run NHWC (TensorFlow's CPU layout): the graph transposes the input once.
    Padding is explicit so strided convolutions and the max pool pad exactly as torch does.
    The signature's batch is dynamic, its spatial size fixed (as ONNX's), so grappler sees
    static shapes.
    """
    import tensorflow as tf

    params = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    module = tf.Module(name="resnet18")
    weights: dict[str, Any] = {}

    def conv(name: str) -> None:
        # torch OIHW -> tf HWIO
        weights[name] = tf.Variable(params[f"{name}.weight"].transpose(2, 3, 1, 0), name=name)

    def bn(name: str) -> None:
        scale, shift = _folded_bn(params, name)
        weights[f"{name}.scale"] = tf.Variable(scale, name=f"{name}_scale")
        weights[f"{name}.shift"] = tf.Variable(shift, name=f"{name}_shift")

    conv("conv1")
    bn("bn1")
    blocks: list[tuple[str, int, bool]] = []
    cin = 64
    for s, (cout, stride) in enumerate(STAGES, start=1):
        for b in range(BLOCKS_PER_STAGE):
            name = f"layer{s}.{b}"
            block_stride = stride if b == 0 else 1
            down = b == 0 and (stride != 1 or cin != cout)
            for part in ("conv1", "conv2"):
                conv(f"{name}.{part}")
            for part in ("bn1", "bn2"):
                bn(f"{name}.{part}")
            if down:
                conv(f"{name}.downsample.0")
                bn(f"{name}.downsample.1")
            blocks.append((name, block_stride, down))
            cin = cout
    weights["fc.w"] = tf.Variable(params["fc.weight"].T.copy(), name="fc_w")
    weights["fc.b"] = tf.Variable(params["fc.bias"], name="fc_b")
    module.weights = weights  # tracked, so the SavedModel stores the variables

    def conv2d(x: Any, name: str, stride: int, pad: int) -> Any:
        padding = [[0, 0], [pad, pad], [pad, pad], [0, 0]]
        return tf.nn.conv2d(x, weights[name], stride, padding)

    def norm(x: Any, name: str) -> Any:
        return x * weights[f"{name}.scale"] + weights[f"{name}.shift"]

    def serve(input: Any) -> dict[str, Any]:  # the argument name is the signature's input key
        x = tf.transpose(input, [0, 2, 3, 1])
        x = tf.nn.relu(norm(conv2d(x, "conv1", 2, 3), "bn1"))
        x = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], constant_values=float("-inf"))
        x = tf.nn.max_pool2d(x, 3, 2, "VALID")
        for name, stride, down in blocks:
            identity = x
            if down:
                identity = norm(
                    conv2d(x, f"{name}.downsample.0", stride, 0), f"{name}.downsample.1"
                )
            out = tf.nn.relu(norm(conv2d(x, f"{name}.conv1", stride, 1), f"{name}.bn1"))
            out = norm(conv2d(out, f"{name}.conv2", 1, 1), f"{name}.bn2")
            x = tf.nn.relu(out + identity)
        x = tf.reduce_mean(x, axis=[1, 2])
        return {"logits": tf.matmul(x, weights["fc.w"]) + weights["fc.b"]}

    spec = tf.TensorSpec([None, 3, size, size], tf.float32, name="input")
    module.serve = tf.function(serve, input_signature=[spec])
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve.get_concrete_function()}
    )


# ------------------------------------------------------------------------------------ build


def build(out_dir: Path, size: int) -> dict[str, Any]:
    """Export every format into ``out_dir``, check they agree, write the manifest last."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    started = time.perf_counter()
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    out_dir.mkdir(parents=True, exist_ok=True)
    model = build_torch_model()
    example = torch.from_numpy(
        np.random.default_rng(SEED).standard_normal((2, 3, size, size), dtype=np.float32)
    )
    export_onnx(model, example, out_dir / MODEL_FILES["onnx"])
    jit: Any = torch.jit  # untyped in some torch releases
    with torch.no_grad():
        jit.trace(model, example).save(str(out_dir / MODEL_FILES["torchscript"]))
    export_savedmodel(model, out_dir / MODEL_FILES["savedmodel"], size)

    x = example.numpy()
    with torch.inference_mode():
        reference = model(example).numpy()
        scripted = jit.load(str(out_dir / MODEL_FILES["torchscript"]))(example).numpy()
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(out_dir / MODEL_FILES["onnx"]), providers=["CPUExecutionProvider"]
    )
    from_onnx = session.run(["logits"], {"input": x})[0]
    import tensorflow as tf

    signature = tf.saved_model.load(str(out_dir / MODEL_FILES["savedmodel"])).signatures[
        "serving_default"
    ]
    from_tf = signature(input=tf.constant(x))["logits"].numpy()
    diffs = {
        fmt: float(np.abs(out - reference).max())
        for fmt, out in (("onnx", from_onnx), ("torchscript", scripted), ("savedmodel", from_tf))
    }
    worst = max(diffs.values())
    assert worst < MAX_ABS_DIFF, f"formats disagree by {worst:.2e} (>= {MAX_ABS_DIFF}): {diffs}"
    manifest: dict[str, Any] = {
        "model": "resnet18-shaped (random weights)",
        "seed": SEED,
        "input": {
            "name": "input",
            "shape": [-1, 3, size, size],
            "dtype": "float32",
            "layout": "NCHW",
        },
        "output": {"name": "logits", "shape": [-1, NUM_CLASSES], "dtype": "float32"},
        "files": dict(MODEL_FILES),
        "max_abs_diff": diffs,
        "versions": _versions(),
        "seconds": round(time.perf_counter() - started, 3),
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"resnet18 {size}x{size}: max |logit diff| {worst:.2e}; built into {out_dir}")
    return manifest


def _version(*distributions: str) -> str:
    for dist in distributions:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(dist)
    return "none"


def _versions() -> dict[str, str]:
    return {
        name: _version(*dists)
        for name, dists in (
            ("torch", ("torch",)),
            ("tensorflow", ("tensorflow", "tensorflow-cpu")),
            ("onnx", ("onnx",)),
            ("onnxruntime", ("onnxruntime", "onnxruntime-gpu")),
        )
    }


def models_key(size: int) -> str:
    """Cache key: this file, the input size and the versions that shape the artifacts."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(f"\0size={size}".encode())
    for name, version in sorted(_versions().items()):
        digest.update(f"\0{name}={version}".encode())
    return digest.hexdigest()[:16]


def ensure_resnet18_models(size: int = 224, cache_dir: Path | None = None) -> Path:
    """The folder holding the network in every format, building it on first use.

    Lives in ``<cache root>/models/resnet18/<key>`` (root: $MLMS_CACHE_DIR or
    ~/.cache/mlmodelscope). The build runs in a subprocess so TensorFlow's and PyTorch's
    process-wide state (thread pools, seeds) never leaks into the benchmark that asks for it.
    """
    from mlmodelscope.agent.digits import build_once
    from mlmodelscope.agent.sources import default_cache_dir

    base = (cache_dir if cache_dir is not None else default_cache_dir()) / "models" / "resnet18"
    command = [sys.executable, str(Path(__file__).resolve()), "--size", str(size)]
    return build_once(base / models_key(size), command, "the resnet18 models", BUILD_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    """Build into ``--out`` directly (what ``ensure_resnet18_models`` runs in a subprocess)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--size", type=int, default=224, help="input height and width")
    args = parser.parse_args(argv)
    build(args.out, args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
