"""Helpers of the Try tests: images to upload (a digit of scikit-learn's digits as a PNG, noise
too large to take, bytes that are no image) and the multipart form the API and the page take."""

from __future__ import annotations

import io
from typing import Any, Final

import numpy as np

FRAMEWORKS: Final = ["onnxruntime", "pytorch", "tensorflow"]


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
