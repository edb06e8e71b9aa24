"""Image-to-image (enhancement, super-resolution): PSNR and SSIM per image by scikit-image,
averaged over the images, the way super-resolution papers report them.

SSIM uses Wang et al.'s settings (Gaussian window, sigma 1.5, population covariance), which
scikit-image offers as options; its default uniform 7x7 window gives other numbers.

An output equal to its reference has an infinite PSNR, which no mean can hold: such images
are counted (``identical``) and left out of the PSNR mean, not of the SSIM mean (where they
count 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from mlmodelscope.agent.tasks.record import TaskMetrics


@dataclass(frozen=True)
class ImageQuality:
    """One image's PSNR (dB; infinite when it equals its reference) and SSIM."""

    psnr: float
    ssim: float


def image_quality(output: np.ndarray, reference: np.ndarray, *, data_range: float) -> ImageQuality:
    """PSNR and SSIM of one image against its reference, both [H, W, C] (or [H, W]) of the same
    shape with values spanning ``data_range``."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    out = np.asarray(output, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    if out.shape != ref.shape or out.ndim not in (2, 3):
        raise ValueError(f"output {out.shape} and reference {ref.shape}: need one HWC/HW shape")
    with np.errstate(divide="ignore"):
        psnr = float(peak_signal_noise_ratio(ref, out, data_range=data_range))  # type: ignore[no-untyped-call]
    ssim = structural_similarity(  # type: ignore[no-untyped-call]
        ref,
        out,
        data_range=data_range,
        channel_axis=-1 if out.ndim == 3 else None,
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
    )
    return ImageQuality(psnr, float(ssim))


@dataclass(frozen=True)
class RestorationMetrics(TaskMetrics):
    """Mean PSNR (dB) over the images that differ from their reference (None when none
    does), mean SSIM over all of them, and how many were identical."""

    psnr: float | None
    ssim: float
    images: int
    identical: int = 0
    primary: ClassVar[str] = "psnr"

    @classmethod
    def of(cls, qualities: Sequence[ImageQuality]) -> RestorationMetrics:
        if not qualities:
            raise ValueError("no image was scored")
        finite = [q.psnr for q in qualities if math.isfinite(q.psnr)]
        return cls(
            psnr=float(np.mean(finite)) if finite else None,
            ssim=float(np.mean([q.ssim for q in qualities])),
            images=len(qualities),
            identical=len(qualities) - len(finite),
        )


def restoration_metrics(
    outputs: np.ndarray,
    references: np.ndarray,
    *,
    data_range: float,
    layout: Literal["NCHW", "NHWC"] = "NCHW",
) -> RestorationMetrics:
    """``outputs`` against ``references``, batches of images of the same shape whose values
    span ``data_range`` (1.0 for floats in [0, 1], 255 for 8-bit)."""
    out = np.asarray(outputs, dtype=np.float64)
    ref = np.asarray(references, dtype=np.float64)
    if out.shape != ref.shape or out.ndim != 4:
        raise ValueError(
            f"outputs {out.shape} and references {ref.shape}: need one NCHW/NHWC shape"
        )
    if layout == "NCHW":
        out, ref = out.transpose(0, 2, 3, 1), ref.transpose(0, 2, 3, 1)
    return RestorationMetrics.of(
        [image_quality(o, r, data_range=data_range) for o, r in zip(out, ref, strict=True)]
    )
