"""Text detection with a model written by others: the PP-OCRv4 detector (DB, Differentiable
Binarization) that the PyPI package ``rapidocr-onnxruntime`` (Apache-2.0) ships as ONNX, on
rendered text images whose word boxes are known.

The agent evaluates it as ``task.type: text-detection`` (:func:`textdet_evaluation`): its
preprocessing as spec steps, the probability map turned into boxes by :func:`db_boxes` and
scored by :func:`hmean` against the rendered word boxes, which :func:`write_text_images` also
writes as a COCO file. :func:`detect` does the same outside the agent, on ONNX Runtime
directly, as the reference the tests compare with.

``write_text_images`` renders words in Pillow's built-in font at positions drawn from a seeded
NumPy generator: the same arguments give the same images and boxes with the same Pillow.
``python -m mlmodelscope.agent.tasks.textdet [--link DIR]`` builds the images into the cache.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mlmodelscope.agent import digits
from mlmodelscope.agent.sources import default_cache_dir
from mlmodelscope.agent.tasks.record import TaskMetrics

DISTRIBUTION = "rapidocr-onnxruntime"
DETECTOR_FILE = "ch_PP-OCRv4_det_infer.onnx"
"""The detector among the package's three models (the others recognise and classify
orientation)."""
INPUT_NAME = "x"
OUTPUT_NAME = "sigmoid_0.tmp_0"
"""The detector's input (N, 3, H, W) and its probability map (N, 1, H, W), H and W multiples
of 32."""
RENDER_SIZE = 368
MODEL_SIZE = 736
"""Images are rendered at 368x368; rapidocr's config (``limit_type: min``,
``limit_side_len: 736``) scales the shorter side up to 736, which for them is 736x736."""
MEAN = [0.5, 0.5, 0.5]
STD = [0.5, 0.5, 0.5]
"""rapidocr's ``Det`` mean and std, after scaling by 1/255, on a BGR image."""
THRESH = 0.3
BOX_THRESH = 0.5
UNCLIP_RATIO = 1.6
MIN_SIZE = 3
"""rapidocr's DB post-processing settings (``Det`` in its config.yaml)."""
IOU_THRESHOLD = 0.5
IMAGES_DIR = "images"
CLASS_DIR = "text"
BOXES_FILE = "boxes.json"
COCO_FILE = "instances.json"
COUNT = 8
SEED = 0
WORDS = (
    "model", "score", "latency", "tensor", "batch", "kernel", "python", "onnx",
    "runtime", "metric", "cluster", "agent", "result", "spec", "layer", "dataset",
    "speed", "image", "label", "export", "digits", "scope", "bench", "trace",
)  # fmt: skip
FONT_SIZES = (22, 26, 30, 34)
BUILD_TIMEOUT_S = 300.0

Box = tuple[float, float, float, float]
"""x0, y0, x1, y1 in pixels, x1 and y1 exclusive."""


def detector_path() -> Path:
    """The detector ONNX file inside the installed package (found from its metadata, so
    rapidocr itself, which imports OpenCV, is never imported)."""
    try:
        files = metadata.files(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"{DISTRIBUTION} is not installed: pip install 'mlmodelscope[pretrained]'"
        ) from None
    for file in files:
        if file.name == DETECTOR_FILE:
            return Path(str(file.locate()))
    raise FileNotFoundError(f"{DISTRIBUTION} ships no {DETECTOR_FILE}")


def preprocessing() -> list[dict[str, Any]]:
    """rapidocr's ``DetPreProcess`` as spec steps: BGR, resized to 736x736 (bilinear, as
    ``cv2.resize``), ``(x / 255 - 0.5) / 0.5``, channels first."""
    return [
        {"decode": {"mode": "RGB"}},
        {"channelOrder": {"order": "BGR"}},
        {"resize": {"height": MODEL_SIZE, "width": MODEL_SIZE, "interpolation": "bilinear"}},
        {"toFloat": {"dtype": "float32"}},
        {"scale": {"factor": 1.0 / 255.0}},
        {"normalize": {"mean": MEAN, "std": STD}},
        {"layout": {"from": "HWC", "to": "CHW"}},
    ]


def textdet_evaluation(folder: Path, name: str, /, **sections: Any) -> dict[str, Any]:
    """A ModelEvaluation that runs the detector in ONNX Runtime through the agent on the
    rendered images in ``folder`` (from :func:`ensure_text_images`), as a text-detection
    task against their COCO word boxes."""
    from mlmodelscope.spec.document import API_VERSION_FULL, KIND

    spec: dict[str, Any] = {
        "model": {
            "name": "ppocr-v4-det",
            "uri": str(detector_path()),
            "format": "onnx",
            "inputs": [{"name": INPUT_NAME, "shape": [-1, 3, MODEL_SIZE, MODEL_SIZE]}],
            "outputs": [{"name": OUTPUT_NAME, "shape": [-1, 1, MODEL_SIZE, MODEL_SIZE]}],
        },
        "preprocessing": preprocessing(),
        "framework": {"name": "onnxruntime"},
        "dataset": {
            "type": "coco",
            "path": str(folder / IMAGES_DIR / CLASS_DIR),
            "annotations": str(folder / COCO_FILE),
        },
        "task": {"type": "text-detection", "output": OUTPUT_NAME},
        "scenario": {"batchSizes": [1]},
    }
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return {"apiVersion": API_VERSION_FULL, "kind": KIND, "metadata": {"name": name}, "spec": spec}


# ------------------------------------------------------------------------------ rendered data


def write_text_images(folder: Path, count: int = COUNT, seed: int = SEED) -> dict[str, list[Box]]:
    """Render ``count`` images of dark words on a light, noisy background into
    ``folder/images/text/NN.png`` and their word boxes (the extent of each word's ink) into
    ``folder/boxes.json``; returns the boxes by file name. Words on one row are at least two
    font heights apart and rows one font height apart, so each word is its own text line."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    images = folder / IMAGES_DIR / CLASS_DIR
    images.mkdir(parents=True)
    truth: dict[str, list[Box]] = {}
    for index in range(count):
        background = rng.integers(200, 256)
        noise = rng.normal(0.0, 6.0, (RENDER_SIZE, RENDER_SIZE, 3))
        pixels = np.clip(background + noise, 0, 255).astype(np.uint8)
        canvas = Image.fromarray(pixels, "RGB")
        boxes: list[Box] = []
        y = int(rng.integers(8, 24))
        while True:
            size = int(rng.choice(FONT_SIZES))
            if y + 2 * size > RENDER_SIZE:
                break
            font = ImageFont.load_default(size=size)
            x = int(rng.integers(8, 48))
            while True:
                word = str(rng.choice(WORDS))
                ink = Image.new("L", canvas.size, 0)
                ImageDraw.Draw(ink).text((x, y), word, fill=255, font=font)
                extent = ink.getbbox()
                if extent is None or extent[2] > RENDER_SIZE - 8:
                    break
                colour = tuple(int(c) for c in rng.integers(0, 90, 3))
                canvas.paste(Image.new("RGB", canvas.size, colour), (0, 0), ink)
                boxes.append(tuple(float(v) for v in extent))  # type: ignore[arg-type]
                x = extent[2] + 2 * size + int(rng.integers(0, 40))
            y += 2 * size + int(rng.integers(0, 12))
        name = f"{index:02d}.png"
        canvas.save(images / name)
        truth[name] = boxes
    (folder / BOXES_FILE).write_text(json.dumps(truth, indent=1))
    (folder / COCO_FILE).write_text(json.dumps(coco_document(truth), indent=1))
    return truth


def coco_document(truth: dict[str, list[Box]]) -> dict[str, Any]:
    """The word boxes as a COCO instances file (one category, text), images by file name
    in the images folder, so a spec reads them as ``dataset.type: coco``."""
    document: dict[str, Any] = {
        "images": [],
        "annotations": [],
        "categories": [{"id": 1, "name": "text"}],
    }
    for number, (name, boxes) in enumerate(sorted(truth.items()), start=1):
        document["images"].append(
            {"id": number, "file_name": name, "width": RENDER_SIZE, "height": RENDER_SIZE}
        )
        for x0, y0, x1, y1 in boxes:
            document["annotations"].append(
                {"id": len(document["annotations"]) + 1, "image_id": number, "category_id": 1,
                 "bbox": [x0, y0, x1 - x0, y1 - y0], "iscrowd": 0}
            )  # fmt: skip
    return document


def read_boxes(folder: Path) -> dict[str, list[Box]]:
    """The rendered boxes by file name, as :func:`write_text_images` wrote them."""
    loaded = json.loads((folder / BOXES_FILE).read_text())
    return {name: [tuple(b) for b in boxes] for name, boxes in loaded.items()}


def text_images_key() -> str:
    """This module and the Pillow that renders the images."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    version = "none"
    with contextlib.suppress(metadata.PackageNotFoundError):
        version = metadata.version("pillow")
    digest.update(f"\0pillow={version}\0{COUNT}\0{SEED}".encode())
    return digest.hexdigest()[:16]


def ensure_text_images(cache_dir: Path | None = None) -> Path:
    """The rendered images and their boxes under ``<cache>/datasets/textdet/<key>``, written
    on first use (a second)."""
    base = (cache_dir if cache_dir is not None else default_cache_dir()) / "datasets" / "textdet"
    command = [sys.executable, "-m", "mlmodelscope.agent.tasks.textdet"]
    return digits.build_once(
        base / text_images_key(), command, "the rendered text images", BUILD_TIMEOUT_S
    )


# ------------------------------------------------------------------------ DB post-processing


def db_boxes(
    probability: np.ndarray,
    size: tuple[int, int],
    *,
    thresh: float = THRESH,
    box_thresh: float = BOX_THRESH,
    unclip_ratio: float = UNCLIP_RATIO,
) -> tuple[list[Box], list[float]]:
    """Boxes (in an image of ``size`` = (height, width)) and scores from one (H, W)
    probability map, as rapidocr's ``DBPostProcess`` finds them for horizontal text: pixels
    above ``thresh``, dilated by a 2x2 square; each 8-connected region's bounding rectangle,
    kept if its shorter side is at least 3 pixels and its mean probability at least
    ``box_thresh``; grown on every side by ``area * unclip_ratio / perimeter`` (the distance
    of DB's unclip offset); kept if its shorter side is then at least 5; scaled to ``size``.
    rapidocr fits rotated rectangles (``cv2.minAreaRect``); for upright words they are these
    axis-aligned ones."""
    from scipy import ndimage

    height, width = probability.shape
    # origin -1: each pixel also covers the one below and to the right, as cv2.dilate's 2x2
    mask = ndimage.binary_dilation(probability > thresh, structure=np.ones((2, 2), bool), origin=-1)
    regions, _ = ndimage.label(mask, structure=np.ones((3, 3), bool))
    boxes: list[Box] = []
    scores: list[float] = []
    for found in ndimage.find_objects(regions):
        if found is None:
            continue
        rows, cols = found
        h, w = rows.stop - rows.start, cols.stop - cols.start
        if min(h, w) < MIN_SIZE:
            continue
        score = float(probability[rows, cols].mean())
        if score < box_thresh:
            continue
        grow = h * w * unclip_ratio / (2 * (h + w))
        if min(h, w) + 2 * grow < MIN_SIZE + 2:
            continue
        x0, x1 = cols.start - grow, cols.stop + grow
        y0, y1 = rows.start - grow, rows.stop + grow
        sy, sx = size[0] / height, size[1] / width
        boxes.append(
            (
                float(np.clip(round(x0 * sx), 0, size[1])),
                float(np.clip(round(y0 * sy), 0, size[0])),
                float(np.clip(round(x1 * sx), 0, size[1])),
                float(np.clip(round(y1 * sy), 0, size[0])),
            )
        )
        scores.append(score)
    return boxes, scores


# ---------------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class DetectionScore:
    """Box-level precision, recall and their harmonic mean at one IoU threshold."""

    matched: int
    detections: int
    truths: int
    iou_threshold: float

    @property
    def precision(self) -> float:
        return self.matched / self.detections if self.detections else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.truths if self.truths else 0.0

    @property
    def hmean(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass(frozen=True)
class TextDetectionMetrics(TaskMetrics):
    """What the text-detection task records: h-mean (its primary), precision and recall."""

    hmean: float
    precision: float
    recall: float
    matched: int
    detections: int
    truths: int
    iou_threshold: float
    primary: ClassVar[str] = "hmean"

    @classmethod
    def of(cls, score: DetectionScore) -> TextDetectionMetrics:
        return cls(
            score.hmean, score.precision, score.recall, score.matched, score.detections,
            score.truths, score.iou_threshold,
        )  # fmt: skip


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two x0, y0, x1, y1 boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0.0) * max(h, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match_count(detections: Sequence[Box], truths: Sequence[Box], threshold: float) -> int:
    """One-to-one matches with IoU at least ``threshold``, pairs taken best IoU first (each
    detection and each true box used once, as ICDAR's protocol counts them)."""
    pairs = sorted(
        (
            (iou(d, t), i, j)
            for i, d in enumerate(detections)
            for j, t in enumerate(truths)
            if iou(d, t) >= threshold
        ),
        key=lambda p: (-p[0], p[1], p[2]),
    )
    used_d: set[int] = set()
    used_t: set[int] = set()
    for _, i, j in pairs:
        if i not in used_d and j not in used_t:
            used_d.add(i)
            used_t.add(j)
    return len(used_d)


def hmean(
    detections: dict[str, list[Box]],
    truths: dict[str, list[Box]],
    threshold: float = IOU_THRESHOLD,
) -> DetectionScore:
    """Precision, recall and h-mean over every image of ``truths`` (an image without
    detections counts its true boxes as missed)."""
    matched = found = 0
    for name, boxes in truths.items():
        mine = detections.get(name, [])
        matched += match_count(mine, boxes, threshold)
        found += len(mine)
    total = sum(len(b) for b in truths.values())
    return DetectionScore(matched, found, total, threshold)


@dataclass(frozen=True)
class TextDetection:
    """What :func:`detect` found and how it scored."""

    boxes: dict[str, list[Box]]
    score: DetectionScore


def detect(folder: Path, spec: Any) -> TextDetection:
    """Run ``spec``'s model (an EvaluationSpec of :func:`textdet_evaluation`) in ONNX Runtime
    on every rendered image, preprocessed by the agent's own :class:`Preprocessor` with the
    spec's steps, and score the DB boxes against the rendered ones."""
    import onnxruntime as ort

    from mlmodelscope.agent.processing import Preprocessor

    pre = Preprocessor(spec.preprocessing, layout=spec.dataset.layout)
    session = ort.InferenceSession(spec.model.uri, providers=["CPUExecutionProvider"])
    truths = read_boxes(folder)
    found: dict[str, list[Box]] = {}
    for name in truths:
        x = pre(str(folder / IMAGES_DIR / CLASS_DIR / name))
        probability = session.run([OUTPUT_NAME], {INPUT_NAME: x[np.newaxis]})[0][0, 0]
        found[name], _ = db_boxes(probability, (RENDER_SIZE, RENDER_SIZE))
    return TextDetection(found, hmean(found, truths))


def main(argv: list[str] | None = None) -> int:
    """Render into ``--out`` (what :func:`ensure_text_images` runs), or render (or reuse) the
    cached folder and optionally point ``--link`` at it."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", type=Path, help="render into this new folder")
    parser.add_argument("--link", type=Path, help="make this path a symlink to the folder")
    args = parser.parse_args(argv)
    if args.out is not None:
        if args.out.exists():
            shutil.rmtree(args.out)
        truth = write_text_images(args.out)
        manifest = {"images": len(truth), "boxes": sum(len(b) for b in truth.values())}
        (args.out / digits.MANIFEST).write_text(json.dumps(manifest))
        return 0
    return digits.build_and_link("text images", ensure_text_images, args.link)


if __name__ == "__main__":
    raise SystemExit(main())
