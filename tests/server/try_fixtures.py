"""Helpers of the Try tests: images to upload (a digit of scikit-learn's digits as a PNG, noise
too large to take, bytes that are no image), the multipart form the API and the page take (with
an image, or a text), and the Models the Try tests add to the task catalog (:func:`try_models`)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Final

import numpy as np
import yaml
from launch_fixtures import TASKS

from upscaler import write_upscaler

FRAMEWORKS: Final = ["onnxruntime", "pytorch", "tensorflow"]
TOPICS: Final = ["food", "sport", "tech", "weather"]
"""The examples/tasks text classifier's classes, in its class order (the topics sorted)."""


def png(pixels: np.ndarray) -> bytes:
    """A greyscale (H, W) uint8 array as PNG bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels, "L").save(buffer, "PNG")
    return buffer.getvalue()


def digit_png(index: int = 0) -> tuple[bytes, int]:
    """Sample ``index`` of the digits test split drawn as an 8x8 PNG (0..16 -> 0..255), and
    its label."""
    from mlmodelscope.agent.digits import DIGITS_INK, digits_split

    images, labels = digits_split("test")
    pixels = np.rint(images[index, :, :, 0] * (255 / DIGITS_INK)).astype(np.uint8)
    return png(pixels), int(labels[index])


def noise_png(side: int) -> bytes:
    """Random pixels (incompressible): about side*side bytes."""
    rng = np.random.default_rng(0)
    return png(rng.integers(0, 256, size=(side, side), dtype=np.uint8))


def try_form(
    image: bytes,
    model: str = "digits-cnn",
    frameworks: list[str] | None = None,
    k: int = 3,
    name: str = "digit.png",
    media_type: str = "image/png",
) -> dict[str, Any]:
    """Keyword arguments of ``client.post`` for a try."""
    return {
        "files": {"file": (name, image, media_type)},
        "data": {"model": model, "frameworks": frameworks or FRAMEWORKS, "k": str(k)},
    }


def text_form(
    text: str,
    model: str = "topic-labels",
    frameworks: list[str] | None = None,
    k: int = 3,
    **options: str,
) -> dict[str, Any]:
    """Keyword arguments of ``client.post`` for a try of a text (a multipart form, no file)."""
    return {
        "files": {"text": (None, text)},
        "data": {"model": model, "frameworks": frameworks or FRAMEWORKS, "k": str(k), **options},
    }


def try_models(folder: Path, build: Path) -> Path:
    """``folder/try-models.yaml``: ``topic-labels``, the examples/tasks text classifier with
    a softmax and its topics' names (basedOn ``topic-classifier`` of
    :func:`~launch_fixtures.task_catalog`); ``upscaler``, a 2x ONNX super-resolution model
    (24x24 in, 48x48 out) with the image-to-image example's preprocessing, task label
    super-resolution; ``word-boxes``, a Model of a task a try does not answer
    (text-detection)."""
    write_upscaler(folder / "upscaler.onnx", 3)
    example = yaml.safe_load((TASKS / "image-to-image.yaml").read_text())["spec"]
    documents: list[dict[str, Any]] = [
        {
            "metadata": {"name": "topic-labels"},
            "spec": {
                "basedOn": {"name": "topic-classifier"},
                "postprocessing": [{"softmax": {}}, {"labels": {"names": TOPICS}}],
            },
        },
        {
            "metadata": {"name": "upscaler"},
            "spec": {
                "task": "super-resolution",
                "model": {
                    "name": "upscaler",
                    "uri": str(folder / "upscaler.onnx"),
                    "format": "onnx",
                    "inputs": [{"name": "input", "shape": [-1, 3, 24, 24]}],
                    "outputs": [{"name": "upscaled", "shape": [-1, 3, 48, 48], "layout": "NCHW"}],
                },
                "preprocessing": example["preprocessing"],
            },
        },
        {
            "metadata": {"name": "word-boxes"},
            "spec": {"basedOn": {"name": "shapes-segmenter"}, "task": "text-detection"},
        },
    ]
    path = folder / "try-models.yaml"
    path.write_text(
        yaml.safe_dump_all(
            [{"apiVersion": "mlmodelscope.io/v1alpha1", "kind": "Model", **d} for d in documents],
            sort_keys=False,
        )
    )
    return path


def rgb_png(pixels: np.ndarray) -> bytes:
    """An (H, W, 3) uint8 array as PNG bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, "PNG")
    return buffer.getvalue()
