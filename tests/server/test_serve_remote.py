"""`mlms compare --server` and `mlms report --server` against the real `mlms serve` process
(uvicorn on a loopback port), on SQLite and PostgreSQL: the same numbers as from the local
documents, and errors that say what to do."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from serve_fixtures import LiveServer, bearer
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.devtools.telemetry_servers import free_port
from mlmodelscope.report.remote import RemoteError, RemoteRuns

pytestmark = pytest.mark.frameworks

Docs = dict[str, dict[str, Any]]
NAMES = ("srv-ort-a", "srv-torch", "srv-ort-b")


def write_files(docs: Docs, folder: Path) -> list[str]:
    folder.mkdir(exist_ok=True)
    paths = []
    for name in NAMES:
        (folder / f"{name}.json").write_text(json.dumps(docs[name]))
        paths.append(str(folder / f"{name}.json"))
    return paths


def mlms(*args: str, token: str | None = None) -> Any:
    env = {"MLMS_TOKEN": token} if token is not None else {"MLMS_TOKEN": ""}
    return CliRunner().invoke(app, list(args), env={**env, "MLMS_SERVER": None})


def numbers(comparison: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on where the documents came from: everything but each run's
    ``source`` (differences are sorted by key, whatever order the store kept them in)."""
    for run in comparison["runs"]:
        run.pop("source")
    return comparison


def test_compare_and_report_from_the_server_match_the_local_documents(
    live_server: LiveServer, docs: Docs, tmp_path: Path
) -> None:
    ids = [docs[name]["run_id"] for name in NAMES]
    files = write_files(docs, tmp_path / "local")
    server = ["--server", live_server.url]

    local = mlms("compare", *files, "--json")
    remote = mlms("compare", *ids, *server, "--json", token=live_server.read_token)
    assert local.exit_code == 0, local.output
    assert remote.exit_code == 0, remote.output
    remote_json = json.loads(remote.output)
    assert [run["source"] for run in remote_json["runs"]] == [f"store:{i}" for i in ids]
    assert numbers(remote_json) == numbers(json.loads(local.output))

    mixed = mlms("compare", files[0], ids[1], *server, "--json", token=live_server.write_token)
    assert mixed.exit_code == 0, mixed.output
    assert [run["run_id"] for run in json.loads(mixed.output)["runs"]] == ids[:2]

    local_page, remote_page = tmp_path / "local.html", tmp_path / "remote.html"
    made = mlms("report", *files, "-o", str(local_page))
    assert made.exit_code == 0, made.output
    made = mlms("report", *ids, *server, "-o", str(remote_page), token=live_server.read_token)
    assert made.exit_code == 0, made.output
    assert "(3 runs)" in made.output
    cells = re.compile(r'data-column="([^"]+)"[^>]*data-value="([^"]*)"')
    remote_cells = cells.findall(remote_page.read_text())
    assert remote_cells and remote_cells == cells.findall(local_page.read_text())
    for name in NAMES:
        p50 = docs[name]["results"][0]["latency_ms"]["p50"]
        assert ("p50_ms", repr(p50)) in remote_cells or ("p50_ms", str(p50)) in remote_cells


def test_remote_errors_name_what_to_fix(
    live_server: LiveServer, docs: Docs, tmp_path: Path
) -> None:
    ids = [docs[name]["run_id"] for name in NAMES[:2]]
    server = ["--server", live_server.url]

    no_token = mlms("compare", *ids, *server)
    assert no_token.exit_code == 1
    assert "answered 401" in no_token.output and "set $MLMS_TOKEN" in no_token.output
    wrong = mlms("compare", *ids, *server, token="guess")
    assert wrong.exit_code == 1
    assert "refused the token in $MLMS_TOKEN" in wrong.output
    unknown = str(uuid.uuid4())
    missing = mlms(
        "report",
        ids[0],
        unknown,
        *server,
        "-o",
        str(tmp_path / "r.html"),
        token=live_server.read_token,
    )
    assert missing.exit_code == 1 and unknown in missing.output
    assert not (tmp_path / "r.html").exists()
    found = mlms("compare", ids[0], unknown, *server, token=live_server.read_token)
    assert found.exit_code == 1
    assert f"{unknown}: no such file, folder or run in the results store" in found.output

    nobody = f"http://127.0.0.1:{free_port()}"
    down = mlms("compare", *ids, "--server", nobody, token=live_server.read_token)
    assert down.exit_code == 1 and f"cannot reach mlms serve at {nobody}" in down.output
    bad_url = mlms("compare", *ids, "--server", "ftp://example", token="t")
    assert bad_url.exit_code == 1 and "not a server URL" in bad_url.output


def test_the_client_reads_documents_and_the_real_server_takes_writes(
    live_server: LiveServer, docs: Docs
) -> None:
    client = RemoteRuns(live_server.url, live_server.read_token)
    for document in docs.values():
        assert client.get(document["run_id"]) == document
    assert client.get(str(uuid.uuid4())) is None
    assert client.get("no/such run") is None
    with pytest.raises(RemoteError, match="refused the token in"):
        RemoteRuns(live_server.url, "guess").get(docs["srv-torch"]["run_id"])

    document = docs["srv-torch"]
    document["run_id"] = str(uuid.uuid4())
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/runs",
        data=json.dumps(document).encode(),
        headers={**bearer(live_server.write_token), "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
    assert client.get(document["run_id"]) == document
    request.add_header("Authorization", f"Bearer {live_server.read_token}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403


def test_a_sweeps_runs_from_the_server(live_server: LiveServer, docs: Docs) -> None:
    """`--sweep NAME --server URL`: the server's runs labelled with the sweep, oldest first."""
    sweep = f"sweep-{uuid.uuid4().hex[:8]}"
    posted = []
    for name in ("srv-ort-a", "srv-torch"):
        document = json.loads(json.dumps(docs[name]))
        document["run_id"] = str(uuid.uuid4())
        document["evaluation"]["labels"] = {"mlmodelscope.io/sweep": sweep}
        request = urllib.request.Request(
            f"{live_server.url}/api/v1/runs",
            data=json.dumps(document).encode(),
            headers={**bearer(live_server.write_token), "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201
        posted.append(document)
    client = RemoteRuns(live_server.url, live_server.read_token)
    newest_first = sorted(posted, key=lambda d: d["started_at"], reverse=True)
    assert client.sweep_run_ids(sweep, 10) == [d["run_id"] for d in newest_first]
    result = mlms("compare", "--sweep", sweep, "--server", live_server.url, "--json",
                  token=live_server.read_token)  # fmt: skip
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [r["run_id"] for r in runs] == [d["run_id"] for d in reversed(newest_first)]
    missing = mlms("compare", "--sweep", "no-such-sweep", "--server", live_server.url,
                   token=live_server.read_token)  # fmt: skip
    assert missing.exit_code == 1 and "no runs labelled" in missing.output
