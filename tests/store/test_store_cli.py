"""`mlms run` records every run it produced in the results store (and a broken store costs a
warning, never the result); `mlms runs` lists what was recorded."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.store import open_store

pytestmark = pytest.mark.frameworks


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
