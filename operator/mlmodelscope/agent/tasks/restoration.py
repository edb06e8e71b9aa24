"""Image-to-image (enhancement, super-resolution): PSNR and SSIM per image by scikit-image,
averaged over the images, the way super-resolution papers report them.

SSIM uses Wang et al.'s settings (Gaussian window, sigma 1.5, population covariance), which
scikit-image offers as options; its default uniform 7x7 window gives other numbers.

Super-resolution papers (and BasicSR's, EDSR's and RCAN's benchmark code) score the luma
only, after cutting ``scale`` pixels off every border: :class:`Scoring` says which part of an
image is compared, and the metrics record it.

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

SSIM_WINDOW = 11
"""The side of SSIM's Gaussian window (sigma 1.5, truncated at 3.5 sigma, as scikit-image
builds it): a scored image must be at least this tall and wide."""


@dataclass(frozen=True)
class Scoring:
    """Which part of each image PSNR and SSIM compare: ``crop_border`` pixels cut off every
    side, then every channel (``rgb``) or the BT.601 luma (``y``) of an RGB image."""

    crop_border: int = 0
    channels: Literal["rgb", "y"] = "rgb"


def scored_part(image: np.ndarray, scoring: Scoring, *, data_range: float) -> np.ndarray:
    """The part of an image [H, W, C] (or [H, W]) with values in 0..``data_range`` that is
    scored. ``y`` is scikit-image's ``rgb2ycbcr`` (MATLAB's: Y = 16 + 65.481 R + 128.553 G
    + 24.966 B of R, G, B in [0, 1], so Y spans 16..235) on the image scaled to [0, 1], its Y
    scaled back by ``data_range / 255``, as BasicSR scores 8-bit images against 255."""
    border = scoring.crop_border
    part = image[border:-border, border:-border] if border else image
    if scoring.channels == "y":
        from skimage.color import rgb2ycbcr

        luma = rgb2ycbcr(part / data_range)[..., 0]
        return np.asarray(luma * (data_range / 255.0))
    return part


@dataclass(frozen=True)
class ImageQuality:
    """One image's PSNR (dB; infinite when it equals its reference) and SSIM."""

    psnr: float
    ssim: float


def image_quality(
    output: np.ndarray, reference: np.ndarray, *, data_range: float, scoring: Scoring = Scoring()
) -> ImageQuality:
    """PSNR and SSIM of one image against its reference, both [H, W, C] (or [H, W]) of the same
    shape with values spanning ``data_range``, over the part ``scoring`` names."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    out = np.asarray(output, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    if out.shape != ref.shape or out.ndim not in (2, 3):
        raise ValueError(f"output {out.shape} and reference {ref.shape}: need one HWC/HW shape")
    out = scored_part(out, scoring, data_range=data_range)
    ref = scored_part(ref, scoring, data_range=data_range)
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
    does), mean SSIM over all of them, how many were identical, and the :class:`Scoring`
    they were computed under (so a reader knows which PSNR it is)."""

    psnr: float | None
    ssim: float
    images: int
    identical: int = 0
    crop_border: int = 0
    channels: Literal["rgb", "y"] = "rgb"
    primary: ClassVar[str] = "psnr"

    @classmethod
    def of(
        cls, qualities: Sequence[ImageQuality], scoring: Scoring = Scoring()
    ) -> RestorationMetrics:
        if not qualities:
            raise ValueError("no image was scored")
        finite = [q.psnr for q in qualities if math.isfinite(q.psnr)]
        return cls(
            psnr=float(np.mean(finite)) if finite else None,
            ssim=float(np.mean([q.ssim for q in qualities])),
            images=len(qualities),
            identical=len(qualities) - len(finite),
            crop_border=scoring.crop_border,
            channels=scoring.channels,
        )


def restoration_metrics(
    outputs: np.ndarray,
    references: np.ndarray,
    *,
    data_range: float,
    layout: Literal["NCHW", "NHWC"] = "NCHW",
    scoring: Scoring = Scoring(),
) -> RestorationMetrics:
    """``outputs`` against ``references``, batches of images of the same shape whose values
    span ``data_range`` (1.0 for floats in [0, 1], 255 for 8-bit), RGB when ``scoring``
    asks for the luma."""
    out = np.asarray(outputs, dtype=np.float64)
    ref = np.asarray(references, dtype=np.float64)
    if out.shape != ref.shape or out.ndim != 4:
        raise ValueError(
            f"outputs {out.shape} and references {ref.shape}: need one NCHW/NHWC shape"
        )
    if layout == "NCHW":
        out, ref = out.transpose(0, 2, 3, 1), ref.transpose(0, 2, 3, 1)
    return RestorationMetrics.of(
        [
            image_quality(o, r, data_range=data_range, scoring=scoring)
            for o, r in zip(out, ref, strict=True)
        ],
        scoring,
    )
