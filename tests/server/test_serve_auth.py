"""Bearer tokens of `mlms serve` (in-process), and `mlms serve` refusing to start where it
would serve open reads to the network or is missing its extra (uvicorn itself replaced)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import APIRouter, Depends
from serve_fixtures import ClientFactory, bearer
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.server.auth import COOKIE, require_read

pytestmark = pytest.mark.frameworks

READ, WRITE = "r-token", "w-token"


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """Tokens do not depend on the database: SQLite only here."""
    return f"sqlite:///{tmp_path / 'runs.db'}"


def new_document(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    document = docs["srv-ort-a"]
    document["run_id"] = str(uuid.uuid4())
    return document


def test_reads_need_the_read_or_the_write_token(make_client: ClientFactory) -> None:
    client = make_client(read_token=READ, write_token=WRITE)
    for path in ("/api/v1/runs", "/api/v1/runs.csv", "/api/v1/leaderboard"):
        missing = client.get(path)
        assert missing.status_code == 401
        assert missing.headers["WWW-Authenticate"].startswith("Bearer")
        assert "needs a bearer token" in missing.json()["detail"]
        wrong = client.get(path, headers=bearer("guess"))
        assert wrong.status_code == 401
        assert 'error="invalid_token"' in wrong.headers["WWW-Authenticate"]
        assert client.get(path, headers={"Authorization": "Basic cjpy"}).status_code == 401
        assert client.get(path, headers=bearer(READ)).status_code == 200
        assert client.get(path, headers=bearer(WRITE)).status_code == 200
    for probe in ("/healthz", "/readyz"):
        assert client.get(probe).status_code == 200


def test_the_dashboard_cookie_reads_the_api_but_never_writes(
    make_client: ClientFactory, docs: dict[str, dict[str, Any]]
) -> None:
    """A browser logged in to the dashboard follows the run page's JSON link; a page elsewhere
    cannot make that browser write, since writes take the Authorization header alone."""
    client = make_client(read_token=READ, write_token=WRITE)
    run_id = docs["srv-ort-a"]["run_id"]
    client.cookies.set(COOKIE, "guess")
    assert client.get(f"/api/v1/runs/{run_id}").status_code == 401
    for token in (READ, WRITE):
        client.cookies.set(COOKIE, token)
        assert client.get(f"/api/v1/runs/{run_id}").json()["run_id"] == run_id
    assert client.post("/api/v1/runs", json=new_document(docs)).status_code == 401


def test_writes_need_the_write_token(
    make_client: ClientFactory, docs: dict[str, dict[str, Any]]
) -> None:
    client = make_client(read_token=READ, write_token=WRITE)
    document = new_document(docs)
    missing = client.post("/api/v1/runs", json=document)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.post("/api/v1/runs", json=document, headers=bearer("guess")).status_code == 401
    read_only = client.post("/api/v1/runs", json=document, headers=bearer(READ))
    assert read_only.status_code == 403
    assert "may only read" in read_only.json()["detail"]
    written = client.post("/api/v1/runs", json=document, headers=bearer(WRITE))
    assert written.status_code == 201, written.text
    read_back = client.get(f"/api/v1/runs/{document['run_id']}", headers=bearer(READ))
    assert read_back.json() == document


def test_without_a_write_token_writes_are_refused_with_how_to_enable_them(
    make_client: ClientFactory, docs: dict[str, dict[str, Any]]
) -> None:
    client = make_client()  # no tokens at all: loopback reads
    assert client.get("/api/v1/runs").status_code == 200
    refused = client.post("/api/v1/runs", json=new_document(docs), headers=bearer("anything"))
    assert refused.status_code in (401, 403)
    refused = client.post("/api/v1/runs", json=new_document(docs))
    assert refused.status_code == 403
    assert "--write-token-file" in refused.json()["detail"]
    assert "MLMS_SERVE_WRITE_TOKEN" in refused.json()["detail"]


def test_a_write_token_alone_leaves_reads_open(
    make_client: ClientFactory, docs: dict[str, dict[str, Any]]
) -> None:
    client = make_client(write_token=WRITE)
    assert client.get("/api/v1/runs").status_code == 200
    assert client.post("/api/v1/runs", json=new_document(docs)).status_code == 401
    written = client.post("/api/v1/runs", json=new_document(docs), headers=bearer(WRITE))
    assert written.status_code == 201, written.text


def test_require_read_guards_any_router(make_client: ClientFactory) -> None:
    """What the dashboard adds to its own routes."""
    client = make_client(read_token=READ)
    extra = APIRouter(dependencies=[Depends(require_read)])

    @extra.get("/guarded")
    def guarded() -> dict[str, str]:
        return {"ok": "yes"}

    client.app.include_router(extra)  # type: ignore[attr-defined]
    assert client.get("/guarded").status_code == 401
    assert client.get("/guarded", headers=bearer(READ)).json() == {"ok": "yes"}


# ------------------------------------------------------------------------------ mlms serve


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    """uvicorn.run replaced: what `mlms serve` would have served, and where."""
    calls: list[dict[str, Any]] = []

    def run(asgi: Any, **kwargs: Any) -> None:
        calls.append({"settings": asgi.state.settings, **kwargs})

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.delenv("MLMS_SERVE_READ_TOKEN", raising=False)
    monkeypatch.delenv("MLMS_SERVE_WRITE_TOKEN", raising=False)
    monkeypatch.setenv("MLMS_STORE_URL", f"sqlite:///{tmp_path / 'served.db'}")
    return calls


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "example.com"])
def test_serve_refuses_a_non_loopback_address_without_a_read_token(
    started: list[dict[str, Any]], host: str
) -> None:
    result = CliRunner().invoke(app, ["serve", "--host", host])
    assert result.exit_code == 2, result.output
    assert f"--host {host} is not a loopback address" in result.output
    assert "--read-token-file" in result.output and "MLMS_SERVE_READ_TOKEN" in result.output
    assert started == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_serve_on_loopback_needs_no_token(started: list[dict[str, Any]], host: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--host", host, "--port", "9999"])
    assert result.exit_code == 0, result.output
    [call] = started
    assert call["host"] == host and call["port"] == 9999
    assert call["settings"].read_token is None and call["settings"].write_token is None
    assert "reads open (loopback only), writes disabled" in result.output


def test_serve_reads_tokens_from_files_and_the_environment(
    started: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "read").write_text("  from-file\n")
    monkeypatch.setenv("MLMS_SERVE_WRITE_TOKEN", "from-env")
    result = CliRunner().invoke(
        app,
        ["serve", "--host", "0.0.0.0", "--read-token-file", str(tmp_path / "read")],
        env={"MLMS_SERVE_WRITE_TOKEN": "from-env"},
    )
    assert result.exit_code == 0, result.output
    [call] = started
    assert call["host"] == "0.0.0.0" and call["port"] == 8080
    settings = call["settings"]
    assert (settings.read_token, settings.write_token) == ("from-file", "from-env")
    assert settings.store_url == f"sqlite:///{tmp_path / 'served.db'}"


def test_serve_names_every_bad_setting(started: list[dict[str, Any]], tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "same").write_text("same")
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--read-token-file",
            str(tmp_path / "same"),
            "--write-token-file",
            str(tmp_path / "same"),
            "--jaeger-url",
            "jaeger:16686",
        ],
    )
    assert result.exit_code == 2
    assert "the read token and the write token must differ" in result.output
    assert "--jaeger-url jaeger:16686: not an http(s) URL" in result.output
    empty = CliRunner().invoke(app, ["serve", "--write-token-file", str(tmp_path / "empty")])
    assert empty.exit_code == 2 and "the token file is empty" in empty.output
    missing = CliRunner().invoke(app, ["serve", "--read-token-file", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "cannot read the token" in missing.output
    assert started == []


def test_serve_without_its_extra_says_what_to_install(
    started: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn -> ModuleNotFoundError
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2
    assert "install mlmodelscope[serve]" in result.output.replace("'", "")
    assert started == []


def test_serve_takes_a_catalog_and_launch_workers(
    started: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = Path(__file__).parents[2] / "examples" / "catalog"
    monkeypatch.chdir(catalog.parent)
    result = CliRunner().invoke(
        app, ["serve", "--catalog", "catalog", "--launch-workers", "3", "--port", "9999"]
    )
    assert result.exit_code == 0, result.output
    [call] = started
    assert call["settings"].catalog == (str(catalog.resolve()),)  # absolute: workers' cwd differs
    assert call["settings"].launch_workers == 3
    missing = CliRunner().invoke(app, ["serve", "--catalog", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert f"--catalog {tmp_path / 'nope'}: no such file or folder" in missing.output
    negative = CliRunner().invoke(app, ["serve", "--launch-workers", "-1"])
    assert negative.exit_code == 2
