"""Image-to-image (enhancement, super-resolution): PSNR and SSIM per image by scikit-image,
averaged over the images, the way super-resolution papers report them.

SSIM uses Wang et al.'s settings (Gaussian window, sigma 1.5, population covariance), which
scikit-image offers as options; its default uniform 7x7 window gives other numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from mlmodelscope.agent.tasks.record import TaskMetrics


@dataclass(frozen=True)
class RestorationMetrics(TaskMetrics):
    """Mean PSNR (dB) and mean SSIM over the images."""

    psnr: float
    ssim: float
    images: int
    primary: ClassVar[str] = "psnr"


def restoration_metrics(
    outputs: np.ndarray,
    references: np.ndarray,
    *,
    data_range: float,
    layout: Literal["NCHW", "NHWC"] = "NCHW",
) -> RestorationMetrics:
    """``outputs`` against ``references``, batches of images of the same shape whose values
    span ``data_range`` (1.0 for floats in [0, 1], 255 for 8-bit). PSNR is infinite for an
    image equal to its reference."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    out = np.asarray(outputs, dtype=np.float64)
    ref = np.asarray(references, dtype=np.float64)
    if out.shape != ref.shape or out.ndim != 4:
        raise ValueError(
            f"outputs {out.shape} and references {ref.shape}: need one NCHW/NHWC shape"
        )
    if layout == "NCHW":
        out, ref = out.transpose(0, 2, 3, 1), ref.transpose(0, 2, 3, 1)
    psnr, ssim = [], []
    for o, r in zip(out, ref, strict=True):
        with np.errstate(divide="ignore"):
            psnr.append(float(peak_signal_noise_ratio(r, o, data_range=data_range)))  # type: ignore[no-untyped-call]
        ssim.append(
            float(
                structural_similarity(  # type: ignore[no-untyped-call]
                    r,
                    o,
                    data_range=data_range,
                    channel_axis=-1,
                    gaussian_weights=True,
                    sigma=1.5,
                    use_sample_covariance=False,
                )
            )
        )
    return RestorationMetrics(
        psnr=float(np.mean(psnr)), ssim=float(np.mean(ssim)), images=len(psnr)
    )
