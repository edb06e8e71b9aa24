"""What a try answers, per framework, by the Model's task: the top classes, the boxes, or the
class map as a PNG with each class's pixel count (``POST /api/v1/try`` and the Try page).

A class map's PNG holds each pixel's class id as its pixel value: a palette PNG (the palette
is :func:`class_colour`'s, so it shows as colours) up to 256 classes, 16-bit grey above.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Final

from pydantic import BaseModel

if TYPE_CHECKING:
    from mlmodelscope.agent.trial_answers import ClassMap

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


class FrameworkTry(BaseModel):
    """The image through the Model in one framework, or why that failed."""

    framework: str
    evaluation: str
    """The evaluation a launch of this Model in this framework would be."""
    ok: bool
    top: list[TopClass]
    """classification: the k best classes; empty for the other tasks."""
    probabilities: bool
    boxes: list[Box] = []
    """detection: the boxes above the score threshold."""
    class_map: ClassMapAnswer | None = None
    """segmentation: the class map."""
    latency_ms: float | None
    """``predict`` of this one image (batch 1), monotonic clock; loading excluded."""
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
        the same class for every pixel (segmentation)."""
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


class TryAnswer(BaseModel):
    """Each framework's answer for the uploaded image, side by side."""

    model: str
    task: str = "classification"
    """What the answers are: classification (top classes), detection (boxes) or
    segmentation (a class map), from the Model's task label."""
    k: int
    image: ImageInfo
    results: list[FrameworkTry]
    """In the order the frameworks were given."""
    agree: bool
    """Whether every framework that ran gave the same answer: the same classes in the same
    order (classification: the top k; detection: the boxes' classes), or the same class map."""
    kept: bool = False
    """Whether the server kept the upload: never."""


def agree(results: list[FrameworkTry]) -> bool:
    """Whether at least one framework ran and all that ran answered alike."""
    keys = {r.answer_key() for r in results if r.ok}
    return len(keys) == 1
