"""The dashboard's Try page (``/try``) as an HTML string: a plain multipart form (no script) with
an image file and a text (for text Models) and, after a try, each framework's answer by the
Model's task (:mod:`.try_results`).

The form posts to ``/try``, which answers this page again: with the results, or with each
problem next to its field. Every value from the request, the catalog or a framework's error is
escaped; the write token typed is never written back into the page.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, get_args

from pydantic import ValidationError
from starlette.datastructures import FormData, UploadFile

from mlmodelscope.server.launches import FRAMEWORKS
from mlmodelscope.server.pages.render import esc, page
from mlmodelscope.server.pages.try_results import STYLE, try_results
from mlmodelscope.server.trials import FORMATS, MAX_K, MAX_TEXT_CHARS
from mlmodelscope.server.try_answers import TryAnswer
from mlmodelscope.server.try_tasks import TryOptions

ACCEPT: Final = ",".join(f"image/{f.lower()}" for f in FORMATS) + ",.png,.jpg,.jpeg,.bmp"
OPTION_TEXTS: Final = (
    "output",
    "classes",
    "box_format",
    "score_threshold",
    "nms_iou",
    "tokenizer",
    "max_length",
    "data_range",
)
"""The task options the form has as text fields (``normalized`` is a checkbox)."""
BOX_FORMATS: Final[tuple[str, ...]] = get_args(TryOptions.model_fields["box_format"].annotation)


@dataclass(frozen=True)
class TryValues:
    """What the form held (the token is kept only to try, never shown again)."""

    model: str = ""
    frameworks: tuple[str, ...] = FRAMEWORKS
    k: int = 3
    options: TryOptions = field(default_factory=TryOptions)
    texts: Mapping[str, str] = field(default_factory=dict)
    """The task options as typed, to show them again."""
    text: str = ""
    """The text to try on a text Model, as typed."""
    token: str = field(default="", repr=False)


def by_field(problems: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Problems keyed by the form field they are about (``frameworks.1`` -> ``frameworks``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for where, message in problems:
        found[where.split(".", 1)[0]].append(message)
    return dict(found)


def read_options(
    texts: Mapping[str, str], normalized: bool
) -> tuple[TryOptions, dict[str, list[str]]]:
    """The task options as :class:`TryOptions` checks them (as the API does), and what is
    wrong with each field; the defaults where any is wrong."""
    given = {name: value for name, value in texts.items() if value}
    try:
        return TryOptions.model_validate({**given, "normalized": normalized}), {}
    except ValidationError as exc:
        errors: dict[str, list[str]] = defaultdict(list)
        for error in exc.errors():
            errors[str(error["loc"][0])].append(error["msg"])
        return TryOptions(), dict(errors)


def read_form(form: FormData, models: Sequence[str]) -> tuple[TryValues, dict[str, list[str]]]:
    """The form's values and what is wrong with each field (the file and the text are
    checked here for presence only: :func:`~mlmodelscope.server.trials.accepted` matches them
    to the Model, :func:`~mlmodelscope.server.trials.check_image` checks what the file is)."""
    errors: dict[str, list[str]] = defaultdict(list)

    def text(name: str) -> str:
        value = form.get(name)
        if isinstance(value, UploadFile):
            errors[name].append("expected text, got a file")
            return ""
        return (value or "").strip()

    model = text("model")
    if not model:
        errors["model"].append("choose a Model")
    elif model not in models:
        known = ", ".join(models) or "none: start mlms serve with --catalog"
        errors["model"].append(f"no Model {model!r} in the catalog ({known})")
    chosen: list[str] = []
    for value in form.getlist("frameworks"):
        if not isinstance(value, str) or value not in FRAMEWORKS:
            errors["frameworks"].append(
                f"{str(value)[:40]!r} is not one of {', '.join(FRAMEWORKS)}"
            )
        elif value in chosen:
            errors["frameworks"].append(f"{value} is given twice")
        else:
            chosen.append(value)
    if not chosen and "frameworks" not in errors:
        errors["frameworks"].append("tick at least one framework")
    k_text = text("k") or "3"
    k = int(k_text) if k_text.isdigit() and len(k_text) <= 3 else 0
    if not 1 <= k <= MAX_K:
        errors["k"].append(f"a whole number from 1 to {MAX_K}")
        k = 3
    token = text("token")
    if not token:
        errors["token"].append("the server's write token is needed to try")
    typed = form.get("text")
    words = typed if isinstance(typed, str) else ""
    if isinstance(typed, UploadFile):
        errors["text"].append("expected text, got a file")
    upload = form.get("file")
    if (not isinstance(upload, UploadFile) or not upload.filename) and not words.strip():
        errors["file"].append("choose an image file (or, for a text Model, type a text)")
    texts = {name: text(name) for name in OPTION_TEXTS}
    options, wrong = read_options(texts, text("normalized") == "true")
    for name, messages in wrong.items():
        errors[name].extend(messages)
    values = TryValues(
        model=model,
        frameworks=tuple(chosen),
        k=k,
        options=options,
        texts=texts,
        text=words,
        token=token,
    )
    return values, dict(errors)


def _errors(errors: dict[str, list[str]], name: str) -> str:
    lines = "".join(f'<span class="field-error">{esc(m)}</span>' for m in errors.get(name, []))
    return f'<span class="field-errors error-text" data-errors-for="{esc(name)}">{lines}</span>'


def _task_options(values: TryValues, errors: dict[str, list[str]]) -> str:
    """The task options' fieldset: a detection Model's box reading, a segmentation Model's
    output and classes, a text Model's tokenizer and length, an image-to-image Model's
    output range."""

    def typed(name: str) -> str:
        return esc(values.texts.get(name, ""))

    formats = "".join(
        f'<option value="{b}"{" selected" if b == values.options.box_format else ""}>{b}</option>'
        for b in BOX_FORMATS
    )
    checked = " checked" if values.options.normalized else ""
    return f"""<fieldset id="task-options"><legend>Task options</legend>
<label>box format<select name="box_format">{formats}</select></label>{_errors(errors, "box_format")}
<label class="check"><input type="checkbox" name="normalized" value="true"{checked}>boxes
normalized (fractions of the input)</label>{_errors(errors, "normalized")}
<label>score threshold<input name="score_threshold" inputmode="decimal" placeholder="0.5"
value="{typed("score_threshold")}"></label>{_errors(errors, "score_threshold")}
<label>NMS IoU<input name="nms_iou" inputmode="decimal" placeholder="none"
value="{typed("nms_iou")}"></label>{_errors(errors, "nms_iou")}
<label>output<input name="output" placeholder="the first" value="{typed("output")}"></label>
{_errors(errors, "output")}
<label>classes<input name="classes" inputmode="numeric" placeholder="from the output's shape"
value="{typed("classes")}"></label>{_errors(errors, "classes")}
<label>tokenizer<input name="tokenizer" placeholder="path/to/tokenizer.json"
value="{typed("tokenizer")}"></label>{_errors(errors, "tokenizer")}
<label>max length<input name="max_length" inputmode="numeric"
placeholder="from the input's shape" value="{typed("max_length")}"></label>
{_errors(errors, "max_length")}
<label>data range<input name="data_range" inputmode="decimal" placeholder="1.0"
value="{typed("data_range")}"></label>{_errors(errors, "data_range")}
<span class="hint whole">By the Model's task: a detection Model reads boxes (box format,
normalized, threshold, NMS: spec.task.detection's), a segmentation Model a class map (output,
classes: spec.task's), a text Model its top k of the text through the tokenizer.json this
server reads (tokenizer, max length: a text dataset's), an image-to-image Model an output image
of values 0..data range (spec.task.dataRange); a classification Model answers its top k.</span>
</fieldset>"""


def _form(models: Mapping[str, str | None], values: TryValues, errors: dict[str, list[str]]) -> str:
    if not models:
        return (
            '<p class="note">No Models to try: start mlms serve with --catalog FILE_OR_FOLDER '
            "(e.g. --catalog examples/catalog/).</p>"
        )
    options = "".join(
        f'<option value="{esc(m)}"{" selected" if m == values.model else ""}>{esc(m)}'
        + (f" ({esc(task)})" if task else "")
        + "</option>"
        for m, task in models.items()
    )
    boxes = "".join(
        f'<label class="check"><input type="checkbox" name="frameworks" value="{f}"'
        f"{' checked' if f in values.frameworks else ''}>{f}</label>"
        for f in FRAMEWORKS
    )
    general = "".join(f'<p class="error">{esc(m)}</p>' for m in errors.get("", []))
    return f"""{general}
<form id="try-form" class="launch" method="post" action="/try" enctype="multipart/form-data">
<fieldset><legend>Input</legend>
<label>image file<input type="file" name="file" accept="{ACCEPT}"></label>
{_errors(errors, "file")}
<label>text (text Models)<textarea name="text" rows="3" maxlength="{MAX_TEXT_CHARS}"
placeholder="a text to classify">{esc(values.text)}</textarea></label>
{_errors(errors, "text")}
</fieldset>
<fieldset><legend>Model</legend>
<label>model<select name="model">{options}</select></label>{_errors(errors, "model")}
<label>top k (classification, text)<input name="k" type="number" min="1" max="{MAX_K}"
value="{values.k}"></label>
{_errors(errors, "k")}
</fieldset>
<fieldset><legend>Frameworks</legend>{boxes}{_errors(errors, "frameworks")}</fieldset>
{_task_options(values, errors)}
<fieldset><legend>Write token</legend>
<label>token<input type="password" name="token" autocomplete="off" required></label>
{_errors(errors, "token")}
</fieldset>
<div class="actions"><button type="submit" id="try">Try</button>
<span class="hint">the image or text is used for this answer only; the server keeps no
copy</span></div>
</form>"""


def try_page(
    models: Mapping[str, str | None],
    values: TryValues,
    *,
    errors: dict[str, list[str]] | None = None,
    answer: TryAnswer | None = None,
    image: str | None = None,
) -> str:
    """The form over ``models`` (name -> task label), with ``errors`` next to their fields,
    and ``answer`` below it after a try."""
    intro = (
        "<p>Try one image (or, on a text Model, one text) on a Model of this server's catalog "
        "in each framework ticked: the Model's own preprocessing and postprocessing, as an "
        "evaluation runs them. By the Model's task label, the answer is its top classes, its "
        "boxes drawn over the image (detection), each pixel's class (segmentation), the text's "
        "top classes (text-classification) or the output image beside the input "
        "(image-to-image). Digits Models take light ink on a dark ground, shrunk to 8x8. "
        '<a href="/launch">Launch an evaluation</a></p>'
    )
    results = try_results(answer, image, values.text) if answer is not None else ""
    return page("Try", STYLE + intro + _form(models, values, errors or {}) + results)
