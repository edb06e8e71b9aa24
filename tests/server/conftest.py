"""`mlms serve` over real result documents: the digits CNN run by the agent (ONNX Runtime twice,
PyTorch once, and one ONNX Runtime run that fails on a wrong model sha256), recorded in a store
on each dialect (a SQLite file, a fresh database in the session's real PostgreSQL), served
in-process (TestClient) or by the real `mlms serve` command on a free loopback port."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from serve_fixtures import READ_TOKEN, WRITE_TOKEN, ClientFactory, LiveServer

from mlmodelscope.devtools.postgres import PostgreSQL
from mlmodelscope.devtools.telemetry_servers import free_port, wait_until
from mlmodelscope.server.app import ServeSettings, create_app
from mlmodelscope.store import Store, open_store

QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}
RUNS = (
    ("srv-ort-a", "onnxruntime", {}),
    ("srv-ort-b", "onnxruntime", {}),
    ("srv-torch", "pytorch", {}),
    ("srv-bad-hash", "onnxruntime", {"model": {"sha256": "1" * 64}}),
)
"""(evaluation, framework, spec sections): run in this order, so started_at ascends."""


@pytest.fixture(scope="session")
def served_documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """{evaluation name: result document}, as the agent wrote them, in run order."""
    from mlmodelscope.agent.digits import digits_evaluation, ensure_digits_models
    from mlmodelscope.agent.runner import EvaluationError, evaluate
    from mlmodelscope.spec import load_evaluations

    models = ensure_digits_models()
    folder = tmp_path_factory.mktemp("served")
    documents = {}
    for name, framework, sections in RUNS:
        spec = digits_evaluation(
            models, framework, name, scenario={"batchSizes": [1, 8], **QUICK}, **sections
        )
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        [item] = load_evaluations(path)
        try:
            evaluate(item, output=folder / f"{name}.json")
        except EvaluationError:
            assert name == "srv-bad-hash"
        documents[name] = json.loads((folder / f"{name}.json").read_text())
    assert [d["status"] for d in documents.values()] == ["Succeeded"] * 3 + ["Failed"]
    return documents


@pytest.fixture
def docs(served_documents: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A copy per test."""
    return copy.deepcopy(served_documents)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each dialect."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    server: PostgreSQL = request.getfixturevalue("postgresql")
    return server.create_database()


@pytest.fixture
def filled_store(store_url: str, docs: dict[str, dict[str, Any]]) -> Iterator[Store]:
    """The store with every served document recorded."""
    with open_store(store_url) as store:
        for document in docs.values():
            assert store.record(document)
        yield store


@pytest.fixture
def make_client(filled_store: Store) -> Iterator[ClientFactory]:
    """``make_client(read_token=..., write_token=...)``: the app over ``filled_store``,
    in-process."""
    opened: list[TestClient] = []

    def make(**settings: Any) -> TestClient:
        client = TestClient(create_app(ServeSettings(**settings), filled_store))
        client.__enter__()  # runs the lifespan
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def live_server(filled_store: Store, tmp_path: Path) -> Iterator[LiveServer]:
    """`python -m mlmodelscope serve` over ``filled_store``'s database, with a read and a
    write token in files; stopped by its PID."""
    port = free_port()
    store_url = filled_store.engine.url.render_as_string(hide_password=False)
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "read").write_text(READ_TOKEN + "\n")
    (tokens / "write").write_text(WRITE_TOKEN)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MLMS_SERVE_READ_TOKEN", "MLMS_SERVE_WRITE_TOKEN")
    }
    command = [sys.executable, "-m", "mlmodelscope", "serve", "--port", str(port)]
    command += ["--store", store_url]
    command += ["--read-token-file", str(tokens / "read")]
    command += ["--write-token-file", str(tokens / "write")]
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"mlms serve exited: {(tmp_path / 'serve.log').read_text()}")
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return bool(response.status == 200)

    try:
        wait_until(ready, 60, "mlms serve")
        yield LiveServer(url, store_url, READ_TOKEN, WRITE_TOKEN)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture
def pvc_root(digits_models: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$MLMS_PVC_ROOT with the claim the catalog's digits-cnn reads
    (``pvc://mlmodelscope-examples/digits.onnx``) holding the digits build, as
    examples/catalog/README.md says to set it up; the launches' `mlms run` inherits it."""
    root = tmp_path / "pvc"
    root.mkdir()
    (root / "mlmodelscope-examples").symlink_to(digits_models, target_is_directory=True)
    monkeypatch.setenv("MLMS_PVC_ROOT", str(root))
    return root


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"
