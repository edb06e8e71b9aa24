"""A run's primary metric, by name: what the results store, `mlms runs`, `mlms compare`, the
HTML report and the dashboard show and rank by, so an mIoU is never labelled top-1.

Classification's primary metric is ``top1`` (the accuracy pass's top-1); another task's is the
one its ``task`` section names (``miou`` for segmentation, ``accuracy`` for text
classification, ``psnr`` in dB for image to image). Two runs' primary metrics are comparable
only when their names are equal and they were scored alike (:func:`scoring_of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from mlmodelscope.contract.result import ResultDocument

CLASSIFICATION: Final = "classification"
TOP1: Final = "top1"
FRACTIONS: Final = frozenset({"top1", "accuracy", "miou", "map", "hmean"})
"""Primary metrics that are fractions (0..1), shown as percentages."""
UNITS: Final = {"psnr": "dB"}
"""Primary metrics in a unit, shown to two decimals with it (``psnr 28.31 dB``)."""


@dataclass(frozen=True)
class PrimaryMetric:
    """The task's primary metric of one run."""

    task: str
    """classification, segmentation, text-classification, image-to-image, ..."""
    name: str
    """top1, miou, accuracy, psnr: what the value is."""
    value: float | None
    """None when the run has none (no accuracy pass, unlabelled data, a Failed run)."""


def primary_metric(document: ResultDocument) -> PrimaryMetric:
    """The document's primary metric: its ``task`` section's, else classification's top-1."""
    if document.task is not None:
        value = document.task.metrics.get(document.task.primary)
        number = float(value) if isinstance(value, int | float) else None
        if number is not None and not math.isfinite(number):
            number = None
        return PrimaryMetric(document.task.type, document.task.primary, number)
    top1 = document.accuracy.top1 if document.accuracy is not None else None
    return PrimaryMetric(CLASSIFICATION, TOP1, top1)


SCORING_DEFAULTS: Final = {"channels": "rgb", "crop_border": 0}
"""Task metric fields that say how the primary metric was scored (image-to-image's PSNR and
SSIM on the luma after a border crop), with the value a document without them was scored
under: two values of one metric are comparable only when scored alike."""


def scoring_of(document: ResultDocument) -> str:
    """How the document's primary metric was scored, where that is not the default
    (``channels y, crop_border 4``); empty when it is, or the task has no such fields."""
    metrics = document.task.metrics if document.task is not None else {}
    return ", ".join(
        f"{key} {metrics[key]}"
        for key, default in SCORING_DEFAULTS.items()
        if key in metrics and metrics[key] != default
    )


def format_metric(name: str | None, value: float | None, *, with_name: bool = True) -> str:
    """``miou 67.93%``, ``top1 98.00%``, ``psnr 28.31 dB`` (fractions as percentages, metrics
    with a unit to two decimals, others to 4 digits); ``-`` when there is no value."""
    if value is None:
        return "-"
    if name is None or name in FRACTIONS:
        shown = f"{value:.2%}"
    elif name in UNITS:
        shown = f"{value:.2f} {UNITS[name]}"
    else:
        shown = f"{value:.4g}"
    return f"{name} {shown}" if with_name and name else shown


NOT_MEASURED: Final = "not measured"
"""What a report shows for an efficiency figure the run did not measure (no energy counter,
no price per node-hour, or a document from an older agent)."""
_ENERGY_PREFIXES: Final = ((1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ"), (1e-9, "nJ"))


def format_energy(joules: float | None) -> str:
    """Energy per inference to 3 significant digits with an SI prefix (``1.23 mJ``), or
    ``not measured``."""
    if joules is None or not math.isfinite(joules):
        return NOT_MEASURED
    for scale, unit in _ENERGY_PREFIXES:
        if abs(joules) >= scale:
            return f"{joules / scale:.3g} {unit}"
    return f"{joules / 1e-9:.3g} nJ"


def format_cost(usd: float | None) -> str:
    """Cost per 1,000 inferences in USD to 3 significant digits (``$0.00123``), or
    ``not measured``."""
    if usd is None or not math.isfinite(usd):
        return NOT_MEASURED
    return f"${usd:.3g}"
