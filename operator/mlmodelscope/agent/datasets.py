"""Evaluation datasets: raw samples in a fixed order, labels when the data has them.

Samples stay raw (HWC arrays, or encoded image files for imagefolder) so that the declared
preprocessing steps do all the work and are timed separately from inference. The order never
depends on the filesystem or on hash seeds, so ``limit`` and accuracy are reproducible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import numpy as np

from mlmodelscope.agent.sources import fetch_uri, local_path
from mlmodelscope.contract.redact import redact_uri
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import Dataset, DatasetType, DType

T = TypeVar("T")

if TYPE_CHECKING:
    from mlmodelscope.agent.tasks.data import CocoDataset

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp"})

RawSample: TypeAlias = np.ndarray | bytes | Path | str
"""One sample as a dataset yields it: an array, an encoded image (bytes or a file path), or a
text (text datasets, tokenized instead of preprocessed)."""


@dataclass(frozen=True)
class Samples:
    """A loaded dataset: ``x[i]`` is sample i, ``y[i]`` its integer label when known."""

    name: str
    """Short description recorded with results, e.g. 'digits/test' or 'imagefolder:/data/val'."""
    x: list[RawSample] | np.ndarray
    """Raw samples: an (N, ...) array, or a list of arrays / encoded images (bytes or paths)."""
    y: np.ndarray | None = None
    """int64 labels, shape (N,), or None for unlabelled data (performance only)."""
    class_names: list[str] | None = None
    """Names of the label indices, when the dataset knows them."""
    masks: tuple[Path, ...] | None = None
    """masks datasets: each sample's mask file, what segmentation metrics score against."""
    coco: CocoDataset | None = None
    """coco datasets: the images' boxes and the ground truth COCO AP is computed against."""
    targets: tuple[Path, ...] | None = None
    """pairs datasets: each sample's target image, what PSNR and SSIM score against."""
    scale: Fraction | None = None
    """pairs datasets: target size over input size, one factor for the whole set."""
    skipped: int = 0
    """Samples left out because their mask or target was missing (``dataset.skipMissing``)."""

    @property
    def has_labels(self) -> bool:
        """Whether accuracy can be computed: labels, or masks, boxes or targets to score
        against."""
        return (
            self.y is not None
            or self.masks is not None
            or self.coco is not None
            or self.targets is not None
        )

    def __len__(self) -> int:
        return len(self.x)


def _limited(samples: Samples, limit: int | None) -> Samples:
    if limit is None or limit >= len(samples):
        return samples
    return Samples(
        name=samples.name,
        x=samples.x[:limit],
        y=None if samples.y is None else samples.y[:limit],
        class_names=samples.class_names,
        masks=None if samples.masks is None else samples.masks[:limit],
        coco=samples.coco,
        targets=None if samples.targets is None else samples.targets[:limit],
        scale=samples.scale,
        skipped=samples.skipped,
    )


def _digits(ds: Dataset) -> Samples:
    from mlmodelscope.agent.digits import digits_split

    images, labels = digits_split(ds.split)
    return Samples(
        name=f"digits/{ds.split}", x=images, y=labels, class_names=[str(i) for i in range(10)]
    )


def synthetic_array(shape: tuple[int, ...], dtype: DType, seed: int) -> np.ndarray:
    """Seeded random data: standard normal for floats, uniform 0..255 for integers, 0/1 for bool.

    bfloat16 has no numpy type, so it is generated as float32 (backends cast it).
    """
    rng = np.random.default_rng(seed)
    if dtype in (DType.FLOAT32, DType.BFLOAT16):
        return rng.standard_normal(shape, dtype=np.float32)
    if dtype == DType.FLOAT64:
        return rng.standard_normal(shape, dtype=np.float64)
    if dtype == DType.FLOAT16:
        return rng.standard_normal(shape, dtype=np.float32).astype(np.float16)
    if dtype == DType.BOOL:
        return rng.integers(0, 2, size=shape, dtype=np.uint8).astype(np.bool_)
    return rng.integers(0, 256, size=shape, dtype=np.dtype(dtype.value))


def _synthetic(ds: Dataset, seed: int) -> Samples:
    if ds.shape is None:  # the spec's own rule already requires it
        raise SpecError("spec.dataset.shape", "required when type is synthetic")
    count = min(ds.size, ds.limit) if ds.limit else ds.size
    x = synthetic_array((count, *ds.shape), ds.dtype, seed)
    return Samples(name=f"synthetic/{ds.dtype.value}{list(ds.shape)}", x=x)


def _visible(path: Path) -> bool:
    return not path.name.startswith(".")


def _imagefolder(ds: Dataset, base_dir: Path | None) -> Samples:
    field = "spec.dataset.path"
    if ds.path is None:
        raise SpecError(field, "required when type is imagefolder")
    root = local_path(ds.path, base_dir=base_dir, field=field)
    if not root.is_dir():
        raise SpecError(field, f"folder {ds.path!r} not found (resolved to {root})")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and _visible(p))
    if not classes:
        raise SpecError(field, f"{root} has no class sub-folders; put each class's images in one")
    files: list[RawSample] = []
    labels: list[int] = []
    for index, name in enumerate(classes):
        images = sorted(
            (
                p
                for p in (root / name).iterdir()
                if p.is_file() and _visible(p) and p.suffix.lower() in IMAGE_SUFFIXES
            ),
            key=lambda p: p.name,
        )
        files.extend(images)
        labels.extend([index] * len(images))
    if not files:
        raise SpecError(
            field, f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in the class folders of {root}"
        )
    return Samples(
        name=f"imagefolder:{ds.path}",
        x=files,
        y=np.asarray(labels, dtype=np.int64),
        class_names=classes,
    )


def _npz(ds: Dataset, base_dir: Path | None) -> Samples:
    field = "spec.dataset.uri"
    if ds.uri is None:
        raise SpecError(field, "required when type is npz")
    fetched = fetch_uri(
        ds.uri, base_dir=base_dir, kind="datasets", uri_field=field, sha256_field=field
    )
    shown = redact_uri(ds.uri)
    try:
        with np.load(fetched.path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError) as exc:
        raise SpecError(field, f"{shown!r} is not a readable .npz file: {exc}") from exc
    if "x" not in arrays:
        found = ", ".join(sorted(arrays)) or "none"
        raise SpecError(field, f"{shown!r} has no array 'x' (arrays found: {found})")
    x = arrays["x"]
    if x.ndim < 1 or len(x) == 0:
        raise SpecError(field, f"array 'x' in {shown!r} holds no samples")
    y = arrays.get("y")
    if y is not None:
        if y.shape != (len(x),) or not np.issubdtype(y.dtype, np.integer):
            raise SpecError(
                field,
                f"array 'y' in {shown!r} must hold one integer label per sample, shape "
                f"({len(x)},); got {y.dtype} {y.shape}",
            )
        y = y.astype(np.int64)
    names = arrays.get("class_names")
    class_names = [str(n) for n in names.tolist()] if names is not None else None
    return Samples(name=f"npz:{shown}", x=x, y=y, class_names=class_names)


def _folder(value: str | None, field: str, base_dir: Path | None) -> Path:
    if value is None:
        raise SpecError(field, "required for this dataset type")
    return local_path(value, base_dir=base_dir, field=field)


def _paired(
    ds: Dataset, base_dir: Path | None, companions: str | None, field: str, load: Callable[..., T]
) -> T:
    """``load(images, companions)`` of a dataset of images and companion files (masks,
    targets); its error names the field of the folder it is about."""
    from mlmodelscope.agent.tasks.data import DatasetError

    images = _folder(ds.path, "spec.dataset.path", base_dir)
    folder = _folder(companions, field, base_dir)
    try:
        return load(images, folder, limit=ds.limit, skip_missing=ds.skip_missing)
    except DatasetError as exc:
        where = field if str(exc).startswith(str(folder)) else "spec.dataset.path"
        raise SpecError(where, str(exc)) from None


def _masks(ds: Dataset, base_dir: Path | None) -> Samples:
    from mlmodelscope.agent.tasks.data import load_masks

    found = _paired(ds, base_dir, ds.masks, "spec.dataset.masks", load_masks)
    return Samples(
        name=f"masks:{ds.path}",
        x=[s.image for s in found.samples],
        masks=tuple(s.mask for s in found.samples),
        skipped=found.skipped,
    )


def _pairs(ds: Dataset, base_dir: Path | None) -> Samples:
    from mlmodelscope.agent.tasks.data import load_pairs

    found = _paired(ds, base_dir, ds.targets, "spec.dataset.targets", load_pairs)
    return Samples(
        name=f"pairs:{ds.path}",
        x=[s.image for s in found.samples],
        targets=tuple(s.target for s in found.samples),
        scale=found.scale,
        skipped=found.skipped,
    )


def _coco(ds: Dataset, base_dir: Path | None) -> Samples:
    from mlmodelscope.agent.tasks.data import DatasetError, load_coco

    images = _folder(ds.path, "spec.dataset.path", base_dir)
    annotations = _folder(ds.annotations, "spec.dataset.annotations", base_dir)
    try:
        found = load_coco(annotations, images, limit=ds.limit, skip_missing=ds.skip_missing)
    except DatasetError as exc:
        field = (
            "spec.dataset.annotations"
            if str(exc).startswith(str(annotations))
            else ("spec.dataset.path")
        )
        raise SpecError(field, str(exc)) from None
    return Samples(
        name=f"coco:{ds.annotations}",
        x=[image.path for image in found.images],
        coco=found,
        skipped=found.skipped,
    )


def _text(ds: Dataset, base_dir: Path | None) -> Samples:
    from mlmodelscope.agent.tasks.data import DatasetError, load_text

    path = _folder(ds.path, "spec.dataset.path", base_dir)
    try:
        found = load_text(
            path, text_field=ds.text_field, label_field=ds.label_field, limit=ds.limit
        )
    except DatasetError as exc:
        raise SpecError("spec.dataset.path", str(exc)) from None
    return Samples(
        name=f"text:{ds.path}",
        x=list(found.texts),
        y=np.asarray(found.labels, dtype=np.int64),
        class_names=list(found.class_names) or None,
    )


def load_dataset(ds: Dataset, *, seed: int, base_dir: Path | None = None) -> Samples:
    """Load ``spec.dataset`` in its deterministic order, then apply ``limit``.

    ``seed`` drives synthetic data only (digits' split seed is fixed so accuracies stay
    comparable); ``base_dir`` is the spec file's folder, for relative paths.
    """
    if ds.type == DatasetType.DIGITS:
        samples = _digits(ds)
    elif ds.type == DatasetType.SYNTHETIC:
        samples = _synthetic(ds, seed)
    elif ds.type == DatasetType.IMAGEFOLDER:
        samples = _imagefolder(ds, base_dir)
    elif ds.type == DatasetType.MASKS:
        samples = _masks(ds, base_dir)
    elif ds.type == DatasetType.PAIRS:
        samples = _pairs(ds, base_dir)
    elif ds.type == DatasetType.TEXT:
        samples = _text(ds, base_dir)
    elif ds.type == DatasetType.COCO:
        samples = _coco(ds, base_dir)
    else:
        samples = _npz(ds, base_dir)
    return _limited(samples, ds.limit)
