"""`mlms run` records every run it produced in the results store (and a broken store costs a
warning, never the result); `mlms runs` lists what was recorded, each run's dataset included,
and filters by it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from mlmodelscope import cli
from mlmodelscope.cli import app
from mlmodelscope.store import open_store

pytestmark = pytest.mark.frameworks

RESULTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "results.md"


@pytest.fixture(scope="module")
def two_evaluations(
    tmp_path_factory: pytest.TempPathFactory, make_spec: Callable[..., Path]
) -> Path:
    """A spec file with a good evaluation and one that fails (wrong model sha256)."""
    folder = tmp_path_factory.mktemp("specs")
    good = yaml.safe_load(make_spec(folder, "cli-ort").read_text())
    bad = yaml.safe_load(make_spec(folder, "cli-bad-hash", model={"sha256": "2" * 64}).read_text())
    path = folder / "both.yaml"
    path.write_text(yaml.safe_dump_all([good, bad]))
    return path


def test_run_records_every_run_and_runs_lists_them(
    tmp_path: Path, two_evaluations: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLMS_STORE_URL", raising=False)
    db = tmp_path / "runs.db"
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["run", str(two_evaluations), "-o", str(out), "--store", str(db)]
    )
    assert result.exit_code == 1, result.output  # one evaluation failed
    assert result.output.count(f"recorded in sqlite:///{db}") == 2
    documents = [json.loads((out / f"{n}.json").read_text()) for n in ("cli-ort", "cli-bad-hash")]
    with open_store(str(db)) as store:
        for doc in documents:
            assert store.get(doc["run_id"]) == doc
        assert {s.status for s in store.list_runs()} == {"Succeeded", "Failed"}

    listed = CliRunner().invoke(app, ["runs", "--store", f"sqlite:///{db}"])
    assert listed.exit_code == 0, listed.output
    for doc in documents:
        assert doc["run_id"][:8] in listed.output
    assert "cli-ort" in listed.output and "cli-bad-hash" in listed.output
    assert "Succeeded VALID" in listed.output or "Succeeded INVALID" in listed.output
    assert "Failed" in listed.output

    only = CliRunner().invoke(app, ["runs", "--store", str(db), "--evaluation", "cli-ort"])
    assert "cli-ort" in only.output and "cli-bad-hash" not in only.output
    none = CliRunner().invoke(app, ["runs", "--store", str(db), "--model", "nope"])
    assert none.exit_code == 0 and "no recorded run matches these filters" in none.output


def test_the_default_store_and_no_store(
    tmp_path: Path, two_evaluations: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLMS_STORE_URL", raising=False)
    monkeypatch.setenv("MLMS_DATA_DIR", str(tmp_path / "data"))
    args = ["run", str(two_evaluations), "-o", str(tmp_path / "out"), "--only", "cli-ort"]
    skipped = CliRunner().invoke(app, [*args, "--no-store"])
    assert skipped.exit_code == 0, skipped.output
    assert "recorded" not in skipped.output
    assert not (tmp_path / "data").exists()
    recorded = CliRunner().invoke(app, args)
    assert recorded.exit_code == 0, recorded.output
    assert f"recorded in sqlite:///{tmp_path}/data/runs.db" in recorded.output


def test_a_broken_store_never_costs_the_result(tmp_path: Path, two_evaluations: Path) -> None:
    (tmp_path / "not-a-folder").write_text("")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "run",
            str(two_evaluations),
            "-o",
            str(out),
            "--only",
            "cli-ort",
            "--store",
            str(tmp_path / "not-a-folder" / "runs.db"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "not recorded in the results store" in result.output
    assert json.loads((out / "cli-ort.json").read_text())["status"] == "Succeeded"


def test_runs_shows_each_runs_dataset_and_filters_by_it(
    tmp_path: Path,
    real_documents: dict[str, dict[str, Any]],
    limited_document: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real runs on the whole digits test split and on its first 100 samples (and a Failed
    run, which never loaded its data): `mlms runs` shows each one's dataset as the store
    names it, and ``--dataset`` takes that name, as docs/results.md says."""
    documents = {**real_documents, "limited": limited_document}
    db = tmp_path / "runs.db"
    with open_store(str(db)) as store:
        for document in documents.values():
            store.record(document)
    whole = "{name} ({samples} samples)".format(**real_documents["succeeded"]["dataset"])
    first_100 = "{name} ({samples} samples)".format(**limited_document["dataset"])
    assert (whole, first_100) == ("digits/test (360 samples)", "digits/test (100 samples)")
    assert f"`--dataset` (as the API and the dashboard show it, e.g. `'{whole}'`)" in " ".join(
        RESULTS_DOC.read_text().split()
    )
    monkeypatch.setattr(cli, "console", Console(width=250))  # a terminal: no cell wraps

    def row(output: str, document: dict[str, Any]) -> str:
        [line] = [line for line in output.splitlines() if document["run_id"][:8] in line]
        return line

    listed = CliRunner().invoke(app, ["runs", "--store", str(db)])
    assert listed.exit_code == 0, listed.output
    header = next(line for line in listed.output.splitlines() if "started (UTC)" in line)
    assert header.index("model") < header.index("dataset") < header.index("framework")
    assert whole in row(listed.output, documents["succeeded"])
    assert first_100 in row(listed.output, documents["limited"])
    failed = row(listed.output, documents["failed"])
    assert "Failed" in failed and "samples)" not in failed  # never loaded its dataset

    only = CliRunner().invoke(app, ["runs", "--store", str(db), "--dataset", first_100])
    assert only.exit_code == 0, only.output
    shown = [d for d in documents.values() if d["run_id"][:8] in only.output]
    assert shown == [documents["limited"]]
    none = CliRunner().invoke(
        app, ["runs", "--store", str(db), "--dataset", "digits/test (7 samples)"]
    )
    assert none.exit_code == 0 and "no recorded run matches these filters" in none.output
