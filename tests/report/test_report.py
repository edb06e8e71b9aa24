"""`mlms report` on real result documents (the fixture of test_compare.py, via conftest.py):
the page parses, needs nothing from the network, carries the documents' exact numbers, draws
well-formed SVG, and escapes what documents say."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from compare_runs import NAMES, doc, store_env
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.contract.result import Measurement
from mlmodelscope.report.compare import SIGNIFICANCE_RUNS, compare, load_result
from mlmodelscope.report.html import Axis, cdf_points, render_html
from mlmodelscope.report.verdicts import Outcome

COLUMNS = {
    "p50_ms": lambda r: r["latency_ms"]["p50"],
    "p90_ms": lambda r: r["latency_ms"]["p90"],
    "p99_ms": lambda r: r["latency_ms"]["p99"],
    "mean_ms": lambda r: r["latency_ms"]["mean"],
    "throughput": lambda r: r["throughput"],
    "metric_value": lambda r: r["metric_value"],
}


class Page(HTMLParser):
    """Every tag and attribute, the results table's cells by (run, batch) and column, the
    significance table's rows by (run, metric, batch or None) and its methods legend."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.cells: dict[tuple[str, int], dict[str, float]] = {}
        self.row: tuple[str, int] | None = None
        self.table: str | None = None
        self.text: list[str] = []
        self.verdicts: dict[tuple[str, str, int | None], dict[str, Any]] = {}
        """Each cell's text by its class (``outcome``, ``evidence``, ``method``), the
        evidence's ``data-*`` numbers under ``numbers`` and the method's footnote under
        ``note``."""
        self.legend: dict[str, str] = {}
        self._verdict: dict[str, Any] | None = None
        self._text: tuple[dict[str, Any], str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "table":
            self.table = attributes.get("class")
        elif tag == "tr" and self.table == "results" and attributes.get("data-run"):
            self.row = (str(attributes["data-run"]), int(str(attributes["data-batch"])))
            self.cells[self.row] = {}
        elif tag == "td" and self.row is not None and "data-value" in attributes:
            self.cells[self.row][str(attributes["data-column"])] = float(
                str(attributes["data-value"])
            )
        elif tag == "tr" and self.table == "verdicts" and attributes.get("data-run"):
            batch = attributes.get("data-batch")
            key = (str(attributes["data-run"]), str(attributes["data-metric"]), batch)
            self._verdict = {"numbers": {}, "note": None}
            self.verdicts[key[0], key[1], None if batch is None else int(batch)] = self._verdict
        elif tag == "td" and self._verdict is not None:
            kind = str(attributes.get("class") or "").split(" ")[0] or "label"
            self._verdict[kind] = ""
            self._text = (self._verdict, kind)
            self._verdict["numbers"].update(
                {k[5:]: float(str(v)) for k, v in attributes.items() if k.startswith("data-")}
            )
        elif tag == "a" and self._verdict is not None:
            self._verdict["note"] = str(attributes["href"]).removeprefix("#")
        elif tag == "li" and str(attributes.get("id")).startswith("method-"):
            self.legend[str(attributes["id"])] = ""
            self._text = (self.legend, str(attributes["id"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self.row = None
            self._verdict = None
        elif tag == "table":
            self.table = None
        elif tag in ("td", "li"):
            self._text = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._text is not None:
            self._text[0][self._text[1]] += data


def report(results: Path, *sources: str, env: dict[str, str] | None = None) -> tuple[str, Page]:
    output = results.parent / "report.html"
    result = CliRunner().invoke(app, ["report", *sources, "--output", str(output)], env=env)
    assert result.exit_code == 0, result.output
    assert f"wrote {output}" in result.output
    page = output.read_text()
    parser = Page()
    parser.feed(page)
    parser.close()
    return page, parser


def files(results: Path, *names: str) -> list[str]:
    return [str(results / f"{name}.json") for name in names]


def test_table_numbers_equal_the_documents(results: Path) -> None:
    _, page = report(results, *files(results, *NAMES))
    expected = {
        (name, row["batch_size"]): row for name in NAMES for row in doc(results, name)["results"]
    }
    assert set(page.cells) == set(expected)
    for key, row in expected.items():
        cells = page.cells[key]
        assert cells["batch_size"] == key[1]
        for column, value in COLUMNS.items():
            assert cells[column] == value(row), (key, column)  # exact, not approximately
    # relative differences are compare's, against the reference (ort) of the same batch size
    ort = {r["batch_size"]: r for r in doc(results, "ort")["results"]}
    for batch, row in ((1, expected["torch", 1]), (8, expected["torch", 8])):
        torch = page.cells["torch", batch]
        assert torch["p50_rel"] == pytest.approx(
            row["latency_ms"]["p50"] / ort[batch]["latency_ms"]["p50"] - 1
        )
        assert torch["throughput_rel"] == pytest.approx(
            row["throughput"] / ort[batch]["throughput"] - 1
        )
    assert "p50_rel" not in page.cells["ort", 1]  # the reference itself
    assert "p50_rel" not in page.cells["ort-wrong", 4]  # no batch 4 in the reference
    assert page.cells["ort-wrong", 1]["metric_rel"] < 0


def test_significance_shows_compares_verdicts_with_a_legend(results: Path) -> None:
    """The report's Significance section is `mlms compare`'s verdicts, row for row: the
    outcome (or why not testable), the interval or p-value with its exact numbers, and a
    footnote to the method in the legend."""
    html, page = report(results, *files(results, *NAMES))
    expected = compare([load_result(results / f"{n}.json") for n in NAMES], significance=True)
    assert expected.verdicts
    assert "<h2>Significance</h2>" in html
    assert set(page.verdicts) == {(v.run, str(v.metric), v.batch_size) for v in expected.verdicts}
    assert ("ort-wrong", "latency p50", 1) in page.verdicts
    assert ("ort-wrong", "latency p50", 4) not in page.verdicts  # the reference has no batch 4
    for verdict in expected.verdicts:
        row = page.verdicts[verdict.run, str(verdict.metric), verdict.batch_size]
        if verdict.outcome is Outcome.NOT_TESTABLE:
            assert row["outcome"] == verdict.evidence  # not testable: <why>
            assert (row["evidence"], row["method"], row["note"]) == ("-", "-", None)
            continue
        assert row["outcome"] == str(verdict.outcome)
        assert row["evidence"] == verdict.evidence
        numbers = {
            "ratio": verdict.ratio,
            "low": verdict.low,
            "high": verdict.high,
            "level": verdict.level,
            "p-value": verdict.p_value,
        }
        assert row["numbers"] == {k: v for k, v in numbers.items() if v is not None}
        assert page.legend[row["note"]] == verdict.method
        assert row["method"] == f"[{row['note'].removeprefix('method-')}]"
    methods = list(page.legend.values())
    assert len(methods) == len(set(methods)) == len({v.method for v in expected.verdicts} - {"-"})
    assert any(m.startswith("McNemar exact test") for m in methods)
    assert any(m.startswith("bootstrap BCa") for m in methods)

    many = render_html([load_result(results / "ort.json")] * (SIGNIFICANCE_RUNS + 1))
    assert f"Not judged: more than {SIGNIFICANCE_RUNS} runs; compare fewer at a time." in many
    assert '<table class="verdicts">' not in many
    alone = render_html([load_result(results / "ort.json")])
    assert "Nothing to judge" in alone


def test_the_docs_name_every_significance_attribute(results: Path) -> None:
    """docs/results.md's Significance item names every ``data-*`` attribute of the table."""
    html = render_html([load_result(results / f"{n}.json") for n in ("ort", "torch")])
    table = html[html.index('<table class="verdicts">') :]
    used = set(re.findall(r" (data-[a-z-]+)=", table[: table.index("</table>")]))
    assert used >= {"data-run", "data-metric", "data-outcome", "data-ratio", "data-p-value"}
    text = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    section = text[text.index("- **Significance**") :]
    documented = set(re.findall(r"`(data-[a-z-]+)`", section[: section.index("\n- **")]))
    assert used <= documented, used - documented


def test_self_contained(results: Path) -> None:
    html, page = report(results, *files(results, *NAMES))
    assert html.startswith("<!DOCTYPE html>")
    assert "http://" not in html and "https://" not in html
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    for tag, attributes in page.tags:
        for name in ("src", "href"):
            value = attributes.get(name)
            assert value is None or value.startswith("#"), (tag, attributes)
    assert "@import" not in html and "url(" not in html
    for text in ("HW/SW stack differences", "stack.backend.framework_version", "Spec differences"):
        assert text in html, text
    assert "spec.preprocessing[0].scale.factor" in html


def test_svgs_are_well_formed_with_one_cdf_per_run(results: Path) -> None:
    html, _ = report(results, *files(results, *NAMES))
    svgs = {svg.get("id"): svg for svg in map(ET.fromstring, re.findall(r"<svg .*?</svg>", html))}
    assert set(svgs) == {"cdf", "throughput", "accuracy"}
    cdf = svgs["cdf"].findall(".//path[@class='cdf']")
    assert [path.get("data-run") for path in cdf] == list(NAMES)
    for path in cdf:
        assert re.fullmatch(r"M[\d.]+,[\d.]+( L[\d.]+,[\d.]+)+", str(path.get("d")))
    throughput = svgs["throughput"].findall(".//path[@class='throughput']")
    assert [path.get("data-run") for path in throughput] == list(NAMES)
    points = svgs["accuracy"].findall(".//circle[@class='accuracy']")
    rows = [r for name in NAMES for r in doc(results, name)["results"] if r["top1"] is not None]
    assert len(points) == len(rows) == 6


def test_cdf_from_raw_latencies_else_percentiles(results: Path) -> None:
    document = doc(results, "ort")
    measurement = Measurement.model_validate(document["measurements"][0])
    assert measurement.raw is not None and measurement.raw.latencies_ns
    raw = sorted(measurement.raw.latencies_ns)
    points, source = cdf_points(measurement)
    assert source == "raw"
    assert points[0] == (raw[0] / 1e6, 0.0) and points[-1] == (raw[-1] / 1e6, 1.0)
    assert all(a <= b for a, b in pairwise(points))
    assert len(points) <= 402

    without = measurement.model_copy(update={"raw": None})
    points, source = cdf_points(without)
    assert source == "percentiles"
    percentiles = measurement.latency.percentiles_s
    assert (percentiles["p50"] * 1e3, 0.5) in points
    assert (percentiles["p99"] * 1e3, 0.99) in points
    assert points[-1] == (measurement.latency.max_s * 1e3, 1.0)

    # a document without raw latencies still draws its CDF
    stripped = json.loads(json.dumps(document))
    for item in stripped["measurements"]:
        item.pop("raw", None)
    path = results.parent / "no-raw" / "ort.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(stripped))
    html = render_html([load_result(path), load_result(results / "torch.json")])
    cdf = ET.fromstring(re.findall(r'<svg class="chart" id="cdf".*?</svg>', html)[0])
    assert len(cdf.findall(".//path[@class='cdf']")) == 2
    assert "batch 1, percentiles" in html and "batch 1, raw" in html


def test_document_strings_are_escaped(results: Path, tmp_path: Path) -> None:
    evil = '<script>alert("x")</script>'
    data: dict[str, Any] = doc(results, "ort")
    data["evaluation"]["name"] = evil
    data["spec"]["model"]["name"] = f"{evil}&"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(data))
    html = render_html([load_result(path), load_result(results / "torch.json")])
    assert "<script" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    page = Page()
    page.feed(html)
    assert not any(tag == "script" for tag, _ in page.tags)
    assert evil in "".join(page.text)  # what a reader sees is the document's string
    for svg in re.findall(r"<svg .*?</svg>", html):
        ET.fromstring(svg)  # still well-formed XML with the label in it
    assert page.cells[evil, 1]["p50_ms"] == data["results"][0]["latency_ms"]["p50"]


def test_run_ids_from_the_store(results: Path) -> None:
    ids = [doc(results, name)["run_id"] for name in ("ort", "torch")]
    _, stored = report(results, *ids, env=store_env(results))
    _, from_files = report(results, *files(results, "ort", "torch"))
    assert stored.cells == from_files.cells
    assert len(stored.cells) == 4


def test_one_run_and_a_bad_source(results: Path, tmp_path: Path) -> None:
    _, page = report(results, *files(results, "ort"))
    assert set(page.cells) == {("ort", 1), ("ort", 8)}
    html = render_html([load_result(results / "ort.json")])
    assert "none: every run has the same values" in html
    assert compare([load_result(results / "ort.json")]).stack == []

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": "world"}))
    result = CliRunner().invoke(
        app, ["report", str(results / "ort.json"), str(other), "-o", str(tmp_path / "r.html")]
    )
    assert result.exit_code == 1
    assert f"{other}: not an mlmodelscope result document" in result.output
    assert not (tmp_path / "r.html").exists()


def test_axis() -> None:
    linear = Axis.over([0.0, 10.0], zero=True)
    assert linear.lo == 0 and linear.hi == pytest.approx(10.5)
    assert linear.ticks() == [0, 2, 4, 6, 8, 10]
    log = Axis.over([0.1, 30.0], log=True)
    assert log.log and log.ticks() == [0.1, 0.2, 0.5, 1, 2, 5, 10, 20]
    assert 0 < log.fraction(0.1) < log.fraction(30.0) < 1  # a margin on both sides
    flat = Axis.over([5.0, 5.0])
    assert flat.lo < 5 < flat.hi
    percent = Axis.over([97.0, 100.0], within=(0.0, 100.0))
    assert percent.lo < 97 and percent.hi == 100
