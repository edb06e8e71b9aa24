"""A deterministic synthetic dataset of rendered shapes for detection and segmentation, in
the formats users have: images with a COCO instances file (boxes) and PNG class masks (VOC
style); and for image to image, clean shapes on smooth gradients with their noisy copies
(Gaussian noise) as input and target folders. Seeded, so the same arguments give the same
pixels, masks and boxes on any machine.

Classes (COCO category ids 1..3, mask values 1..3, 0 background): square, disc, triangle.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

CLASSES: Final = ("square", "disc", "triangle")
BACKGROUND: Final = 0


@dataclass(frozen=True)
class ShapesFolder:
    """Where :func:`write_shapes` put the dataset."""

    images: Path
    masks: Path
    annotations: Path


def _draw(kind: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """A boolean ``size`` x ``size`` stencil of shape ``kind`` (0 square, 1 disc, 2 triangle)."""
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    if kind == 0:
        return np.ones((size, size), dtype=bool)
    if kind == 1:
        r = size / 2
        disc: np.ndarray = (yy - r) ** 2 + (xx - r) ** 2 <= r * r
        return disc
    flip = bool(rng.integers(0, 2))
    rows = yy if not flip else size - yy
    triangle: np.ndarray = np.abs(xx - size / 2) <= rows / 2
    return triangle


def render(
    rng: np.random.Generator, height: int, width: int, max_objects: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, list[int]]]]:
    """One image (HWC uint8), its class mask (HW uint8) and its objects as (class id 1..3,
    pixel [x, y, w, h] of the visible extent). Later shapes cover earlier ones; an object left
    with no visible pixel is dropped."""
    image = np.empty((height, width, 3), dtype=np.uint8)
    image[:] = rng.integers(0, 60, size=3, dtype=np.uint8)
    image = np.clip(image + rng.integers(0, 20, size=image.shape), 0, 255).astype(np.uint8)
    mask = np.zeros((height, width), dtype=np.uint8)
    owner = np.full((height, width), -1, dtype=np.int64)
    kinds = []
    for index in range(int(rng.integers(1, max_objects + 1))):
        kind = int(rng.integers(0, len(CLASSES)))
        size = int(rng.integers(min(height, width) // 8, min(height, width) // 2))
        y, x = int(rng.integers(0, height - size)), int(rng.integers(0, width - size))
        stencil = _draw(kind, size, rng)
        colour = rng.integers(100, 256, size=3, dtype=np.uint8)
        region = (slice(y, y + size), slice(x, x + size))
        image[region][stencil] = colour
        mask[region][stencil] = kind + 1
        owner[region][stencil] = index
        kinds.append(kind)
    objects = []
    for index, kind in enumerate(kinds):
        ys, xs = np.nonzero(owner == index)
        if ys.size:
            x0, y0 = int(xs.min()), int(ys.min())
            objects.append((kind + 1, [x0, y0, int(xs.max()) + 1 - x0, int(ys.max()) + 1 - y0]))
    return image, mask, objects


def write_shapes(
    folder: Path, count: int, *, seed: int = 0, height: int = 64, width: int = 64,
    max_objects: int = 4,
) -> ShapesFolder:  # fmt: skip
    """Write ``count`` images (``images/00000.png``...), their masks (``masks/00000.png``) and
    ``instances.json`` (COCO) under ``folder``; the same arguments give the same pixels,
    masks and annotations."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    images, masks = folder / "images", folder / "masks"
    images.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {
        "images": [],
        "annotations": [],
        "categories": [{"id": i + 1, "name": name} for i, name in enumerate(CLASSES)],
    }
    for number in range(count):
        image, mask, objects = render(rng, height, width, max_objects)
        name = f"{number:05d}.png"
        Image.fromarray(image).save(images / name)
        Image.fromarray(mask, mode="L").save(masks / name)
        document["images"].append(
            {"id": number + 1, "file_name": name, "width": width, "height": height}
        )
        for category, box in objects:
            document["annotations"].append(
                {
                    "id": len(document["annotations"]) + 1,
                    "image_id": number + 1,
                    "category_id": category,
                    "bbox": box,
                    "area": box[2] * box[3],
                    "iscrowd": 0,
                }
            )
    annotations = folder / "instances.json"
    annotations.write_text(json.dumps(document, indent=1))
    return ShapesFolder(images, masks, annotations)


# ------------------------------------------------------------------------- image to image


@dataclass(frozen=True)
class PairsFolder:
    """Where :func:`write_pairs` put the dataset: noisy inputs and clean targets."""

    inputs: Path
    targets: Path


def render_smooth(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A clean image (HWC uint8): a linear gradient between two colours in a random direction,
    and one to four flat-coloured shapes on it."""
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:height, 0:width]
    ramp = xx * np.cos(angle) + yy * np.sin(angle)
    ramp = (ramp - ramp.min()) / max(float(np.ptp(ramp)), 1e-9)
    start, end = rng.uniform(20, 235, size=(2, 3))
    image = start + ramp[..., None] * (end - start)
    for _ in range(int(rng.integers(1, 5))):
        kind = int(rng.integers(0, len(CLASSES)))
        size = int(rng.integers(min(height, width) // 6, min(height, width) // 2))
        y, x = int(rng.integers(0, height - size)), int(rng.integers(0, width - size))
        stencil = _draw(kind, size, rng)
        image[y : y + size, x : x + size][stencil] = rng.uniform(20, 235, size=3)
    pixels: np.ndarray = np.rint(image).astype(np.uint8)
    return pixels


def add_noise(clean: np.ndarray, rng: np.random.Generator, sigma: float) -> np.ndarray:
    """``clean`` (uint8) plus Gaussian noise of standard deviation ``sigma`` (a fraction of
    255), rounded and clipped back to uint8."""
    noisy = clean + rng.normal(0.0, sigma * 255.0, size=clean.shape)
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def write_pairs(
    folder: Path, count: int, *, seed: int = 0, sigma: float = 0.1, height: int = 48,
    width: int = 48,
) -> PairsFolder:  # fmt: skip
    """Write ``count`` clean images (``clean/00000.png``...) and their noisy copies of the same
    names (``noisy/``) under ``folder``; the same arguments give the same pixels."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    inputs, targets = folder / "noisy", folder / "clean"
    inputs.mkdir(parents=True, exist_ok=True)
    targets.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        clean = render_smooth(rng, height, width)
        name = f"{number:05d}.png"
        Image.fromarray(clean).save(targets / name)
        Image.fromarray(add_noise(clean, rng, sigma)).save(inputs / name)
    return PairsFolder(inputs, targets)
