"""Task datasets in the formats users already have: COCO JSON beside an image folder, image
and PNG-mask folders (VOC style), input and target image folders (image to image), and JSONL,
CSV or Parquet text with a label column.

Each reader returns its samples in a deterministic order (COCO image id; sorted file names;
file order for text), cut to ``limit`` after ordering (a text file's class names are still
numbered over the whole file), and refuses what is broken with a :class:`DatasetError`
naming the file. Where the caller allows skipping (``skip_missing``), a missing image is
left out and counted in ``skipped``, never dropped silently.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import re
import reprlib
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
PARQUET_BATCH = 65536
"""Rows per Parquet read (pyarrow's default); a smaller ``limit`` reads only that many, since
a batch may span row groups."""


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
    """The first ``limit`` rows (all without one) of a ``.jsonl``, ``.csv`` or ``.parquet``
    file in file order: the text and its label. Labels are integers (or strings of digits),
    each its own index, or class names numbered in sorted order over the whole file, never a
    mix; so a limit never changes a label's number. Reading stops at the limit when the rows
    kept have integer labels; class names need every row's label, so the rest of the file is
    read for its labels alone (a Parquet file's label column alone). A Parquet file is read
    through pyarrow (the ``parquet`` extra), only its two columns; its texts must be strings
    and its labels integers or strings, never null."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        columns = _parquet_columns(path, text_field, label_field, limit)
        texts, raw = _checked_parquet_rows(path, *columns, text_field, label_field)
        labels, names = _label_indices(
            path, raw, lambda: _parquet_labels(path, label_field, skip=len(raw))
        )
        return TextDataset(texts, labels, names)
    if suffix not in (".jsonl", ".csv"):
        raise DatasetError(f"{path}: expected a .jsonl, .csv or .parquet file")
    with contextlib.closing(_text_rows(path, suffix)) as rows:
        kept: list[tuple[str, object]] = []
        for number, row in rows:
            missing = [
                f for f in (text_field, label_field) if not isinstance(row, dict) or f not in row
            ]
            if missing:
                raise DatasetError(f"{path}: row {number} has no {' or '.join(missing)} field")
            kept.append((str(row[text_field]), row[label_field]))
            if limit is not None and len(kept) >= limit:
                break
        if not kept:
            raise DatasetError(f"{path}: no rows")
        labels, names = _label_indices(
            path,
            [label for _, label in kept],
            lambda: ((n, _label_of(path, n, row, label_field)) for n, row in rows),
        )
    return TextDataset(tuple(text for text, _ in kept), labels, names)


def _text_rows(path: Path, suffix: str) -> Generator[tuple[int, Any], None, None]:
    """The rows of a JSONL or CSV file with their numbers, read as they are asked for."""
    try:
        with path.open(newline="") as handle:
            if suffix == ".csv":
                yield from enumerate(csv.DictReader(handle), start=1)
                return
            number = 0
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError(
                        f"{path}: line {line_number} is not JSON ({exc.msg})"
                    ) from None
                number += 1
                yield number, row
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc})") from None


def _label_of(path: Path, number: int, row: Any, label_field: str) -> object:
    if not isinstance(row, dict) or label_field not in row:
        raise DatasetError(f"{path}: row {number} has no {label_field} field")
    return row[label_field]


def _label_indices(
    path: Path, kept: Sequence[object], rest: Callable[[], Iterable[tuple[int, object]]]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The indices of the ``kept`` rows' labels (rows 1, 2, ...): integers (or strings of
    digits) as they are; class names numbered in sorted order over these and the ``rest``
    of the file's labels (numbered rows, read only for class names), returned beside the
    indices. Integers and class names in one file are an error naming both rows."""
    integers = [_integer(v) for v in kept]
    first = (1, kept[0])
    if integers[0] is not None:
        for number, (value, integer) in enumerate(zip(kept, integers, strict=True), start=1):
            if integer is None:
                raise _mixed(path, first, (number, value))
        return tuple(i for i in integers if i is not None), ()
    found: set[str] = set()
    for number, value in itertools.chain(enumerate(kept, start=1), rest()):
        if _integer(value) is not None:
            raise _mixed(path, first, (number, value))
        found.add(str(value))
    names = tuple(sorted(found))
    index = {name: i for i, name in enumerate(names)}
    return tuple(index[str(v)] for v in kept), names


def _mixed(path: Path, first: tuple[int, object], other: tuple[int, object]) -> DatasetError:
    kinds = ("an integer", "a class name")
    a, b = (kinds[_integer(v) is None] for _, v in (first, other))
    return DatasetError(
        f"{path}: row {other[0]}'s label {reprlib.repr(other[1])} is {b}, but row "
        f"{first[0]}'s {reprlib.repr(first[1])} is {a}; labels are all integers or all "
        "class names"
    )


def _integer(value: object) -> int | None:
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)
    return None


def _parquet_columns(
    path: Path, text_field: str, label_field: str, limit: int | None
) -> tuple[list[object], list[object]]:
    """The text and label columns of a Parquet file in file order, cut to ``limit``: no other
    column is read, nor any batch past the limit."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(
            f"{path}: reading Parquet needs pyarrow; install the parquet extra "
            "(pip install 'mlmodelscope[parquet]')"
        ) from None
    fields = list(dict.fromkeys((text_field, label_field)))
    texts: list[object] = []
    labels: list[object] = []
    try:
        with pq.ParquetFile(path) as parquet:
            names: list[str] = parquet.schema_arrow.names
            missing = [repr(f) for f in fields if f not in names]
            if missing:
                raise DatasetError(
                    f"{path}: no column {' or '.join(missing)}; "
                    f"its columns are {', '.join(names) or 'none'}"
                )
            batch_size = min(limit or PARQUET_BATCH, PARQUET_BATCH)
            for batch in parquet.iter_batches(batch_size=batch_size, columns=fields):
                texts += batch.column(text_field).to_pylist()
                labels += batch.column(label_field).to_pylist()
                if limit is not None and len(texts) >= limit:
                    break
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except (pa.ArrowException, OSError) as exc:
        reason = " ".join(str(exc).split())  # pyarrow's messages span lines
        raise DatasetError(f"{path}: not a readable Parquet file ({reason})") from None
    return texts[:limit], labels[:limit]


def _checked_parquet_rows(
    path: Path, texts: list[object], labels: list[object], text_field: str, label_field: str
) -> tuple[tuple[str, ...], tuple[int | str, ...]]:
    """The rows typed as the columns promise: a string text and an integer or string label,
    neither null; the first row that is not names the file, the row and the value."""
    if not texts:
        raise DatasetError(f"{path}: no rows")
    good_texts: list[str] = []
    good_labels: list[int | str] = []
    for number, (text, label) in enumerate(zip(texts, labels, strict=True), start=1):
        if text is None or label is None:
            empty = text_field if text is None else label_field
            raise DatasetError(f"{path}: row {number}: {empty!r} is null")
        if not isinstance(text, str):
            raise DatasetError(
                f"{path}: row {number}: {text_field!r} is {type(text).__name__} "
                f"{reprlib.repr(text)}, not a string"
            )
        good_texts.append(text)
        good_labels.append(_checked_label(path, number, label, label_field))
    return tuple(good_texts), tuple(good_labels)


def _checked_label(path: Path, number: int, label: object, label_field: str) -> int | str:
    """A Parquet label as its column promises: an integer or a string, never null."""
    if label is None:
        raise DatasetError(f"{path}: row {number}: {label_field!r} is null")
    if isinstance(label, bool) or not isinstance(label, int | str):
        raise DatasetError(
            f"{path}: row {number}: {label_field!r} is {type(label).__name__} "
            f"{reprlib.repr(label)}, not an integer or a class name (a string)"
        )
    return label


def _parquet_labels(path: Path, label_field: str, *, skip: int) -> Iterator[tuple[int, object]]:
    """The labels of a Parquet file's rows after the first ``skip``, numbered, read from the
    label column alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    number = 0
    try:
        with pq.ParquetFile(path) as parquet:
            for batch in parquet.iter_batches(batch_size=PARQUET_BATCH, columns=[label_field]):
                for label in batch.column(label_field).to_pylist():
                    number += 1
                    if number > skip:
                        yield number, _checked_label(path, number, label, label_field)
    except (pa.ArrowException, OSError) as exc:
        reason = " ".join(str(exc).split())
        raise DatasetError(f"{path}: not a readable Parquet file ({reason})") from None
