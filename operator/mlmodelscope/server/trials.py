"""Trying an image or a text on a catalog Model: what an upload must pass, the rate limit, and
the models kept loaded between tries (``app.state.trials``).

An upload is held in memory only, never written by this module and never kept: it is checked
(:func:`check_image`: size, then Pillow reads the header and verifies the file, with the pixel
count bounded before any pixel is decoded; :func:`check_text`: not empty, at most
:data:`MAX_TEXT_CHARS`), matched to what the Model takes (a text Model a text, any other an
image: :func:`accepted`), then run through each framework's model by
:class:`mlmodelscope.agent.trial.TrialModel`, the spec being the one a launch of that Model
would run (:func:`~mlmodelscope.server.launches.build_documents`) with the task its label
names (:mod:`.try_tasks`); the answers are :mod:`.try_answers`. Tries run one at a time on
one thread of their own, so one's latency never includes another's inference and a framework's
per-thread state, warmed up once, stays warm; a refused request is a :class:`TryError` naming
the form field at fault.
"""

from __future__ import annotations

import hashlib
import io
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from mlmodelscope.contract.redact import redact_text
from mlmodelscope.server.launches import (
    DATASETS_BY_NAME,
    InvalidLaunchError,
    LaunchForm,
    build_documents,
)
from mlmodelscope.server.try_answers import (
    Box,
    ClassMapAnswer,
    FrameworkTry,
    ImageInfo,
    OutputImageAnswer,
    TextInfo,
    TopClass,
    TryAnswer,
    agree,
    compare_images,
)
from mlmodelscope.server.try_tasks import TaskRefusedError, TryOptions, try_task
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import EvaluationSpec, TaskType
from mlmodelscope.spec.manifest import UnresolvedModelError, resolve_model
from mlmodelscope.spec.resources import FileModels

if TYPE_CHECKING:
    from mlmodelscope.agent.trial import TrialModel

Framework = Literal["onnxruntime", "pytorch", "tensorflow"]
"""The frameworks a try may name (:data:`~mlmodelscope.server.launches.FRAMEWORKS`)."""
FORMATS: Final = ("PNG", "JPEG", "BMP", "GIF", "WEBP")
"""Image formats Pillow may open for an upload; no other decoder is tried."""
MEDIA_TYPES: Final = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "BMP": "image/bmp",
    "GIF": "image/gif",
    "WEBP": "image/webp",
}
MAX_K: Final = 10
MAX_TEXT_CHARS: Final = 10_000
"""The longest text a try takes (characters): a tokenizer cuts it to maxLength tokens anyway."""
FORM_OVERHEAD: Final = 64 * 1024
"""Bytes a request body may hold beyond the image: the other fields (a text's 4 UTF-8 bytes
a character at most) and the part headers."""


class TryError(Exception):
    """A try refused: HTTP ``status`` and, per form field, what is wrong (field "" for the
    request as a whole)."""

    def __init__(
        self,
        status: int,
        problems: Sequence[tuple[str, str]],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.problems = list(problems)
        self.headers = headers or {}
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in self.problems))


def body_bound(max_bytes: int) -> int:
    """The largest request body a try may send (the image and the rest of the form)."""
    return max_bytes + FORM_OVERHEAD


def check_length(content_length: str | None, max_bytes: int) -> None:
    """Refuse a body too large before it is read: 411 without a Content-Length (the bound
    is checked on it), 413 above :func:`body_bound`."""
    if content_length is None or not content_length.isdigit():
        raise TryError(411, [("", "send the upload with a Content-Length header")])
    if int(content_length) > body_bound(max_bytes):
        raise TryError(413, [("file", _too_large(max_bytes))])


def _too_large(max_bytes: int) -> str:
    return f"the image is larger than this server takes: at most {max_bytes} bytes"


@dataclass(frozen=True)
class ImageFacts:
    """What the upload turned out to be."""

    format: str
    width: int
    height: int
    bytes: int

    @property
    def media_type(self) -> str:
        return MEDIA_TYPES[self.format]


@dataclass(frozen=True)
class Upload:
    """What a try was given: the form's file (None when no file was chosen) and text (None
    when empty or not given)."""

    image: bytes | None = None
    text: str | None = None

    @classmethod
    def of(cls, image: bytes | None, text: str | None) -> Upload:
        """The form's file and text; a blank text counts as none."""
        return cls(image, text if text and text.strip() else None)


def check_text(text: str) -> str:
    """The text to try, or a :class:`TryError` (422) on field ``text``: blank, or longer
    than :data:`MAX_TEXT_CHARS`."""
    if not text.strip():
        raise TryError(422, [("text", "the text is empty: type the text to classify")])
    if len(text) > MAX_TEXT_CHARS:
        raise TryError(
            422,
            [("text", f"the text is {len(text)} characters; a try takes at most "
                      f"{MAX_TEXT_CHARS}: shorten it")],
        )  # fmt: skip
    return text


def accepted(takes_text: bool, model: str, upload: Upload) -> bytes | str:
    """The upload the Model takes (a text Model a text, any other an image), or a
    :class:`TryError` (422) naming the field given that it does not take, or the one missing."""
    if takes_text:
        if upload.image is not None:
            raise TryError(
                422, [("file", f"{model} is a text Model and takes no image: give it a text")]
            )
        if upload.text is None:
            raise TryError(
                422, [("text", f"the text is empty: {model} is a text Model, type a text")]
            )
        return check_text(upload.text)
    if upload.text is not None:
        raise TryError(
            422, [("text", f"{model} takes an image, not a text: upload an image file instead")]
        )
    if upload.image is None:
        raise TryError(422, [("file", f"{model} takes an image: upload an image file")])
    return upload.image


def check_image(data: bytes, *, max_bytes: int, max_pixels: int) -> ImageFacts:
    """The upload as an image of :data:`FORMATS`, or a :class:`TryError` on field ``file``:
    413 above ``max_bytes`` or ``max_pixels``, 415 for what Pillow cannot read or verify
    (not an image, another format, truncated or corrupt)."""
    from PIL import Image

    if not data:
        raise TryError(422, [("file", "the file is empty")])
    if len(data) > max_bytes:
        raise TryError(413, [("file", _too_large(max_bytes))])
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as img:
            width, height, kind = img.width, img.height, img.format
            if width * height > max_pixels:
                raise TryError(
                    413,
                    [
                        (
                            "file",
                            f"the image is {width}x{height} pixels; this server decodes at "
                            f"most {max_pixels} pixels",
                        )
                    ],
                )
            img.verify()
        with Image.open(io.BytesIO(data), formats=FORMATS) as img:
            img.load()  # verify() leaves truncated pixel data to decoding
    except TryError:
        raise
    except Exception as exc:  # whatever a decoder raises on untrusted bytes: not an image
        raise TryError(
            415, [("file", f"not an image this server reads ({', '.join(FORMATS)}): {exc}")]
        ) from None
    assert kind in MEDIA_TYPES
    return ImageFacts(format=kind, width=width, height=height, bytes=len(data))


@dataclass
class RateLimiter:
    """A token bucket per client: ``per_minute`` tries at once, then one every 60/N s."""

    per_minute: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    """client -> (tokens left, when counted)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    MAX_CLIENTS: Final = 10_000
    """Past this many buckets, the full ones (clients idle for a minute) are forgotten."""

    def take(self, client: str) -> float | None:
        """Spend one of ``client``'s tokens: None when it had one, else the seconds until it
        has one again."""
        if self.per_minute <= 0:
            return math.inf
        rate = self.per_minute / 60.0
        with self._lock:
            now = self.clock()
            tokens, then = self._buckets.get(client, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - then) * rate)
            if tokens < 1:
                self._buckets[client] = (tokens, now)
                return (1 - tokens) / rate
            self._buckets[client] = (tokens - 1, now)
            if len(self._buckets) > self.MAX_CLIENTS:
                self._forget_full(now, rate)
            return None

    def _forget_full(self, now: float, rate: float) -> None:
        full = [
            c
            for c, (tokens, then) in self._buckets.items()
            if tokens + (now - then) * rate >= self.per_minute
        ]
        for client in full:
            del self._buckets[client]


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


# ------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class TrySpec:
    """One framework of a try: the evaluation a launch would run."""

    framework: str
    name: str
    spec: EvaluationSpec
    """Resolved against the catalog: the Model's file, processing and labels."""
    takes_text: bool = False
    """A text Model: the upload is a text, not an image."""

    @property
    def key(self) -> str:
        text = self.spec.model_dump_json(by_alias=True, exclude_none=True)
        return hashlib.sha256(text.encode()).hexdigest()


OPTION_FIELDS: Final = {
    "output": "output",
    "numClasses": "classes",
    "boxFormat": "box_format",
    "normalized": "normalized",
    "scoreThreshold": "score_threshold",
    "nmsIou": "nms_iou",
    "dataRange": "data_range",
}
"""``spec.task`` fields a try fills -> the form field (:class:`TryOptions`) they come from."""
DATASET_FIELDS: Final = {"tokenizer": "tokenizer", "maxLength": "max_length"}
"""``spec.dataset`` fields a try fills -> the form field they come from."""


def _form_field(loc: Sequence[str | int]) -> str:
    """The try form's field a launch form problem at ``loc`` (after "body") is about."""
    if loc[:1] == ("task",):
        return OPTION_FIELDS.get(str(loc[-1]), "model")
    if loc[:1] == ("dataset",):
        return DATASET_FIELDS.get(str(loc[-1]), "model")
    return ".".join(str(part) for part in loc)


def _upload_field(field: str) -> str:
    """The try form's field a :class:`SpecError` about the upload's path is on."""
    if field == "spec.dataset.tokenizer":
        return "tokenizer"
    if field.startswith("spec.model.inputs") and field.endswith(".shape"):
        return "max_length"  # the tokens do not fit the model's sequence length
    return "model"


def try_specs(
    catalog: FileModels,
    model: str,
    frameworks: Sequence[str],
    options: TryOptions | None = None,
) -> list[TrySpec]:
    """The evaluation of ``model`` in each framework, as a launch builds it, with the task
    the Model's label names and ``options``; a :class:`TryError` (422) naming the field for
    an unknown Model, a framework given twice or one the Model has no file for, a task a try
    does not answer, a Model that takes no image (or text), or a text Model's tokenizer that
    cannot be read or whose tokens do not fit its inputs."""
    from mlmodelscope.agent.trial import UploadKind, text_inputs, upload_kind

    task, dataset = None, None
    manifest = catalog.models.get(model)
    if manifest is not None:
        try:
            chosen = try_task(resolve_model(model, catalog.lookup()), options or TryOptions())
        except UnresolvedModelError as exc:
            raise TryError(422, [("model", str(exc.problem))]) from None
        except TaskRefusedError as exc:
            raise TryError(422, [(exc.field, exc.message)]) from None
        task = chosen.task
        known = (manifest.spec.dataset or "") in DATASETS_BY_NAME
        if chosen.type != TaskType.CLASSIFICATION or not known:
            dataset = chosen.dataset
    form = LaunchForm(model=model, frameworks=list(frameworks), dataset=dataset, task=task)
    try:
        built = build_documents(form, catalog)
    except InvalidLaunchError as exc:
        raise TryError(
            422, [(_form_field(problem.loc[1:]), problem.message) for problem in exc.problems]
        ) from None
    first = built[0].evaluation.spec
    try:
        takes_text = upload_kind(first) == UploadKind.TEXT
        if takes_text:
            text_inputs(first)
    except SpecError as exc:
        field = _upload_field(exc.field)
        raise TryError(422, [(field, f"{model}: {exc.message}")]) from None
    return [TrySpec(b.framework, b.name, b.evaluation.spec, takes_text) for b in built]


class Trials:
    """The try path of one app: its bounds, its rate limit and the models it keeps loaded
    (the ``try_*`` fields of :class:`~mlmodelscope.server.state.ServeSettings`)."""

    def __init__(self, *, max_bytes: int, max_pixels: int, per_minute: int, keep: int) -> None:
        self.max_bytes = max_bytes
        self.max_pixels = max_pixels
        self.per_minute = per_minute
        self.keep = keep
        self.limiter = RateLimiter(per_minute)
        self._models: OrderedDict[tuple[str, str], TrialModel] = OrderedDict()
        self._runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlms-try")
        """The one thread that loads and runs models: one try at a time."""

    def admit(self, client: str) -> None:
        """Count one try of ``client``; 429 with ``Retry-After`` past the rate limit."""
        wait = self.limiter.take(client)
        if wait is not None:
            per_minute = self.per_minute
            if math.isinf(wait):
                raise TryError(
                    429, [("", "this server takes no tries (try_per_minute is 0)")],
                    {"Retry-After": "3600"},
                )  # fmt: skip
            raise TryError(
                429,
                [("", f"too many tries: at most {per_minute} a minute; try again in "
                      f"{math.ceil(wait)} s")],
                {"Retry-After": str(math.ceil(wait))},
            )  # fmt: skip

    def attempt(
        self,
        catalog: FileModels,
        client: str,
        model: str,
        frameworks: Sequence[str],
        k: int,
        upload: Upload,
        options: TryOptions | None = None,
    ) -> TryAnswer:
        """Admit the try, check the image (when one was given) and the form, match the upload
        to what the Model takes, then run it through the Model in each framework."""
        self.admit(client)
        facts = None
        if upload.image is not None:
            facts = check_image(upload.image, max_bytes=self.max_bytes, max_pixels=self.max_pixels)
        specs = try_specs(catalog, model, frameworks, options)
        sample = accepted(specs[0].takes_text, model, upload)
        results = self._runner.submit(self._run_all, specs, sample, k).result()
        results = compare_images(results)
        text = None
        if isinstance(sample, str):
            text = TextInfo(characters=len(sample), bytes=len(sample.encode()))
        return TryAnswer(
            model=model,
            task=specs[0].spec.task.type.value,
            k=k,
            image=None
            if facts is None
            else ImageInfo(
                format=facts.format, width=facts.width, height=facts.height, bytes=facts.bytes
            ),
            text=text,
            results=results,
            agree=agree(results),
        )

    def _run_all(self, specs: Sequence[TrySpec], sample: bytes | str, k: int) -> list[FrameworkTry]:
        return [self._run(one, sample, k) for one in specs]

    def _run(self, one: TrySpec, sample: bytes | str, k: int) -> FrameworkTry:
        from mlmodelscope.agent.trial import TrialModel

        loaded: TrialModel | None = None
        load_ms = None
        try:
            key = (one.name, one.key)
            loaded = self._models.get(key)
            if loaded is None:
                loaded = TrialModel.load(one.spec)
                load_ms = _ms(loaded.load_ns)
                self._keep(key, loaded)
            else:
                self._models.move_to_end(key)
            result = loaded.run(sample, k)
        except Exception as exc:  # one framework failing leaves the others' answers
            return FrameworkTry(
                framework=one.framework, evaluation=one.name, ok=False, top=[],
                probabilities=False, latency_ms=None, preprocess_ms=None, postprocess_ms=None,
                load_ms=load_ms, warmup_ms=None,
                framework_version=loaded.info.framework_version if loaded else None,
                device=loaded.info.device if loaded else None,
                error=redact_text(f"{type(exc).__name__}: {exc}"),
                error_field=exc.field if isinstance(exc, SpecError) else None,
            )  # fmt: skip
        return FrameworkTry(
            framework=one.framework,
            evaluation=one.name,
            ok=True,
            top=[TopClass(index=c.index, label=c.label, score=c.score) for c in result.top],
            probabilities=result.probabilities,
            boxes=[
                Box(index=b.index, label=b.label, score=b.score, box=b.box) for b in result.boxes
            ],
            class_map=None if result.class_map is None else ClassMapAnswer.of(result.class_map),
            output_image=None if result.image is None else OutputImageAnswer.of(result.image),
            tokens=None if result.tokens is None else result.tokens.count,
            truncated=result.tokens is not None and result.tokens.truncated,
            latency_ms=_ms(result.latency_ns),
            preprocess_ms=_ms(result.preprocess_ns),
            postprocess_ms=_ms(result.postprocess_ns),
            load_ms=load_ms,
            warmup_ms=_ms(result.warmup_ns),
            framework_version=loaded.info.framework_version,
            device=loaded.info.device,
            error=None,
            error_field=None,
        )

    def _keep(self, key: tuple[str, str], model: TrialModel) -> None:
        self._models[key] = model
        while len(self._models) > max(self.keep, 1):
            _, gone = self._models.popitem(last=False)
            gone.close()

    def close(self) -> None:
        """Wait for the try running, then release every loaded model."""
        self._runner.shutdown(wait=True, cancel_futures=True)
        while self._models:
            _, model = self._models.popitem()
            model.close()
