"""One uploaded image or text through one evaluation's model, as the evaluation itself would
run it.

`mlms serve`'s Try page and ``POST /api/v1/try`` use it. The model is fetched and loaded by
the framework's backend, the upload goes through the spec's own preprocessing
(:class:`~mlmodelscope.agent.processing.Preprocessor`; a text through the text dataset's
tokenizer, :mod:`.tasks.tokens`, into the inputs :func:`~.tasks.feeds.model_feeds` makes) and
postprocessing (:class:`~mlmodelscope.agent.processing.Postprocessor`), and only
``backend.predict`` of the one sample is timed (``time.perf_counter_ns``), as a measured query
is.

An upload becomes the raw sample the evaluation's dataset yields: the encoded bytes when the
preprocessing starts with ``decode``, the digits dataset's 8x8 grey array
(:func:`~mlmodelscope.agent.digits.digits_image`) for a digits Model, the text itself for a
text dataset. The outputs answer by the spec's task (:mod:`.trial_answers`): the top classes,
the boxes, the class map or the output image.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import numpy as np

from mlmodelscope.agent.backends import Backend, BackendInfo, create_backend
from mlmodelscope.agent.datasets import RawSample
from mlmodelscope.agent.processing import Postprocessor, Preprocessor
from mlmodelscope.agent.tasks.feeds import model_feeds
from mlmodelscope.agent.tasks.passes import detection_outputs, image_size
from mlmodelscope.agent.tasks.tokens import dataset_tokenizer, tokenize
from mlmodelscope.agent.trial_answers import (
    ClassMap,
    ClassScore,
    FoundBox,
    OutputImage,
    class_map_of,
    found_boxes,
    output_image_of,
    text_top_classes,
    top_classes,
)
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import DatasetType, EvaluationSpec, TaskType

TRIAL_TASKS: Final = (
    TaskType.CLASSIFICATION,
    TaskType.DETECTION,
    TaskType.SEGMENTATION,
    TaskType.TEXT_CLASSIFICATION,
    TaskType.IMAGE_TO_IMAGE,
)
"""The tasks an upload can be tried on: those that read one image (or text) and answer it."""


class UploadKind(StrEnum):
    """What an uploaded image becomes before the spec's preprocessing."""

    ENCODED = "encoded"
    """The file's bytes: the preprocessing decodes them (its first step is ``decode``)."""
    DIGITS = "digits"
    """A sample of the digits dataset, (8, 8, 1) float32 0..16."""
    TEXT = "text"
    """A text: the text dataset's tokenizer makes the model's inputs of it."""


def trial_task(spec: EvaluationSpec) -> TaskType:
    """``spec``'s task, when an upload can be tried on it (:data:`TRIAL_TASKS`); a
    :class:`SpecError` otherwise, or for detection outputs the spec cannot read."""
    task = spec.task.type
    if task not in TRIAL_TASKS:
        tried = ", ".join(t.value for t in TRIAL_TASKS)
        raise SpecError(
            "spec.task.type", f"an upload can be tried on {tried}; this Model's task is {task}"
        )
    if task == TaskType.DETECTION:
        detection_outputs(spec)
    return task


def upload_kind(spec: EvaluationSpec) -> UploadKind:
    """How an upload reaches ``spec``'s model; :class:`SpecError` for a spec that takes none
    (a task :func:`trial_task` refuses, or samples that are neither images, digits nor
    texts)."""
    trial_task(spec)
    if spec.dataset.type == DatasetType.TEXT:
        return UploadKind.TEXT
    if spec.preprocessing and spec.preprocessing[0].decode is not None:
        return UploadKind.ENCODED
    if spec.dataset.type == DatasetType.DIGITS and spec.task.type == TaskType.CLASSIFICATION:
        return UploadKind.DIGITS
    raise SpecError(
        "spec.preprocessing",
        "this Model takes arrays, not images: its preprocessing does not start with decode "
        "and its dataset is not digits",
    )


def text_inputs(spec: EvaluationSpec) -> Any:
    """The tokenizer of ``spec``'s text dataset, its inputs checked against the model's (an
    empty text's tokens through :func:`model_feeds`); a :class:`SpecError` on the field to
    fix."""
    tokenizer = dataset_tokenizer(spec.dataset, None)
    model_feeds(spec.model.inputs, tokenize(tokenizer, [""], spec.dataset.max_length).fields)
    return tokenizer


def raw_sample(kind: UploadKind, image: bytes) -> RawSample:
    """The upload as the dataset of ``kind`` would yield it."""
    if kind == UploadKind.DIGITS:
        from mlmodelscope.agent.digits import digits_image

        return digits_image(image)
    return image


def picture_size(kind: UploadKind, image: bytes) -> tuple[int, int]:
    """The upload's (height, width): the file's pixels (Pillow reads the header only), or
    the digits sample's 8x8."""
    if kind == UploadKind.DIGITS:
        return 8, 8
    from PIL import Image

    with Image.open(io.BytesIO(image)) as picture:
        return picture.height, picture.width


@dataclass(frozen=True)
class Tokens:
    """What the tokenizer made of a text."""

    count: int
    """The tokens the model reads (special tokens included; padding not)."""
    truncated: bool
    """Whether the text had more tokens than ``dataset.maxLength`` and was cut."""


@dataclass(frozen=True)
class TrialResult:
    """What one upload through the model gave, by its task, and how long each stage took."""

    task: TaskType
    top: tuple[ClassScore, ...]
    """classification, text-classification: the best classes, best first; empty for the
    other tasks."""
    probabilities: bool
    """Whether the scores are softmax probabilities."""
    boxes: tuple[FoundBox, ...]
    """detection: the boxes above the score threshold, best first."""
    class_map: ClassMap | None
    """segmentation: the class of each pixel."""
    image: OutputImage | None
    """image-to-image: the output image."""
    tokens: Tokens | None
    """text-classification: the text's tokens."""
    latency_ns: int
    """``backend.predict`` of the one sample: the inference alone."""
    preprocess_ns: int
    postprocess_ns: int
    warmup_ns: int | None
    """The untimed first inference of a freshly loaded model (None once it has run one)."""


class TrialModel:
    """A spec's model, loaded, ready to answer one upload at a time (not thread-safe:
    callers run one trial at a time)."""

    def __init__(
        self,
        spec: EvaluationSpec,
        kind: UploadKind,
        backend: Backend,
        load_ns: int,
        tokenizer: Any = None,
    ) -> None:
        self.spec = spec
        self.kind = kind
        self.backend = backend
        self.tokenizer = tokenizer
        """text: the dataset's tokenizer."""
        self.load_ns = load_ns
        """Fetching and loading the model, importing the framework included."""
        self.info: BackendInfo = backend.info()
        self.pre = Preprocessor(spec.preprocessing, layout=spec.dataset.layout)
        self.post = Postprocessor(spec.postprocessing)
        self._warm = False

    @classmethod
    def load(cls, spec: EvaluationSpec, *, cache_dir: Path | None = None) -> TrialModel:
        """Check the spec takes an upload, then fetch and load its model. Raises
        :class:`SpecError` for what the spec must change,
        :class:`~mlmodelscope.agent.backends.MissingExtraError` for a framework not
        installed, :class:`~mlmodelscope.agent.backends.ModelLoadError` for a model that
        does not load."""
        from mlmodelscope.agent.digits import DIGITS_SHAPE
        from mlmodelscope.agent.sources import fetch_model

        kind = upload_kind(spec)  # checks the task too
        tokenizer = None
        if kind == UploadKind.TEXT:
            tokenizer = text_inputs(spec)
        else:
            pre = Preprocessor(spec.preprocessing, layout=spec.dataset.layout)
            raw_shape = DIGITS_SHAPE if kind == UploadKind.DIGITS else None
            dtype = "float32" if raw_shape else None
            pre.check_model_input(spec.model.inputs[0], raw_shape, dtype)
        start = time.perf_counter_ns()
        fetched = fetch_model(spec.model, cache_dir=cache_dir)
        backend = create_backend(spec.framework.name)
        try:
            backend.import_framework()
            backend.load(fetched.path, spec)
        except BaseException:
            backend.close()
            raise
        return cls(spec, kind, backend, time.perf_counter_ns() - start, tokenizer)

    def _inputs(self, upload: bytes | str) -> tuple[list[np.ndarray], Tokens | None]:
        """The model's inputs of one upload (a batch of 1): a text (``str``) through the
        tokenizer, an image (``bytes``) through the preprocessing."""
        if self.kind == UploadKind.TEXT:
            if not isinstance(upload, str):
                raise TypeError("this Model takes a text, not an image")
            tokens = tokenize(self.tokenizer, [upload], self.spec.dataset.max_length)
            count = int(tokens.fields["attention_mask"][0].sum())
            feeds = model_feeds(self.spec.model.inputs, tokens.fields)
            return feeds, Tokens(count, tokens.truncated > 0)
        if not isinstance(upload, bytes):
            raise TypeError("this Model takes an image, not a text")
        sample = self.pre(raw_sample(self.kind, upload))
        return [sample[np.newaxis]], None

    def run(self, upload: bytes | str, k: int) -> TrialResult:
        """Answer ``upload`` (an image's bytes, or a text for a text Model) by the spec's
        task: its ``k`` best classes, best first (ties to the lower index), its boxes, its
        class map or its output image. A freshly loaded model first runs the sample once
        untimed (``warmup_ns``), so the timed inference is not the framework's first."""
        start = time.perf_counter_ns()
        batch, tokens = self._inputs(upload)
        preprocess_ns = time.perf_counter_ns() - start
        warmup_ns = None
        with self.backend.measuring():
            if not self._warm:
                start = time.perf_counter_ns()
                self.backend.predict(batch)
                warmup_ns = time.perf_counter_ns() - start
                self._warm = True
            start = time.perf_counter_ns()
            outputs = self.backend.predict(batch)
            latency_ns = time.perf_counter_ns() - start
        start = time.perf_counter_ns()
        task = self.spec.task.type
        names = self.post.class_names
        top: tuple[ClassScore, ...] = ()
        boxes: tuple[FoundBox, ...] = ()
        classes = None
        image = None
        if task == TaskType.DETECTION:
            assert isinstance(upload, bytes)
            size = picture_size(self.kind, upload)
            boxes = tuple(found_boxes(self.spec, outputs, names, image_size(batch[0]), size))
        elif task == TaskType.SEGMENTATION:
            assert isinstance(upload, bytes)
            classes = class_map_of(self.spec, outputs, names, picture_size(self.kind, upload))
        elif task == TaskType.IMAGE_TO_IMAGE:
            image = output_image_of(self.spec, outputs)
        elif task == TaskType.TEXT_CLASSIFICATION:
            top = tuple(text_top_classes(self.spec, self.post, outputs, k))
        else:
            top = tuple(top_classes(self.post, outputs, k))
        postprocess_ns = time.perf_counter_ns() - start
        return TrialResult(
            task=task,
            top=top,
            probabilities=any(c.score is not None for c in top)
            and any(step.softmax is not None for step in self.spec.postprocessing),
            boxes=boxes,
            class_map=classes,
            image=image,
            tokens=tokens,
            latency_ns=latency_ns,
            preprocess_ns=preprocess_ns,
            postprocess_ns=postprocess_ns,
            warmup_ns=warmup_ns,
        )

    def close(self) -> None:
        self.backend.close()
