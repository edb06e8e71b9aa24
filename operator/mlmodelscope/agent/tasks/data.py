"""Task datasets in the formats users already have: COCO JSON beside an image folder, image
and PNG-mask folders (VOC style), input and target image folders (image to image), and JSONL
or CSV text with a label column.

Each reader returns its samples in a deterministic order (COCO image id; sorted file names;
file order for text), cut to ``limit`` after ordering, and refuses what is broken with a
:class:`DatasetError` naming the file. Where the caller allows skipping (``skip_missing``), a
missing image is left out and counted in ``skipped``, never dropped silently.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file and what is wrong."""


# ---------------------------------------------------------------------------------- COCO


@dataclass(frozen=True)
class CocoImage:
    """One image of a COCO dataset and its boxes (pixel xywh, category ids as in the file)."""

    id: int
    path: Path
    width: int
    height: int
    boxes: tuple[tuple[float, float, float, float], ...]
    categories: tuple[int, ...]


@dataclass(frozen=True)
class CocoDataset:
    images: tuple[CocoImage, ...]
    categories: dict[int, str]
    ground_truth: dict[str, Any]
    """The annotation document cut to ``images`` (what COCO AP is computed against)."""
    skipped: int = 0


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc})") from None


def _entries(document: Any, key: str, path: Path, required: Sequence[str]) -> list[dict[str, Any]]:
    entries = document.get(key) if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise DatasetError(f"{path}: no '{key}' list; is this a COCO annotation file?")
    for index, entry in enumerate(entries):
        missing = [k for k in required if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise DatasetError(f"{path}: {key}[{index}] lacks {', '.join(missing)}")
    return entries


def load_coco(
    annotations: Path, images: Path, *, limit: int | None = None, skip_missing: bool = False
) -> CocoDataset:
    """A COCO detection dataset: ``annotations`` (instances JSON) and the folder its
    ``file_name`` entries are relative to. Crowd annotations are kept in the ground truth
    (COCOeval ignores matches to them) but are not boxes to detect."""
    document = _read_json(annotations)
    image_entries = _entries(
        document, "images", annotations, ("id", "file_name", "width", "height")
    )
    ann_entries = _entries(
        document, "annotations", annotations, ("id", "image_id", "category_id", "bbox")
    )
    cat_entries = _entries(document, "categories", annotations, ("id", "name"))
    categories = {int(c["id"]): str(c["name"]) for c in cat_entries}
    by_image: dict[int, list[dict[str, Any]]] = {}
    for index, ann in enumerate(ann_entries):
        bbox = ann["bbox"]
        if (
            not isinstance(bbox, list)
            or len(bbox) != 4
            or not all(isinstance(v, int | float) for v in bbox)
            or bbox[2] < 0
            or bbox[3] < 0
        ):
            raise DatasetError(
                f"{annotations}: annotations[{index}] (id {ann['id']}) has bbox {bbox!r}; "
                "expected [x, y, width, height] with width and height >= 0"
            )
        if int(ann["category_id"]) not in categories:
            raise DatasetError(
                f"{annotations}: annotations[{index}] (id {ann['id']}) names category "
                f"{ann['category_id']}, which 'categories' does not list"
            )
        by_image.setdefault(int(ann["image_id"]), []).append(ann)
    kept: list[CocoImage] = []
    skipped = 0
    for entry in sorted(image_entries, key=lambda e: int(e["id"])):
        if limit is not None and len(kept) >= limit:
            break
        path = images / str(entry["file_name"])
        if not path.is_file():
            if skip_missing:
                skipped += 1
                continue
            raise DatasetError(
                f"{path}: image {entry['id']} of {annotations} is missing "
                "(allow skipping to leave it out and count it)"
            )
        mine = [a for a in by_image.get(int(entry["id"]), []) if not a.get("iscrowd")]
        kept.append(
            CocoImage(
                id=int(entry["id"]),
                path=path,
                width=int(entry["width"]),
                height=int(entry["height"]),
                boxes=tuple(tuple(float(v) for v in a["bbox"]) for a in mine),  # type: ignore[misc]
                categories=tuple(int(a["category_id"]) for a in mine),
            )
        )
    ids = {image.id for image in kept}
    truth = {
        "images": [e for e in image_entries if int(e["id"]) in ids],
        "annotations": [
            {
                **a,
                "area": a.get("area", a["bbox"][2] * a["bbox"][3]),
                "iscrowd": a.get("iscrowd", 0),
            }
            for a in ann_entries
            if int(a["image_id"]) in ids
        ],
        "categories": cat_entries,
    }
    return CocoDataset(tuple(kept), categories, truth, skipped)


class Companions:
    """Each image of a folder, in name order, with its companion file (a mask, a target) from
    ``companion_of``: at most ``limit`` pairs; an image whose companion is missing is counted
    in :attr:`skipped` when ``skip_missing``, else an error naming the file."""

    def __init__(
        self,
        images: Path,
        companion_of: Callable[[Path], Path],
        what: str,
        limit: int | None,
        skip_missing: bool,
    ) -> None:
        if not images.is_dir():
            raise DatasetError(f"{images}: no such folder of images")
        self.found = sorted(p for p in images.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.found:
            raise DatasetError(f"{images}: no images ({', '.join(IMAGE_SUFFIXES)})")
        self.companion_of = companion_of
        self.what = what
        self.limit = limit
        self.skip_missing = skip_missing
        self.skipped = 0

    def __iter__(self) -> Iterator[tuple[Path, Path]]:
        given = 0
        for image in self.found:
            if self.limit is not None and given >= self.limit:
                return
            companion = self.companion_of(image)
            if not companion.is_file():
                if self.skip_missing:
                    self.skipped += 1
                    continue
                raise DatasetError(f"{companion}: the {self.what} of {image} is missing")
            given += 1
            yield image, companion


# ------------------------------------------------------------------------- segmentation


@dataclass(frozen=True)
class MaskedImage:
    image: Path
    mask: Path


@dataclass(frozen=True)
class MaskDataset:
    samples: tuple[MaskedImage, ...]
    skipped: int = 0


def load_masks(
    images: Path,
    masks: Path,
    *,
    limit: int | None = None,
    skip_missing: bool = False,
) -> MaskDataset:
    """Image files and their PNG masks of the same stem (``2007_000032.jpg`` and
    ``2007_000032.png``, VOC style), sorted by name. A mask must be one channel (``L`` or a
    palette, whose indices are the classes) and the image's size."""
    from PIL import Image

    walk = Companions(images, lambda image: masks / f"{image.stem}.png", "mask", limit,
                      skip_missing)  # fmt: skip
    kept: list[MaskedImage] = []
    for image, mask in walk:
        try:
            with Image.open(image) as i, Image.open(mask) as m:
                image_size, mask_size, mode = i.size, m.size, m.mode
        except OSError as exc:
            raise DatasetError(f"{image} or {mask}: cannot be read as an image ({exc})") from None
        if mode not in ("L", "P"):
            raise DatasetError(
                f"{mask}: mode {mode}; a mask holds one class index per pixel (L or P)"
            )
        if image_size != mask_size:
            raise DatasetError(
                f"{mask}: {mask_size[0]}x{mask_size[1]} pixels, but {image} is "
                f"{image_size[0]}x{image_size[1]}"
            )
        kept.append(MaskedImage(image, mask))
    return MaskDataset(tuple(kept), walk.skipped)


# ------------------------------------------------------------------------- image to image


@dataclass(frozen=True)
class ImagePair:
    image: Path
    target: Path


@dataclass(frozen=True)
class PairDataset:
    samples: tuple[ImagePair, ...]
    scale: Fraction
    """Target size over input size, the same for every pair (1 for restoration)."""
    skipped: int = 0


def load_pairs(
    images: Path,
    targets: Path,
    *,
    limit: int | None = None,
    skip_missing: bool = False,
) -> PairDataset:
    """Input images and their target images of the same file name, sorted by name. Every
    target is its input's size times one factor, the first pair's (1 for denoising, 2 or 4
    for super-resolution); a pair of another factor is an error naming both sizes."""
    from PIL import Image

    walk = Companions(images, lambda image: targets / image.name, "target", limit, skip_missing)
    kept: list[ImagePair] = []
    scale: Fraction | None = None
    for image, target in walk:
        try:
            with Image.open(image) as i, Image.open(target) as t:
                (iw, ih), (tw, th) = i.size, t.size
        except OSError as exc:
            raise DatasetError(f"{image} or {target}: cannot be read as an image ({exc})") from None
        mine = Fraction(tw, iw)
        if Fraction(th, ih) != mine or (scale is not None and mine != scale):
            expected = "" if scale is None else f" (the set's targets are {scale}x their inputs)"
            raise DatasetError(f"{target}: {tw}x{th} pixels, but {image} is {iw}x{ih}{expected}")
        scale = mine
        kept.append(ImagePair(image, target))
    return PairDataset(tuple(kept), scale or Fraction(1), walk.skipped)


# ----------------------------------------------------------------------------------- text


@dataclass(frozen=True)
class TextDataset:
    texts: tuple[str, ...]
    labels: tuple[int, ...]
    class_names: tuple[str, ...] = field(default=())
    """Label names in index order when the labels were strings (sorted), else empty."""


def load_text(
    path: Path, *, text_field: str = "text", label_field: str = "label", limit: int | None = None
) -> TextDataset:
    """Rows of a ``.jsonl`` or ``.csv`` file in file order: the text and an integer label, or
    string labels mapped to indices in sorted order."""
    rows: list[dict[str, Any]] = []
    suffix = path.suffix.lower()
    try:
        with path.open(newline="") as handle:
            if suffix == ".jsonl":
                for number, line in enumerate(handle, start=1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            raise DatasetError(
                                f"{path}: line {number} is not JSON ({exc.msg})"
                            ) from None
            elif suffix == ".csv":
                rows = list(csv.DictReader(handle))
            else:
                raise DatasetError(f"{path}: expected a .jsonl or .csv file")
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc})") from None
    rows = rows[:limit] if limit is not None else rows
    if not rows:
        raise DatasetError(f"{path}: no rows")
    for number, row in enumerate(rows, start=1):
        missing = [
            f for f in (text_field, label_field) if not isinstance(row, dict) or f not in row
        ]
        if missing:
            raise DatasetError(f"{path}: row {number} has no {' or '.join(missing)} field")
    raw = [row[label_field] for row in rows]
    names: tuple[str, ...] = ()
    if all(isinstance(v, int) or (isinstance(v, str) and v.lstrip("-").isdigit()) for v in raw):
        labels = tuple(int(v) for v in raw)
    else:
        names = tuple(sorted({str(v) for v in raw}))
        index = {name: i for i, name in enumerate(names)}
        labels = tuple(index[str(v)] for v in raw)
    return TextDataset(tuple(str(row[text_field]) for row in rows), labels, names)
