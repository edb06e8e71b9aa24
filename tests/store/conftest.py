"""Real result documents (the digits CNN in ONNX Runtime, quick scenario settings), made once
per session, and a store per test on each dialect: a SQLite file and a fresh database in the
session's real PostgreSQL."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlmodelscope.devtools.postgres import PostgreSQL
from mlmodelscope.store import Store, open_store

QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}


def digits_spec(folder: Path, name: str, **sections: Any) -> Path:
    """A quick ONNX Runtime digits spec file (batch sizes 1 and 8)."""
    from mlmodelscope.agent.digits import digits_evaluation, ensure_digits_models

    scenario = {"batchSizes": [1, 8], **QUICK}
    doc = digits_evaluation(
        ensure_digits_models(), "onnxruntime", name, scenario=scenario, **sections
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="session")
def make_spec() -> Callable[..., Path]:
    """:func:`digits_spec`, for test modules (tests/ folders are not packages)."""
    return digits_spec


@pytest.fixture(scope="session")
def real_documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """{"succeeded": ..., "failed": ...}: documents the agent wrote, read back from disk. The
    failed one pins a wrong model sha256."""
    from mlmodelscope.agent.runner import EvaluationError, evaluate
    from mlmodelscope.spec import load_evaluations

    folder = tmp_path_factory.mktemp("documents")
    [good] = load_evaluations(digits_spec(folder, "digits-ort"))
    evaluate(good, output=folder / "succeeded.json")
    [bad] = load_evaluations(digits_spec(folder, "digits-bad-hash", model={"sha256": "1" * 64}))
    with pytest.raises(EvaluationError):
        evaluate(bad, output=folder / "failed.json")
    return {
        kind: json.loads((folder / f"{kind}.json").read_text()) for kind in ("succeeded", "failed")
    }


@pytest.fixture
def documents(real_documents: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A copy per test (tests edit them to make more runs)."""
    return copy.deepcopy(real_documents)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each dialect."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    server: PostgreSQL = request.getfixturevalue("postgresql")
    return server.create_database()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with open_store(store_url) as opened:
        yield opened


@pytest.fixture(scope="session")
def limited_document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A Succeeded run of the same model on the first 100 samples of the digits test split
    (``dataset.limit: 100``), as the agent wrote it."""
    from mlmodelscope.agent.runner import evaluate
    from mlmodelscope.spec import load_evaluations

    folder = tmp_path_factory.mktemp("limited")
    [loaded] = load_evaluations(
        digits_spec(folder, "digits-ort-100", dataset={"type": "digits", "limit": 100})
    )
    evaluate(loaded, output=folder / "limited.json")
    document: dict[str, Any] = json.loads((folder / "limited.json").read_text())
    return document
