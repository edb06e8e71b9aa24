"""What a try answers, per framework, by the Model's task: the top classes (of an image or a
text), the boxes, the class map as a PNG with each class's pixel count, or the output image as
a PNG (``POST /api/v1/try`` and the Try page).

A class map's PNG holds each pixel's class id as its pixel value: a palette PNG (the palette
is :func:`class_colour`'s, so it shows as colours) up to 256 classes, 16-bit grey above. An
output image's PNG is its 8-bit RGB or grey pixels; frameworks agree on it when each one's is
within :data:`AGREE_PSNR_DB` of the first's (:func:`compare_images`), as float outputs of one
network in two frameworks differ in their last bits.
"""

from __future__ import annotations

import base64
import io
import math
from typing import TYPE_CHECKING, Final

import numpy as np
from pydantic import BaseModel

if TYPE_CHECKING:
    from mlmodelscope.agent.trial_answers import ClassMap, OutputImage

PALETTE: Final = (
    (0, 0, 0),
    (230, 25, 75),
    (60, 180, 75),
    (255, 225, 25),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (250, 190, 212),
    (0, 128, 128),
    (220, 190, 255),
    (170, 110, 40),
    (255, 250, 200),
    (128, 0, 0),
    (170, 255, 195),
    (128, 128, 0),
    (255, 215, 180),
    (0, 0, 128),
)
"""Class 0 (background, by convention) black, then twenty distinct colours, repeated."""
AGREE_PSNR_DB: Final = 40.0
"""Two frameworks' output images agree from this PSNR (dB, of their 8-bit pixels) up."""


def class_colour(index: int) -> tuple[int, int, int]:
    """The colour class ``index`` is drawn in (boxes, the class map, its legend)."""
    if index <= 0:
        return PALETTE[0]
    return PALETTE[1 + (index - 1) % (len(PALETTE) - 1)]


def colour_hex(index: int) -> str:
    red, green, blue = class_colour(index)
    return f"#{red:02x}{green:02x}{blue:02x}"


def class_map_png(found: ClassMap) -> bytes:
    """The class map as PNG bytes whose pixel values are the class ids."""
    from PIL import Image

    if found.num_classes <= 256:
        picture = Image.fromarray(found.classes.astype("uint8"))  # mode L, then P
        picture.putpalette([c for i in range(256) for c in class_colour(i)])
    else:
        picture = Image.fromarray(found.classes.astype("<u2"))  # mode I;16
    buffer = io.BytesIO()
    picture.save(buffer, "PNG")
    return buffer.getvalue()


def output_png(found: OutputImage) -> bytes:
    """The output image as an 8-bit PNG: RGB, or grey for one channel."""
    from PIL import Image

    pixels = found.pixels
    picture = Image.fromarray(pixels[..., 0] if pixels.shape[2] == 1 else pixels)
    buffer = io.BytesIO()
    picture.save(buffer, "PNG")
    return buffer.getvalue()


def png_pixels(png: str) -> np.ndarray:
    """A base64 PNG's pixels, [H, W] or [H, W, C]."""
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(png))) as picture:
        return np.asarray(picture)


class TopClass(BaseModel):
    """One of the best classes, best first."""

    index: int
    label: str
    """The class's name from the Model's labels, else its index."""
    score: float | None
    """A probability when ``probabilities``, else the model's raw output; None when the
    model outputs class indices."""


class Box(BaseModel):
    """One detection above the score threshold, best first."""

    index: int
    """The class id as the model numbers it."""
    label: str
    """The class's name from the Model's labels, else its id."""
    score: float
    box: tuple[float, float, float, float]
    """x0, y0, x1, y1 in the uploaded image's pixels."""


class ClassPixels(BaseModel):
    """A class present in the class map, and how many of the image's pixels it holds."""

    index: int
    label: str
    pixels: int
    colour: str
    """How the PNG's palette shows it (#rrggbb)."""


class ClassMapAnswer(BaseModel):
    """Segmentation: the class of each of the uploaded image's pixels."""

    width: int
    height: int
    num_classes: int
    png: str
    """Base64 of a PNG of width x height whose pixel values are the class ids (a palette
    PNG up to 256 classes, 16-bit grey above)."""
    classes: list[ClassPixels]
    """The classes present, by class id."""

    @classmethod
    def of(cls, found: ClassMap) -> ClassMapAnswer:
        height, width = found.classes.shape
        return cls(
            width=width,
            height=height,
            num_classes=found.num_classes,
            png=base64.b64encode(class_map_png(found)).decode(),
            classes=[
                ClassPixels(
                    index=c.index, label=c.label, pixels=c.pixels, colour=colour_hex(c.index)
                )
                for c in found.pixels
            ],
        )


class ImageDifference(BaseModel):
    """How an output image differs from the first framework's that ran, pixel by pixel on
    their 8-bit values."""

    framework: str
    """The framework compared with."""
    same_size: bool
    """Whether both have the same width, height and channels: nothing else is compared when
    not."""
    max_difference: int | None
    """The largest difference of one pixel's channel (0..255)."""
    psnr_db: float | None
    """PSNR in dB against the other image; None when they are identical (infinite)."""

    @property
    def close(self) -> bool:
        """Identical, or at least :data:`AGREE_PSNR_DB` apart."""
        return self.same_size and (self.psnr_db is None or self.psnr_db >= AGREE_PSNR_DB)

    @classmethod
    def between(cls, framework: str, first: np.ndarray, other: np.ndarray) -> ImageDifference:
        if first.shape != other.shape:
            return cls(framework=framework, same_size=False, max_difference=None, psnr_db=None)
        diff = first.astype(np.float64) - other.astype(np.float64)
        mse = float(np.mean(diff**2)) if diff.size else 0.0
        psnr = None if mse == 0 else 10 * math.log10(255.0**2 / mse)
        largest = int(np.abs(diff).max()) if diff.size else 0
        return cls(framework=framework, same_size=True, max_difference=largest, psnr_db=psnr)


class OutputImageAnswer(BaseModel):
    """image-to-image: the model's output image."""

    width: int
    height: int
    channels: int
    """3 (RGB) or 1 (grey)."""
    png: str
    """Base64 of an 8-bit PNG of width x height: the output's 0..dataRange as 0..255."""
    difference: ImageDifference | None = None
    """Against the first framework that ran; None for that one."""

    @classmethod
    def of(cls, found: OutputImage) -> OutputImageAnswer:
        height, width, channels = found.pixels.shape
        png = base64.b64encode(output_png(found)).decode()
        return cls(width=width, height=height, channels=channels, png=png)


class FrameworkTry(BaseModel):
    """The upload through the Model in one framework, or why that failed."""

    framework: str
    evaluation: str
    """The evaluation a launch of this Model in this framework would be."""
    ok: bool
    top: list[TopClass]
    """classification, text-classification: the k best classes; empty for the other
    tasks."""
    probabilities: bool
    boxes: list[Box] = []
    """detection: the boxes above the score threshold."""
    class_map: ClassMapAnswer | None = None
    """segmentation: the class map."""
    output_image: OutputImageAnswer | None = None
    """image-to-image: the output image."""
    tokens: int | None = None
    """text-classification: the tokens the model read (special tokens included), at most
    the dataset's maxLength."""
    truncated: bool = False
    """text-classification: the text had more tokens than maxLength and was cut."""
    latency_ms: float | None
    """``predict`` of this one upload (batch 1), monotonic clock; loading excluded."""
    preprocess_ms: float | None
    postprocess_ms: float | None
    load_ms: float | None
    """Fetching and loading the model (framework import included) when this try loaded it;
    None when it was already loaded."""
    warmup_ms: float | None
    """The untimed first inference of a model this try loaded."""
    framework_version: str | None
    device: str | None
    error: str | None
    error_field: str | None
    """The spec field the error is about, when it is one."""

    def answer_key(self) -> tuple[object, ...]:
        """What frameworks agree on: the classes in order (classification, detection), or
        the same class for every pixel (segmentation); output images are compared by
        :func:`compare_images`."""
        if self.class_map is not None:
            return (self.class_map.png,)
        if self.boxes:
            return tuple(b.index for b in self.boxes)
        return tuple(c.index for c in self.top)


class ImageInfo(BaseModel):
    format: str
    width: int
    height: int
    bytes: int


class TextInfo(BaseModel):
    characters: int
    bytes: int
    """UTF-8."""


class TryAnswer(BaseModel):
    """Each framework's answer for the upload, side by side."""

    model: str
    task: str = "classification"
    """What the answers are: classification or text-classification (top classes),
    detection (boxes), segmentation (a class map) or image-to-image (an output image), from
    the Model's task label."""
    k: int
    image: ImageInfo | None
    """The uploaded image; None for a text."""
    text: TextInfo | None = None
    """The text tried on a text Model."""
    results: list[FrameworkTry]
    """In the order the frameworks were given."""
    agree: bool
    """Whether every framework that ran gave the same answer: the same classes in the same
    order (classification: the top k; detection: the boxes' classes), the same class map,
    or output images within :data:`AGREE_PSNR_DB` of the first's."""
    kept: bool = False
    """Whether the server kept the upload: never."""


def compare_images(results: list[FrameworkTry]) -> list[FrameworkTry]:
    """``results`` with each output image but the first's compared with the first's."""
    ran = [r for r in results if r.ok and r.output_image is not None]
    if len(ran) < 2:
        return results
    first = ran[0]
    assert first.output_image is not None
    pixels = png_pixels(first.output_image.png)
    compared = []
    for result in results:
        shown = result.output_image
        if result is first or not result.ok or shown is None:
            compared.append(result)
            continue
        difference = ImageDifference.between(first.framework, pixels, png_pixels(shown.png))
        image = shown.model_copy(update={"difference": difference})
        compared.append(result.model_copy(update={"output_image": image}))
    return compared


def agree(results: list[FrameworkTry]) -> bool:
    """Whether at least one framework ran and all that ran answered alike (output images:
    each within :data:`AGREE_PSNR_DB` of the first's, as :func:`compare_images` found)."""
    ran = [r for r in results if r.ok]
    images = [r.output_image for r in ran if r.output_image is not None]
    if images:
        return len(images) == len(ran) and all(
            i.difference is None or i.difference.close for i in images
        )
    return len({r.answer_key() for r in ran}) == 1
