"""Pre- and post-processing exactly as the spec declares it, with no hidden steps.

Preprocessing runs per sample, in the declared order, and is timed separately from inference
(:func:`preprocess_all`). Each sample starts HWC (channels last) and RGB; the layout and channel
order are tracked through the steps, so ``normalize`` and ``channelOrder`` find the channel axis
wherever a ``layout`` step moved it. :meth:`Preprocessor.infer` runs the same steps on shapes
only, so a mismatch with the model's declared input is reported before any model is loaded.

Decoding: Pillow by default, or OpenCV (``decode.library: opencv``, :func:`decode_image`), with
the same limits, orientation and colour conversion, so the decoder alone differs.

Resizing: uint8 images use Pillow's filters (its bilinear/bicubic antialias when shrinking, like
``torchvision.transforms.Resize`` on PIL images). Float images use numpy nearest/bilinear with
half-pixel centres and no antialiasing (like ``cv2.resize`` / ``tf.image.resize``), and Pillow's
32-bit float mode per channel for bicubic. Put ``resize`` before ``toFloat`` for Pillow's filters.

Post-processing turns a batch of the first model output into class scores, best-first top-k
indices (ties go to the lower class index) and argmax; :func:`accuracy` scores them.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from mlmodelscope.agent.datasets import RawSample, Samples
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import DType, PostprocessStep, PreprocessStep, TensorSpec

HWC = "HWC"
CHW = "CHW"
DEFAULT_TOPK = 5

Shape = tuple[int | None, ...]
"""A sample shape without the batch dimension; None marks a dimension unknown until run time."""


class PreprocessError(ValueError):
    """A sample could not be preprocessed (corrupt image, inconsistent shapes)."""


def numpy_dtype(dtype: DType | str) -> np.dtype[Any]:
    """The numpy dtype for a spec dtype; bfloat16 has none, so it maps to float32 and the
    backend casts (numpy cannot hold bfloat16 without extra packages)."""
    value = DType(dtype).value
    return np.dtype("float32" if value == "bfloat16" else value)


@dataclass(frozen=True)
class SampleInfo:
    """What preprocessing produces for one sample, as far as it is known before running."""

    shape: Shape | None
    """Sample shape (no batch dimension); None while still an encoded image."""
    dtype: str | None
    """numpy dtype name, None when unknown."""
    layout: str
    """HWC or CHW: where the channel axis of a 3-D sample is."""


def _show(shape: Sequence[int | None] | None) -> str:
    if shape is None:
        return "an encoded image"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


# ------------------------------------------------------------------------------------ resize


def _pil_resize_uint8(img: np.ndarray, height: int, width: int, interpolation: str) -> np.ndarray:
    from PIL import Image

    resample = {
        "nearest": Image.Resampling.NEAREST,
        "bilinear": Image.Resampling.BILINEAR,
        "bicubic": Image.Resampling.BICUBIC,
    }[interpolation]
    if img.ndim == 3 and img.shape[2] in (3, 4):
        return np.asarray(Image.fromarray(img).resize((width, height), resample))
    planes = img[..., np.newaxis] if img.ndim == 2 else img
    out = np.stack(
        [
            np.asarray(Image.fromarray(planes[..., c]).resize((width, height), resample))
            for c in range(planes.shape[2])
        ],
        axis=-1,
    )
    return out[..., 0] if img.ndim == 2 else out


def _source_coords(out_size: int, in_size: int) -> np.ndarray:
    """Half-pixel-centre source coordinates of each output pixel."""
    return (np.arange(out_size, dtype=np.float64) + 0.5) * (in_size / out_size) - 0.5


def _numpy_resize(img: np.ndarray, height: int, width: int, interpolation: str) -> np.ndarray:
    in_h, in_w = img.shape[:2]
    data = img.astype(np.float64, copy=False)
    if interpolation == "nearest":
        rows = np.minimum(((np.arange(height) + 0.5) * in_h / height).astype(np.intp), in_h - 1)
        cols = np.minimum(((np.arange(width) + 0.5) * in_w / width).astype(np.intp), in_w - 1)
        out = data[rows][:, cols]
    else:
        ys = np.clip(_source_coords(height, in_h), 0, in_h - 1)
        xs = np.clip(_source_coords(width, in_w), 0, in_w - 1)
        y0 = np.floor(ys).astype(np.intp)
        x0 = np.floor(xs).astype(np.intp)
        y1 = np.minimum(y0 + 1, in_h - 1)
        x1 = np.minimum(x0 + 1, in_w - 1)
        wy = (ys - y0).reshape((-1, 1) + (1,) * (img.ndim - 2))
        wx = (xs - x0).reshape((1, -1) + (1,) * (img.ndim - 2))
        top = data[y0][:, x0] * (1 - wx) + data[y0][:, x1] * wx
        bottom = data[y1][:, x0] * (1 - wx) + data[y1][:, x1] * wx
        out = top * (1 - wy) + bottom * wy
    return _cast_like(out, img.dtype)


def _pil_resize_float(img: np.ndarray, height: int, width: int) -> np.ndarray:
    from PIL import Image

    planes = img[..., np.newaxis] if img.ndim == 2 else img
    out = np.stack(
        [
            np.asarray(
                Image.fromarray(np.ascontiguousarray(planes[..., c], dtype=np.float32)).resize(
                    (width, height), Image.Resampling.BICUBIC
                )
            )
            for c in range(planes.shape[2])
        ],
        axis=-1,
    )
    return _cast_like(out[..., 0] if img.ndim == 2 else out, img.dtype)


def _cast_like(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        clipped: np.ndarray = np.clip(np.rint(values), info.min, info.max)
        return clipped.astype(dtype)
    return values.astype(dtype, copy=False)


def resize_hwc(img: np.ndarray, height: int, width: int, interpolation: str) -> np.ndarray:
    """Resize an HWC (or HW) image; see the module docstring for which filter runs when."""
    if img.shape[:2] == (height, width):
        return img
    if img.dtype == np.uint8:
        return _pil_resize_uint8(img, height, width, interpolation)
    if interpolation == "bicubic":
        return _pil_resize_float(img, height, width)
    return _numpy_resize(img, height, width, interpolation)


# ------------------------------------------------------------------------------------ decode

OPENCV_EXTRA_HINT = "pip install 'mlmodelscope[opencv]'"


def import_opencv() -> ModuleType:
    """``cv2`` (from any of OpenCV's wheels; the opencv extra installs the headless one)."""
    import cv2

    module: ModuleType = cv2
    return module


def decode_image(
    sample: bytes | bytearray | str | Path, mode: str = "RGB", library: str = "pillow"
) -> np.ndarray:
    """Decode an image file (a path) or its bytes into an HWC uint8 array, one channel for L.

    Both libraries accept the same files under the same limits: Pillow reads the header
    first either way, so its format check and ``Image.MAX_IMAGE_PIXELS`` (a
    DecompressionBombError above twice it) apply to OpenCV too. ``opencv`` then decodes the
    bytes with ``cv2.imdecode`` ignoring the EXIF orientation (Pillow does not apply it
    either; OpenCV's default would rotate), reorders BGR to RGB, and leaves the conversion
    to L to Pillow's formula: only the decoding differs. Raises :class:`PreprocessError`
    for a file neither can read; ImportError when OpenCV is asked for and missing.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        if library == "opencv":
            if isinstance(sample, bytes | bytearray):
                data = bytes(sample)
            else:
                data = Path(sample).read_bytes()
            with Image.open(io.BytesIO(data)) as img:
                width, height = img.size
            array = _opencv_decode(data, mode, (height, width))
        else:
            source = io.BytesIO(sample) if isinstance(sample, bytes | bytearray) else Path(sample)
            with Image.open(source) as img:
                array = np.asarray(img.convert(mode))
    except (OSError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise PreprocessError(str(exc)) from exc
    return array[..., np.newaxis] if array.ndim == 2 else array


def _opencv_decode(data: bytes, mode: str, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image

    cv2 = import_opencv()
    flags = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
    bgr = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags)
    if bgr is None:
        raise PreprocessError("OpenCV cannot decode it (a truncated or unsupported file)")
    if bgr.shape[:2] != size:
        raise PreprocessError(f"OpenCV decoded {bgr.shape[:2]}, the header says {size}")
    rgb: np.ndarray = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return rgb if mode == "RGB" else np.asarray(Image.fromarray(rgb).convert(mode))


# ----------------------------------------------------------------------------- preprocessing


class Preprocessor:
    """Runs the declared preprocessing steps on one sample at a time."""

    def __init__(
        self,
        steps: Sequence[PreprocessStep],
        *,
        field: str = "spec.preprocessing",
        layout: str = HWC,
    ):
        self.steps = list(steps)
        self.field = field
        self.layout = layout
        """Layout of raw samples (spec.dataset.layout): decoded images are always HWC."""

    def _where(self, index: int, *rest: str) -> str:
        return ".".join([f"{self.field}[{index}]", self.steps[index].op, *rest])

    # ---- running

    def __call__(self, sample: RawSample | str) -> np.ndarray:
        """Preprocess one raw sample into the array the model gets (without a batch axis)."""
        if not isinstance(sample, np.ndarray):
            self._require_decode_first()
        layout, order = self.layout, "RGB"
        x: Any = sample
        for i, step in enumerate(self.steps):
            if step.decode is not None:
                x, layout, order = self._decode(i, x, step.decode.mode), HWC, "RGB"
                continue
            x = np.asarray(x)
            if step.resize is not None:
                r = step.resize
                self._spatial(i, x.shape, layout)
                x = self._in_hwc(
                    x, layout, lambda a, r=r: resize_hwc(a, r.height, r.width, r.interpolation)
                )
            elif step.center_crop is not None:
                c = step.center_crop
                h_axis, w_axis = self._spatial(i, x.shape, layout)
                self._check_crop(i, (x.shape[h_axis], x.shape[w_axis]), c.height, c.width)
                top = (x.shape[h_axis] - c.height) // 2
                left = (x.shape[w_axis] - c.width) // 2
                index: list[slice] = [slice(None)] * x.ndim
                index[h_axis] = slice(top, top + c.height)
                index[w_axis] = slice(left, left + c.width)
                x = x[tuple(index)]
            elif step.to_float is not None:
                x = x.astype(numpy_dtype(step.to_float.dtype), copy=False)
            elif step.scale is not None:
                x = _floating(x)
                x = x * np.asarray(step.scale.factor, dtype=x.dtype)
            elif step.normalize is not None:
                n = step.normalize
                x = _floating(x)
                axis = self._channels(i, x.shape, layout, len(n.mean))
                shape = [1] * x.ndim
                if axis is not None and len(n.mean) > 1:
                    shape[axis] = len(n.mean)
                mean = np.asarray(n.mean, dtype=x.dtype).reshape(shape)
                std = np.asarray(n.std, dtype=x.dtype).reshape(shape)
                x = (x - mean) / std
            elif step.layout is not None:
                x, layout = self._transpose(i, x, layout), step.layout.to
            elif step.channel_order is not None:
                target = step.channel_order.order.value
                axis = self._channels(i, x.shape, layout, 3, need=True)
                if target != order and axis is not None:
                    x = np.flip(x, axis=axis)
                order = target
        return np.ascontiguousarray(x)

    def _require_decode_first(self) -> None:
        if not self.steps or self.steps[0].decode is None:
            raise SpecError(
                self.field,
                "the dataset yields encoded images (imagefolder); start the steps with "
                "`- decode: {mode: RGB}`",
            )

    def _not_encoded(self, index: int) -> SpecError:
        return SpecError(
            self._where(index),
            "the dataset yields decoded arrays, not image files; remove the decode step",
        )

    def _decode(self, index: int, sample: Any, mode: str) -> np.ndarray:
        if isinstance(sample, np.ndarray):
            raise self._not_encoded(index)
        step = self.steps[index].decode
        assert step is not None
        if step.library == "opencv":
            self._require_opencv(index)
        try:
            return decode_image(sample, mode, step.library or "pillow")
        except PreprocessError as exc:
            what = "image bytes" if isinstance(sample, bytes | bytearray) else str(sample)
            raise PreprocessError(f"cannot decode {what}: {exc}") from exc

    def _require_opencv(self, index: int) -> None:
        try:
            import_opencv()
        except ImportError as exc:
            raise SpecError(
                self._where(index, "library"),
                "library opencv needs OpenCV (the cv2 module), which is not installed here: "
                f"{OPENCV_EXTRA_HINT}, or set library: pillow",
            ) from exc

    def check_libraries(self) -> None:
        """Fail before running when a step's library is not installed (a SpecError on the
        step's field that names the extra to install)."""
        for i, step in enumerate(self.steps):
            if step.decode is not None and step.decode.library == "opencv":
                self._require_opencv(i)

    @staticmethod
    def _in_hwc(x: np.ndarray, layout: str, fn: Any) -> np.ndarray:
        if layout == CHW and x.ndim == 3:
            out: np.ndarray = fn(np.moveaxis(x, 0, -1))
            return np.moveaxis(out, -1, 0)
        result: np.ndarray = fn(x)
        return result

    def _transpose(self, index: int, x: np.ndarray, layout: str) -> np.ndarray:
        change = self.steps[index].layout
        assert change is not None
        self._check_layout(index, x.shape, layout)
        if change.from_ == change.to:
            return x
        if x.ndim == 2:  # one implicit channel
            return x[np.newaxis] if change.to == CHW else x[..., np.newaxis]
        return np.transpose(x, (2, 0, 1) if change.to == CHW else (1, 2, 0))

    # ---- checks shared by running and shape inference

    def _spatial(self, index: int, shape: Sequence[int | None], layout: str) -> tuple[int, int]:
        if len(shape) == 2:
            return 0, 1
        if len(shape) == 3:
            return (1, 2) if layout == CHW else (0, 1)
        raise SpecError(
            self._where(index),
            f"needs an image sample (HWC, CHW or HW); this sample has shape {_show(shape)}",
        )

    def _channels(
        self, index: int, shape: Sequence[int | None], layout: str, count: int, need: bool = False
    ) -> int | None:
        """The channel axis, after checking it has ``count`` channels (for normalize one value
        broadcasts to all channels; ``need`` demands exactly ``count``)."""
        if len(shape) != 3:
            if need or count > 1:
                raise SpecError(
                    self._where(index),
                    f"needs a 3-D image sample (HWC or CHW); this sample has shape {_show(shape)}",
                )
            return None
        axis = 0 if layout == CHW else 2
        channels = shape[axis]
        if channels is None or (channels == count if need else count in (1, channels)):
            return axis
        sub = ["mean"] if self.steps[index].normalize is not None else []
        what = "needs" if need else f"has {count} values for"
        raise SpecError(
            self._where(index, *sub),
            f"{what} {count} channels but the sample has {channels} on axis {axis} (layout "
            f"{layout}, shape {_show(shape)})" + ("" if need else "; give one value per channel"),
        )

    def _check_crop(self, index: int, size: tuple[int | None, int | None], h: int, w: int) -> None:
        in_h, in_w = size
        if (in_h is not None and in_h < h) or (in_w is not None and in_w < w):
            raise SpecError(
                self._where(index),
                f"crop {h}x{w} is larger than the image ({_show(size)}); resize it first",
            )

    def _check_layout(self, index: int, shape: Sequence[int | None], layout: str) -> None:
        change = self.steps[index].layout
        assert change is not None
        if change.from_ != layout:
            raise SpecError(
                self._where(index, "from"),
                f"the sample is {layout} at this step, not {change.from_}",
            )
        if len(shape) not in (2, 3):
            raise SpecError(
                self._where(index),
                f"needs an image sample (HWC or CHW); this sample has shape {_show(shape)}",
            )

    # ---- shape inference

    def infer(
        self, input_shape: Sequence[int] | None, input_dtype: str | None = None
    ) -> SampleInfo:
        """Shape, dtype and layout the steps produce from a raw sample of ``input_shape``
        (None for an encoded image), without touching any data."""
        if input_shape is None:
            self._require_decode_first()
        shape: Shape | None = None if input_shape is None else tuple(input_shape)
        dtype, layout = input_dtype, self.layout
        for i, step in enumerate(self.steps):
            if step.decode is not None:
                if shape is not None:
                    raise self._not_encoded(i)
                shape, dtype, layout = (
                    (None, None, 3 if step.decode.mode == "RGB" else 1),
                    "uint8",
                    HWC,
                )
                continue
            assert shape is not None
            if step.resize is not None or step.center_crop is not None:
                size = step.resize or step.center_crop
                assert size is not None
                h_axis, w_axis = self._spatial(i, shape, layout)
                if step.center_crop is not None:
                    self._check_crop(i, (shape[h_axis], shape[w_axis]), size.height, size.width)
                new = list(shape)
                new[h_axis], new[w_axis] = size.height, size.width
                shape = tuple(new)
            elif step.to_float is not None:
                dtype = numpy_dtype(step.to_float.dtype).name
            elif step.scale is not None or step.normalize is not None:
                if step.normalize is not None:
                    self._channels(i, shape, layout, len(step.normalize.mean))
                dtype = _floating_name(dtype)
            elif step.layout is not None:
                self._check_layout(i, shape, layout)
                change = step.layout
                if change.from_ != change.to:
                    if len(shape) == 2:
                        shape = (1, *shape) if change.to == CHW else (*shape, 1)
                    else:
                        order = (2, 0, 1) if change.to == CHW else (1, 2, 0)
                        shape = tuple(shape[a] for a in order)
                layout = change.to
            elif step.channel_order is not None:
                self._channels(i, shape, layout, 3, need=True)
        return SampleInfo(shape=shape, dtype=dtype, layout=layout)

    def output_shape(self, input_shape: Sequence[int] | None) -> Shape | None:
        """The per-sample shape after all steps (see :meth:`infer`)."""
        return self.infer(input_shape).shape

    def check_model_input(
        self,
        tensor: TensorSpec,
        input_shape: Sequence[int] | None,
        input_dtype: str | None = None,
        *,
        field: str = "spec.model.inputs[0]",
    ) -> SampleInfo:
        """Fail before running when the preprocessed samples cannot feed ``tensor``.

        The model's shape is batch first (its first dimension is the batch); -1 and dimensions
        unknown until decoding match anything. Raises :class:`SpecError` on ``<field>.shape``
        or ``<field>.dtype`` with both sides and a hint which step to add, and first on a
        step whose library is not installed (:meth:`check_libraries`).
        """
        self.check_libraries()
        info = self.infer(input_shape, input_dtype)
        assert info.shape is not None
        out, model = info.shape, tuple(tensor.shape[1:])
        fits = len(out) == len(model) and all(
            m == -1 or o is None or m == o for o, m in zip(out, model, strict=True)
        )
        if not fits:
            raise SpecError(
                f"{field}.shape",
                f"shape mismatch between model and preprocessing output: the model takes "
                f"{_show(tensor.shape)} (batch first) but preprocessing produces "
                f"{_show((-1, *out))}; {_shape_hint(out, model, info.layout, tensor)}",
            )
        if info.dtype is not None:
            want = numpy_dtype(tensor.dtype).name
            if info.dtype != want:
                raise SpecError(
                    f"{field}.dtype",
                    f"the model takes {tensor.dtype.value} but preprocessing produces "
                    f"{info.dtype}; add `- toFloat: {{dtype: {tensor.dtype.value}}}` to "
                    f"{self.field}",
                )
        return info


def _floating(x: np.ndarray) -> np.ndarray:
    """Integer images become float32 before arithmetic (float inputs keep their precision)."""
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float32)


def _floating_name(dtype: str | None) -> str | None:
    if dtype is None:
        return None
    return dtype if np.issubdtype(np.dtype(dtype), np.floating) else "float32"


def _shape_hint(out: Shape, model: tuple[int, ...], layout: str, tensor: TensorSpec) -> str:
    """Which preprocessing step most likely closes the gap between the two shapes."""
    if len(out) != len(model):
        return (
            f"the model takes {len(model)}-D samples, preprocessing yields {len(out)}-D ones; "
            "check spec.model.inputs[0].shape (batch first) and the layout step"
        )
    if len(out) != 3:
        return f"reshape the data or fix spec.model.inputs[0].shape to {_show((-1, *out))}"
    declared = {"NCHW": CHW, "CHW": CHW, "NHWC": HWC, "HWC": HWC}
    model_layout = declared.get(tensor.layout.value if tensor.layout else "", "")
    if not model_layout:
        channel_like = (1, 3, 4)
        if model[0] in channel_like and model[2] not in channel_like:
            model_layout = CHW
        elif model[2] in channel_like and model[0] not in channel_like:
            model_layout = HWC
        else:
            model_layout = layout
    if model_layout != layout:
        return f"add `- layout: {{from: {layout}, to: {model_layout}}}` as the last step"
    c_axis = 0 if layout == CHW else 2
    hints = []
    if model[c_axis] != -1 and out[c_axis] is not None and model[c_axis] != out[c_axis]:
        mode = {1: "L", 3: "RGB"}.get(model[c_axis])
        hints.append(
            f"decode with `mode: {mode}` for {model[c_axis]} channel(s)"
            if mode
            else f"the model wants {model[c_axis]} channels, the samples have {out[c_axis]}"
        )
    spatial = [a for a in range(3) if a != c_axis]
    if any(model[a] != -1 and model[a] != out[a] for a in spatial):
        h, w = (model[a] for a in spatial)
        hints.append(
            f"add `- resize: {{height: {h}, width: {w}}}` (or a centerCrop) to get {h}x{w}"
        )
    return "; ".join(hints) or "fix the preprocessing steps or spec.model.inputs[0].shape"


def infer_shape(steps: Sequence[PreprocessStep], input_shape: Sequence[int] | None) -> Shape | None:
    """Per-sample output shape of ``steps`` for a raw sample of ``input_shape``."""
    return Preprocessor(steps).output_shape(input_shape)


def preprocess_all(
    pre: Preprocessor, samples: Samples | Sequence[RawSample] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Preprocess every sample ahead of the measurement (as MLPerf loads samples to memory).

    Returns the (N, ...) batch of all samples and each sample's preprocessing time in
    nanoseconds (``time.perf_counter_ns``); copying into the batch is not counted.
    """
    xs = samples.x if isinstance(samples, Samples) else samples
    count = len(xs)
    if count == 0:
        raise PreprocessError("the dataset holds no samples")
    latencies = np.empty(count, dtype=np.int64)
    batch: np.ndarray | None = None
    for i in range(count):
        start = time.perf_counter_ns()
        out = pre(xs[i])
        latencies[i] = time.perf_counter_ns() - start
        if batch is None:
            batch = np.empty((count, *out.shape), dtype=out.dtype)
        elif out.shape != batch.shape[1:]:
            raise PreprocessError(
                f"sample {i} preprocesses to shape {list(out.shape)} but sample 0 to "
                f"{list(batch.shape[1:])}; add a resize (and centerCrop) step so all match"
            )
        batch[i] = out
    assert batch is not None
    return batch, latencies


# ---------------------------------------------------------------------------- postprocessing


@dataclass(frozen=True)
class Predictions:
    """Per-sample predictions for a batch (or a whole dataset)."""

    scores: np.ndarray | None
    """(N, C) class scores: probabilities after a softmax step, else the raw outputs; None when
    the model itself outputs class indices."""
    topk_indices: np.ndarray
    """(N, k) class indices, best first; equal scores go to the lower index."""
    argmax: np.ndarray
    """(N,) best class index."""
    topk_scores: np.ndarray | None = None
    """(N, k) the scores of ``topk_indices``."""
    class_names: list[str] | None = None
    """Names of class indices, from a labels step."""

    def __len__(self) -> int:
        return len(self.argmax)

    def names(self, indices: np.ndarray) -> list[str]:
        """Class names of ``indices`` (the index itself when no name is known)."""
        names = self.class_names or []
        return [names[i] if 0 <= i < len(names) else str(i) for i in np.ravel(indices).tolist()]


PARTITION_MIN_CLASSES = 64
"""From this many classes on (and k at most a quarter of them), :func:`topk` partitions first
and sorts only the k candidates; below it a full sort of a row is cheaper than the bookkeeping."""


def topk(scores: np.ndarray, k: int) -> np.ndarray:
    """(N, min(k, C)) indices of the best scores, best first, ties to the lower index; NaN
    ranks below every number (as a stable sort of ``-scores`` puts it).

    With many classes (C >= :data:`PARTITION_MIN_CLASSES`, k <= C / 4) it partitions, then
    sorts the k candidates by (score, index); a row whose k-th score is tied with a score
    outside the candidates, or is NaN, falls back to the full stable sort, so the result is
    always exactly that of the full sort.
    """
    keyed = scores if scores.dtype.kind == "f" else scores.astype(np.float64)
    count, classes = keyed.shape
    k = min(k, classes)
    negated = -keyed
    if classes < PARTITION_MIN_CLASSES or 4 * k > classes or k == 0:
        return negated.argsort(axis=1, kind="stable")[:, :k]
    rows = np.arange(count)[:, np.newaxis]
    candidates = negated.argpartition(k - 1, axis=1)[:, :k]
    candidates.sort(axis=1)  # ascending index, so the stable sort below breaks ties by index
    values = negated[rows, candidates]
    order = values.argsort(axis=1, kind="stable")
    best: np.ndarray = candidates[rows, order]
    kth = values[rows, order[:, k - 1 :]]
    # Exactly k scores at least as good as the k-th: no tie straddles the cut, and no NaN.
    ambiguous = np.flatnonzero(np.count_nonzero(negated <= kth, axis=1) != k)
    if ambiguous.size:
        best[ambiguous] = negated[ambiguous].argsort(axis=1, kind="stable")[:, :k]
    return best


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax, computed in the result's dtype: float64 stays float64,
    anything else becomes float32 (a float32 softmax differs from a float64 one rounded to
    float32 by a few units in the last place)."""
    dtype = np.float64 if x.dtype == np.float64 else np.float32
    e: np.ndarray = x.astype(dtype)  # a copy: the model's output is never changed
    e -= e.max(axis=axis, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e


class Postprocessor:
    """Turns the first model output of a batch into :class:`Predictions`.

    Without declared steps it reports argmax and top-5 of the raw outputs. Steps apply in the
    declared order; top-k/argmax always come from the final scores, and k defaults to 5.
    :meth:`timed` is what a timed query runs: the same scores and top-k, nothing else.
    """

    def __init__(
        self,
        steps: Sequence[PostprocessStep],
        *,
        base_dir: Path | None = None,
        field: str = "spec.postprocessing",
    ) -> None:
        self.steps = list(steps)
        self.field = field
        self.k = DEFAULT_TOPK
        self.class_names: list[str] | None = None
        self._softmaxes = 0
        self._axes: list[tuple[int, int]] = []
        """(step index, declared axis) of the steps that name a class axis."""
        for i, step in enumerate(self.steps):
            if step.topk is not None:
                self.k = step.topk.k
            elif step.labels is not None:
                self.class_names = _load_labels(step, base_dir, f"{field}[{i}].labels")
            elif step.softmax is not None:
                self._softmaxes += 1
                self._axes.append((i, step.softmax.axis))
            elif step.argmax is not None:
                self._axes.append((i, step.argmax.axis))

    def _check_axes(self, ndim: int) -> None:
        for index, axis in self._axes:
            if axis != -1 and axis != ndim - 1:
                step = self.steps[index]
                raise SpecError(
                    f"{self.field}[{index}].{step.op}.axis",
                    f"only the class axis (the last, -1) is supported; the output has {ndim} axes",
                )

    def _scores(self, raw: np.ndarray) -> np.ndarray:
        """The final (N, C) scores of a real-valued (or 2-D and up) first output."""
        self._check_axes(raw.ndim)
        scores = raw
        for _ in range(self._softmaxes):
            scores = softmax(scores, axis=-1)
        return scores.reshape(len(scores), -1)

    def timed(self, outputs: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """The work a measured query does: the scores and their top-k indices, as
        :meth:`__call__` computes them, without assembling :class:`Predictions` (which only
        the accuracy pass reads). Returns the (N, k) indices."""
        first: Any = outputs if isinstance(outputs, np.ndarray) else outputs[0]
        raw: np.ndarray = first if type(first) is np.ndarray else np.asarray(first)
        if raw.ndim == 1 and raw.dtype.kind in "iu":
            return raw[:, np.newaxis]
        if raw.ndim == 0:
            raise PreprocessError("the model output is a scalar; expected (batch, classes)")
        return topk(self._scores(raw), self.k)

    def __call__(self, outputs: np.ndarray | Sequence[np.ndarray]) -> Predictions:
        """Post-process a batch; ``outputs`` is the first model output or the list of all."""
        raw = np.asarray(outputs if isinstance(outputs, np.ndarray) else outputs[0])
        if raw.ndim == 0:
            raise PreprocessError("the model output is a scalar; expected (batch, classes)")
        if raw.ndim == 1 and np.issubdtype(raw.dtype, np.integer):
            indices = raw.astype(np.int64)
            return Predictions(
                scores=None,
                topk_indices=indices[:, np.newaxis],
                argmax=indices,
                class_names=self.class_names,
            )
        scores = self._scores(raw)
        best = topk(scores, self.k)
        return Predictions(
            scores=scores,
            topk_indices=best,
            argmax=best[:, 0].copy(),
            topk_scores=np.take_along_axis(scores, best, axis=1),
            class_names=self.class_names,
        )


def _load_labels(step: PostprocessStep, base_dir: Path | None, field: str) -> list[str]:
    labels = step.labels
    assert labels is not None
    if labels.names:
        return list(labels.names)
    if labels.uri is None:
        raise SpecError(field, "set names or uri")
    from mlmodelscope.agent.sources import fetch_uri

    fetched = fetch_uri(labels.uri, base_dir=base_dir, kind="labels", uri_field=f"{field}.uri")
    lines = fetched.path.read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.strip() for line in lines]


def accuracy(predictions: Predictions, labels: np.ndarray) -> tuple[float, float]:
    """(top-1, top-5) accuracy as fractions; top-5 uses min(5, classes) best scores.

    Computed from the scores, so a ``topk`` step with k < 5 does not change top-5 accuracy.
    """
    y = np.asarray(labels).reshape(-1)
    if len(y) != len(predictions):
        raise ValueError(f"{len(predictions)} predictions but {len(y)} labels")
    if len(y) == 0:
        raise ValueError("no predictions to score")
    top1 = float(np.mean(predictions.argmax == y))
    if predictions.scores is None:
        return top1, top1
    best = topk(predictions.scores, 5)
    top5 = float(np.mean(np.any(best == y[:, np.newaxis], axis=1)))
    return top1, top5
