"""The dashboard's Try page (``/try``) as an HTML string: a plain multipart form (no script) and,
after a try, the image beside each framework's top classes, latency and load time.

The form posts to ``/try``, which answers this page again: with the results, or with each
problem next to its field. Every value from the request, the catalog or a framework's error is
escaped; the write token typed is never written back into the page.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from starlette.datastructures import FormData, UploadFile

from mlmodelscope.server.launches import FRAMEWORKS
from mlmodelscope.server.pages.render import esc, page
from mlmodelscope.server.trials import FORMATS, MAX_K, FrameworkTry, TryAnswer

ACCEPT: Final = ",".join(f"image/{f.lower()}" for f in FORMATS) + ",.png,.jpg,.jpeg,.bmp"
STYLE: Final = """<style>
.try-results{display:flex;flex-wrap:wrap;gap:12px 28px;align-items:flex-start}
.try-results section{flex:0 1 320px;min-width:260px}
.try-results table.top td.score{text-align:right}
img.upload{image-rendering:pixelated;width:128px;height:auto;border:1px solid #dde3ea;
background:#000}
.agree{color:#1a7f37}.disagree{color:#b26a00}
</style>"""


@dataclass(frozen=True)
class TryValues:
    """What the form held (the token is kept only to try, never shown again)."""

    model: str = ""
    frameworks: tuple[str, ...] = FRAMEWORKS
    k: int = 3
    token: str = field(default="", repr=False)


def by_field(problems: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Problems keyed by the form field they are about (``frameworks.1`` -> ``frameworks``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for where, message in problems:
        found[where.split(".", 1)[0]].append(message)
    return dict(found)


def read_form(form: FormData, models: Sequence[str]) -> tuple[TryValues, dict[str, list[str]]]:
    """The form's values and what is wrong with each field (the file is checked here for
    presence only; :func:`~mlmodelscope.server.trials.check_image` checks what it is)."""
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
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        errors["file"].append("choose an image file")
    values = TryValues(model=model, frameworks=tuple(chosen), k=k, token=token)
    return values, dict(errors)


def _errors(errors: dict[str, list[str]], name: str) -> str:
    lines = "".join(f'<span class="field-error">{esc(m)}</span>' for m in errors.get(name, []))
    return f'<span class="field-errors error-text" data-errors-for="{esc(name)}">{lines}</span>'


def _form(models: Sequence[str], values: TryValues, errors: dict[str, list[str]]) -> str:
    if not models:
        return (
            '<p class="note">No Models to try: start mlms serve with --catalog FILE_OR_FOLDER '
            "(e.g. --catalog examples/catalog/).</p>"
        )
    options = "".join(
        f'<option value="{esc(m)}"{" selected" if m == values.model else ""}>{esc(m)}</option>'
        for m in models
    )
    boxes = "".join(
        f'<label class="check"><input type="checkbox" name="frameworks" value="{f}"'
        f"{' checked' if f in values.frameworks else ''}>{f}</label>"
        for f in FRAMEWORKS
    )
    general = "".join(f'<p class="error">{esc(m)}</p>' for m in errors.get("", []))
    return f"""{general}
<form id="try-form" class="launch" method="post" action="/try" enctype="multipart/form-data">
<fieldset><legend>Image</legend>
<label>file<input type="file" name="file" accept="{ACCEPT}" required></label>
{_errors(errors, "file")}
</fieldset>
<fieldset><legend>Model</legend>
<label>model<select name="model">{options}</select></label>{_errors(errors, "model")}
<label>top k<input name="k" type="number" min="1" max="{MAX_K}" value="{values.k}"></label>
{_errors(errors, "k")}
</fieldset>
<fieldset><legend>Frameworks</legend>{boxes}{_errors(errors, "frameworks")}</fieldset>
<fieldset><legend>Write token</legend>
<label>token<input type="password" name="token" autocomplete="off" required></label>
{_errors(errors, "token")}
</fieldset>
<div class="actions"><button type="submit" id="try">Try</button>
<span class="hint">the image is used for this answer only; the server keeps no copy</span></div>
</form>"""


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f} ms"


def _framework(result: FrameworkTry) -> str:
    head = f'<h3>{esc(result.framework)}</h3><p class="hint">{esc(result.evaluation)}</p>'
    if not result.ok:
        where = f" ({esc(result.error_field)})" if result.error_field else ""
        return (
            f'<section class="framework" data-framework="{esc(result.framework)}">{head}'
            f'<p class="error">failed{where}: {esc(result.error or "")}</p></section>'
        )
    score_name = "probability" if result.probabilities else "score"
    rows = "".join(
        f'<tr><td>{rank}</td><td class="label">{esc(c.label)}</td><td>{c.index}</td>'
        f'<td class="score" data-value="{"" if c.score is None else repr(c.score)}">'
        + (
            ""
            if c.score is None
            else f"{100 * c.score:.2f}%"
            if result.probabilities
            else f"{c.score:.4g}"
        )
        + "</td></tr>"
        for rank, c in enumerate(result.top, 1)
    )
    facts = (
        f'<tr><th>latency</th><td class="latency">{_ms(result.latency_ms)}</td></tr>'
        f"<tr><th>preprocess</th><td>{_ms(result.preprocess_ms)}</td></tr>"
        f"<tr><th>postprocess</th><td>{_ms(result.postprocess_ms)}</td></tr>"
        f"<tr><th>load</th><td>{_ms(result.load_ms) or 'already loaded'}</td></tr>"
        + (
            f"<tr><th>warm-up</th><td>{_ms(result.warmup_ms)}</td></tr>"
            if result.warmup_ms is not None
            else ""
        )
        + f"<tr><th>framework</th><td>{esc(result.framework_version or '')}</td></tr>"
        f"<tr><th>device</th><td>{esc(result.device or '')}</td></tr>"
    )
    return (
        f'<section class="framework" data-framework="{esc(result.framework)}">{head}'
        f'<table class="listing top"><thead><tr><th>#</th><th>label</th><th>class</th>'
        f"<th>{score_name}</th></tr></thead><tbody>{rows}</tbody></table>"
        f'<table class="facts">{facts}</table></section>'
    )


def _results(answer: TryAnswer, image: str | None) -> str:
    ran = [r for r in answer.results if r.ok]
    if ran and answer.agree:
        best = ", ".join(c.label for c in ran[0].top)
        verdict = (
            f'<p class="agree" id="verdict">The {len(ran)} frameworks that ran agree on the '
            f"top {answer.k}: {esc(best)}.</p>"
        )
    elif ran:
        verdict = (
            f'<p class="disagree" id="verdict">The frameworks disagree on the top {answer.k}.</p>'
        )
    else:
        verdict = '<p class="error" id="verdict">No framework ran.</p>'
    picture = f'<img class="upload" alt="the uploaded image" src="{esc(image)}">' if image else ""
    about = (
        f'<p class="hint">{esc(answer.image.format)}, {answer.image.width}x'
        f"{answer.image.height} pixels, {answer.image.bytes} bytes; Model "
        f"{esc(answer.model)}. Latency: that one inference (batch 1), loading excluded.</p>"
    )
    columns = "".join(_framework(r) for r in answer.results)
    return (
        f"<h2>Results</h2>{picture}{about}{verdict}"
        f'<div class="try-results" id="results">{columns}</div>'
    )


def try_page(
    models: Sequence[str],
    values: TryValues,
    *,
    errors: dict[str, list[str]] | None = None,
    answer: TryAnswer | None = None,
    image: str | None = None,
) -> str:
    """The form, with ``errors`` next to their fields, and ``answer`` below it after a try."""
    intro = (
        "<p>Classify one image with a Model of this server's catalog in each framework "
        "ticked: the Model's own preprocessing and postprocessing, as an evaluation runs "
        "them. Digits Models take light ink on a dark ground, shrunk to 8x8. "
        '<a href="/launch">Launch an evaluation</a></p>'
    )
    results = _results(answer, image) if answer is not None else ""
    return page("Try", STYLE + intro + _form(models, values, errors or {}) + results)
