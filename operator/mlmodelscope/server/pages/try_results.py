"""A try's answer as HTML: the verdict, and one column per framework with its answer by task
(the top classes, of the image or the text; the boxes drawn over the uploaded image; the class
map beside it with each class's pixels; the output image beside it with its size and how far it
is from the first framework's) and its latency, load time, framework version and device.

No script and no library: boxes are an inline SVG laid over the ``<img>`` in the image's own
pixel coordinates (its ``viewBox``), the class map and the output image PNG ``data:`` URLs.
Every label, text and error is escaped.
"""

from __future__ import annotations

from typing import Final

from mlmodelscope.server.pages.render import esc
from mlmodelscope.server.try_answers import (
    AGREE_PSNR_DB,
    Box,
    ClassMapAnswer,
    FrameworkTry,
    OutputImageAnswer,
    TryAnswer,
    colour_hex,
)

STYLE: Final = """<style>
.try-results{display:flex;flex-wrap:wrap;gap:12px 28px;align-items:flex-start}
.try-results section{flex:0 1 320px;min-width:260px}
.try-results table.top td.score,.try-results table.boxes td.num{text-align:right}
img.upload{image-rendering:pixelated;width:128px;height:auto;border:1px solid #dde3ea;
background:#000}
.overlay{position:relative;width:288px;line-height:0}
.overlay img,.pair img{display:block;width:100%;height:auto;image-rendering:pixelated}
.overlay svg{position:absolute;left:0;top:0;width:100%;height:100%}
.overlay text{paint-order:stroke;stroke:#000;stroke-width:.6px;font-family:sans-serif}
.pair{display:flex;gap:8px}.pair figure{margin:0;width:140px}
.tried-text{white-space:pre-wrap;border-left:3px solid #dde3ea;padding-left:8px;max-width:60em}
.pair figcaption{font-size:.8em;color:#555;line-height:1.3}
.swatch{display:inline-block;width:.9em;height:.9em;border:1px solid #999;
vertical-align:middle}
.agree{color:#1a7f37}.disagree{color:#b26a00}
</style>"""


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f} ms"


def _number(value: float) -> str:
    return f"{value:.1f}"


def _classes(result: FrameworkTry) -> str:
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
    return (
        f'<table class="listing top"><thead><tr><th>#</th><th>label</th><th>class</th>'
        f"<th>{score_name}</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def boxes_svg(boxes: list[Box], width: int, height: int) -> str:
    """The boxes as SVG rectangles with their labels, in the image's pixels."""
    size = max(width, height) / 14
    shapes = []
    for b in boxes:
        x0, y0, x1, y1 = b.box
        colour = colour_hex(b.index)
        above = y0 - size * 0.2 if y0 >= size else y0 + size
        shapes.append(
            f'<g class="box" data-label="{esc(b.label)}" data-score="{b.score!r}">'
            f'<rect x="{_number(x0)}" y="{_number(y0)}" width="{_number(x1 - x0)}" '
            f'height="{_number(y1 - y0)}" fill="none" stroke="{colour}" stroke-width="2" '
            'vector-effect="non-scaling-stroke"/>'
            f'<text x="{_number(x0)}" y="{_number(above)}" font-size="{_number(size)}" '
            f'fill="{colour}">{esc(b.label)} {b.score:.2f}</text></g>'
        )
    return (
        f'<svg viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-label="{len(boxes)} boxes">{"".join(shapes)}</svg>'
    )


def _boxes(result: FrameworkTry, image: str | None, width: int, height: int) -> str:
    picture = (
        f'<div class="overlay"><img alt="the uploaded image" src="{esc(image)}">'
        f"{boxes_svg(result.boxes, width, height)}</div>"
        if image
        else ""
    )
    rows = "".join(
        f'<tr class="box"><td>{rank}</td><td class="label">'
        f'<span class="swatch" style="background:{colour_hex(b.index)}"></span> '
        f'{esc(b.label)}</td><td>{b.index}</td><td class="num score">{b.score:.3f}</td>'
        f'<td class="xyxy">{", ".join(_number(v) for v in b.box)}</td></tr>'
        for rank, b in enumerate(result.boxes, 1)
    )
    head = "".join(f"<th>{c}</th>" for c in ("#", "label", "class", "score", "x0, y0, x1, y1"))
    table = (
        f'<table class="listing boxes"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        if result.boxes
        else '<p class="note">No box scored the threshold.</p>'
    )
    return picture + table


def _class_map(found: ClassMapAnswer, image: str | None) -> str:
    total = found.width * found.height
    upload = (
        f'<figure><img alt="the uploaded image" src="{esc(image)}">'
        "<figcaption>the image</figcaption></figure>"
        if image
        else ""
    )
    picture = (
        f'<div class="pair">{upload}<figure><img class="class-map" alt="the class map" '
        f'src="data:image/png;base64,{found.png}"><figcaption>each pixel\'s class '
        f"({found.width}x{found.height})</figcaption></figure></div>"
    )
    rows = "".join(
        f'<tr class="class"><td class="label"><span class="swatch" '
        f'style="background:{c.colour}"></span> {esc(c.label)}</td><td>{c.index}</td>'
        f'<td class="num pixels">{c.pixels}</td><td class="num">{100 * c.pixels / total:.1f}%'
        "</td></tr>"
        for c in found.classes
    )
    return (
        picture + '<table class="listing classes"><thead><tr><th>label</th><th>class</th>'
        f"<th>pixels</th><th>share</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _output_image(found: OutputImageAnswer, image: str | None) -> str:
    upload = (
        f'<figure><img alt="the uploaded image" src="{esc(image)}">'
        "<figcaption>the input</figcaption></figure>"
        if image
        else ""
    )
    difference = found.difference
    versus = ""
    if difference is not None:
        if not difference.same_size:
            said = "another size"
        elif difference.psnr_db is None:
            said = "identical"
        else:
            said = (
                f"PSNR {difference.psnr_db:.1f} dB, largest difference "
                f"{difference.max_difference}/255"
            )
        versus = (
            f'<p class="hint difference" data-psnr="{difference.psnr_db or ""}">against '
            f"{esc(difference.framework)}: {said}</p>"
        )
    return (
        f'<div class="pair">{upload}<figure><img class="output-image" alt="the output image" '
        f'src="data:image/png;base64,{found.png}"><figcaption>the output '
        f"({found.width}x{found.height})</figcaption></figure></div>{versus}"
    )


def _framework(result: FrameworkTry, answer: TryAnswer, image: str | None) -> str:
    head = f'<h3>{esc(result.framework)}</h3><p class="hint">{esc(result.evaluation)}</p>'
    if not result.ok:
        where = f" ({esc(result.error_field)})" if result.error_field else ""
        return (
            f'<section class="framework" data-framework="{esc(result.framework)}">{head}'
            f'<p class="error">failed{where}: {esc(result.error or "")}</p></section>'
        )
    if answer.task == "detection" and answer.image is not None:
        body = _boxes(result, image, answer.image.width, answer.image.height)
    elif result.class_map is not None:
        body = _class_map(result.class_map, image)
    elif result.output_image is not None:
        body = _output_image(result.output_image, image)
    else:
        body = _classes(result)
    tokens = (
        f'<tr><th>tokens</th><td class="tokens">{result.tokens}'
        + (" (truncated)" if result.truncated else "")
        + "</td></tr>"
        if result.tokens is not None
        else ""
    )
    facts = (
        f'<tr><th>latency</th><td class="latency">{_ms(result.latency_ms)}</td></tr>'
        f"<tr><th>preprocess</th><td>{_ms(result.preprocess_ms)}</td></tr>"
        f"<tr><th>postprocess</th><td>{_ms(result.postprocess_ms)}</td></tr>"
        + tokens
        + f"<tr><th>load</th><td>{_ms(result.load_ms) or 'already loaded'}</td></tr>"
        + (
            f"<tr><th>warm-up</th><td>{_ms(result.warmup_ms)}</td></tr>"
            if result.warmup_ms is not None
            else ""
        )
        + f"<tr><th>framework</th><td>{esc(result.framework_version or '')}</td></tr>"
        f"<tr><th>device</th><td>{esc(result.device or '')}</td></tr>"
    )
    return (
        f'<section class="framework" data-framework="{esc(result.framework)}">{head}{body}'
        f'<table class="facts">{facts}</table></section>'
    )


def _verdict(answer: TryAnswer) -> str:
    ran = [r for r in answer.results if r.ok]
    if not ran:
        return '<p class="error" id="verdict">No framework ran.</p>'
    first = ran[0]
    if answer.task == "detection":
        what = "the boxes' classes"
        found = ", ".join(b.label for b in first.boxes) or "no box"
    elif answer.task == "segmentation":
        what = "every pixel's class"
        found = ", ".join(c.label for c in first.class_map.classes) if first.class_map else ""
    elif first.output_image is not None:
        what = f"the output image (PSNR {AGREE_PSNR_DB:g} dB or more)"
        found = f"{first.output_image.width}x{first.output_image.height}"
    else:
        what = f"the top {answer.k}"
        found = ", ".join(c.label for c in first.top)
    if len(ran) == 1:
        return f'<p id="verdict">The one framework that ran found {what}: {esc(found)}.</p>'
    if answer.agree:
        return (
            f'<p class="agree" id="verdict">The {len(ran)} frameworks that ran agree on '
            f"{what}: {esc(found)}.</p>"
        )
    return f'<p class="disagree" id="verdict">The frameworks disagree on {what}.</p>'


def try_results(answer: TryAnswer, image: str | None, text: str = "") -> str:
    """The answer under the form; ``image``: the upload as a ``data:`` URL; ``text``: the
    text tried on a text Model."""
    picture = f'<img class="upload" alt="the uploaded image" src="{esc(image)}">' if image else ""
    if answer.image is not None:
        upload = (
            f"{esc(answer.image.format)}, {answer.image.width}x{answer.image.height} pixels, "
            f"{answer.image.bytes} bytes"
        )
    elif answer.text is not None:
        picture = f'<blockquote class="tried-text">{esc(text)}</blockquote>'
        upload = f"a text of {answer.text.characters} characters"
    else:
        upload = "no upload"
    about = (
        f'<p class="hint">{upload}; Model {esc(answer.model)} ({esc(answer.task)}). Latency: '
        "that one inference (batch 1), loading excluded.</p>"
    )
    columns = "".join(_framework(r, answer, image) for r in answer.results)
    return (
        f"<h2>Results</h2>{picture}{about}{_verdict(answer)}"
        f'<div class="try-results" id="results">{columns}</div>'
    )
