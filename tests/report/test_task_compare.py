"""`mlms compare` and `mlms report` on real task documents (examples/tasks: segmentation in ONNX
Runtime and PyTorch, text classification): each run's primary metric by name, the relative
difference between runs of the same metric, and "not comparable" between an mIoU and an
accuracy."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.report.compare import compare, load_result
from mlmodelscope.report.render import render

pytestmark = pytest.mark.frameworks

SEG, SEG_TORCH, TEXT = (
    "segmentation-onnxruntime",
    "segmentation-pytorch",
    "text-classification-onnxruntime",
)


@pytest.fixture(scope="module")
def files(
    task_documents: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("task-compare")
    for name, document in task_documents.items():
        (folder / f"{name}.json").write_text(json.dumps(document))
    return {name: folder / f"{name}.json" for name in task_documents}


def primary(document: dict[str, Any]) -> tuple[str, float]:
    return document["task"]["primary"], document["task"]["metrics"][document["task"]["primary"]]


def test_same_task_compares_the_primary_metric(
    files: dict[str, Path], task_documents: dict[str, dict[str, Any]]
) -> None:
    comparison = compare([load_result(files[SEG]), load_result(files[SEG_TORCH])])
    name, reference = primary(task_documents[SEG])
    _, value = primary(task_documents[SEG_TORCH])
    assert name == "miou"
    for row in comparison.rows:
        assert row.metric == "miou" and row.metric_note is None
        assert row.top1 is None and row.top1_rel is None
        if row.run == SEG:
            assert (row.metric_value, row.metric_rel) == (reference, None)
        else:
            assert row.metric_value == value
            assert row.metric_rel == pytest.approx(value / reference - 1)


def test_different_tasks_are_not_comparable(files: dict[str, Path]) -> None:
    comparison = compare([load_result(files[SEG]), load_result(files[TEXT])])
    text_rows = [row for row in comparison.rows if row.run == TEXT]
    assert len(text_rows) == 2
    for row in text_rows:
        assert row.metric == "accuracy" and row.metric_rel is None
        assert row.metric_note == "not comparable: accuracy vs miou"
        assert row.p50_rel is not None  # latency still compares


def test_cli_prints_the_metric_by_name(
    files: dict[str, Path], task_documents: dict[str, dict[str, Any]]
) -> None:
    comparison = compare([load_result(files[n]) for n in (SEG, SEG_TORCH, TEXT)])
    console = Console(width=300, record=True)
    render(console, comparison)
    printed = console.export_text()
    miou = primary(task_documents[SEG])[1]
    accuracy = primary(task_documents[TEXT])[1]
    assert f"miou {miou:.2%}" in printed
    assert f"accuracy {accuracy:.2%}" in printed
    assert "not comparable: accuracy vs miou" in printed
    assert "top-1" not in printed.split("Δ: value / reference")[0]
    data = json.loads(
        CliRunner().invoke(app, ["compare", str(files[SEG]), str(files[TEXT]), "--json"]).stdout
    )
    assert {(r["run"], r["metric"], r["metric_note"]) for r in data["rows"]} == {
        (SEG, "miou", None),
        (TEXT, "accuracy", "not comparable: accuracy vs miou"),
    }


def cells(page: str, run: str, batch: int) -> str:
    start = page.index(f'<tr data-run="{run}" data-scenario="SingleStream" data-batch="{batch}">')
    return page[start : page.index("</tr>", start)]


def test_html_report_shows_the_metric_by_name(
    files: dict[str, Path], task_documents: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    output = tmp_path / "report.html"
    sources = [str(files[n]) for n in (SEG, SEG_TORCH, TEXT)]
    result = CliRunner().invoke(app, ["report", *sources, "--output", str(output)])
    assert result.exit_code == 0, result.output
    page = output.read_text()
    miou = primary(task_documents[SEG])[1]
    torch = primary(task_documents[SEG_TORCH])[1]
    row = cells(page, SEG_TORCH, 1)
    assert f'data-column="metric_value" data-value="{torch!r}">miou {torch:.2%}<' in row
    rel = re.search(r'data-column="metric_rel" data-value="([^"]+)"', row)
    assert rel and float(rel.group(1)) == pytest.approx(torch / miou - 1)
    text = cells(page, TEXT, 8)
    assert 'data-column="metric_rel">not comparable: accuracy vs miou<' in text
    assert "<th>top-1</th>" not in page and "<th>metric</th>" in page
    # the plot shows the reference's metric, and says which run it leaves out
    assert "miou against latency" in page and "miou (%)" in page
    assert f"Another metric, not plotted: {TEXT}." in page
    assert page.count('<circle class="accuracy"') == 4  # two runs, two batch sizes


def test_a_metric_scored_otherwise_is_not_comparable(
    task_documents: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """One metric name scored two ways (a PSNR on the luma after a 4-pixel crop against one
    over RGB) is not compared; the defaults written out compare with a document without them."""
    base = task_documents[SEG]

    def scored(name: str, **scoring: Any) -> Path:
        document = json.loads(json.dumps(base))
        document["task"]["metrics"].update(scoring)
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        return path

    plain = scored("plain")
    defaults = scored("defaults", channels="rgb", crop_border=0)
    luma = scored("luma", channels="y", crop_border=4)
    same = compare([load_result(plain), load_result(defaults)])
    assert {row.metric_note for row in same.rows} == {None}
    assert all(row.metric_rel is not None for row in same.rows if row.run != same.reference)
    other = compare([load_result(plain), load_result(luma)])
    luma_rows = [row for row in other.rows if row.run != other.reference]
    assert luma_rows and all(row.metric_rel is None for row in luma_rows)
    assert {row.metric_note for row in luma_rows} == {
        "not comparable: miou scored channels y, crop_border 4 vs by default"
    }
