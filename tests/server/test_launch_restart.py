"""A real `mlms serve --launch-workers 2` runs ten digits launches, each once (issue 32); one
killed with SIGKILL while it runs them, then started again on the same SQLite store: every
launch ends ``succeeded`` or ``interrupted``, the ones still queued run after the restart,
and none runs twice (a launch started before the kill keeps its start and its run, the store
holds one run per succeeded launch).

Each launch's `mlms run` process runs in a session of its own (so a cancel can stop its whole
process group), which a SIGKILL of the server's process group does not reach; it is started
with a parent-death signal instead, so the kernel kills it with the server: none runs on
unrecorded (asserted)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from launch_fixtures import CATALOG, QUICK, WRITE
from processes import Agent, agents_of, alive
from serve_fixtures import READ_TOKEN, WRITE_TOKEN, bearer

from mlmodelscope.devtools.telemetry_servers import free_port, wait_until
from mlmodelscope.server.launch_queue import LaunchQueue, LaunchRow, LaunchState
from mlmodelscope.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.frameworks]

LAUNCHES: Final = 10


def _form(index: int) -> dict[str, Any]:
    """The catalog's digits CNN in ONNX Runtime, batch size 1: a run of a few seconds."""
    return {
        "model": "digits-cnn",
        "frameworks": ["onnxruntime"],
        "batch_sizes": [1],
        "scenario_settings": QUICK,
        "name": f"restart-{index}",
    }


@dataclass(frozen=True)
class Served:
    process: subprocess.Popen[bytes]
    api: httpx.Client


@contextmanager
def mlms_serve(store_url: str, tmp_path: Path, log_name: str) -> Iterator[Served]:
    """`python -m mlmodelscope serve --launch-workers 2` over ``store_url`` with the example
    catalog and a read and a write token, in a session of its own (its process group is the
    server and nothing else); temporary folders under ``tmp_path/tmp``. Killed at the end."""
    port = free_port()
    tokens = tmp_path / "tokens"
    tokens.mkdir(exist_ok=True)
    (tokens / "read").write_text(READ_TOKEN)
    (tokens / "write").write_text(WRITE_TOKEN)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLMS_SERVE_")}
    env["TMPDIR"] = str(tmp_path / "tmp")
    command = [sys.executable, "-m", "mlmodelscope", "serve", "--port", str(port)]
    command += ["--store", store_url, "--catalog", str(CATALOG), "--launch-workers", "2"]
    command += ["--read-token-file", str(tokens / "read")]
    command += ["--write-token-file", str(tokens / "write")]
    log_path = tmp_path / log_name
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"mlms serve exited: {log_path.read_text()}")
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return bool(response.status == 200)

    try:
        wait_until(ready, 60, "mlms serve")
        with httpx.Client(base_url=url, headers=bearer(READ_TOKEN), timeout=10) as api:
            yield Served(process, api)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def launches(api: httpx.Client) -> dict[str, dict[str, Any]]:
    answer = api.get("/api/v1/launches", params={"limit": 100})
    answer.raise_for_status()
    return {item["launch_id"]: item for item in answer.json()["items"]}


def counts(items: dict[str, dict[str, Any]]) -> dict[str, int]:
    found: dict[str, int] = {}
    for item in items.values():
        found[item["state"]] = found.get(item["state"], 0) + 1
    return found


def stored(store_url: str) -> dict[str, LaunchRow]:
    """The launches as the store holds them (no server needed)."""
    with open_store(store_url) as store:
        _, rows = LaunchQueue(store).page(limit=100)
    return {row.launch_id: row for row in rows}


def test_ten_launches_on_two_workers_all_finish_once(tmp_path: Path, pvc_root: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    with mlms_serve(store_url, tmp_path, "serve.log") as served:
        for index in range(LAUNCHES):
            answer = served.api.post("/api/v1/launches", json=_form(index), headers=WRITE)
            assert answer.status_code == 202, answer.text
        most_at_once = 0

        def settled() -> bool:
            nonlocal most_at_once
            seen = counts(launches(served.api))
            most_at_once = max(most_at_once, seen.get("running", 0))
            return seen.get("succeeded", 0) + seen.get("failed", 0) == LAUNCHES

        wait_until(settled, 180, "ten launches ended", 0.1)
        after = launches(served.api)
        runs = served.api.get("/api/v1/runs", params={"limit": 100}).json()
    assert {item["state"] for item in after.values()} == {"succeeded"}
    assert 1 <= most_at_once <= 2
    assert runs["total"] == LAUNCHES
    assert {run["run_id"] for run in runs["items"]} == {i["run_id"] for i in after.values()}


def test_a_killed_server_interrupts_its_running_launches_and_runs_the_rest_once(
    tmp_path: Path, pvc_root: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'runs.db'}"
    orphans: list[Agent] = []
    try:
        with mlms_serve(store_url, tmp_path, "serve-1.log") as first:
            for index in range(LAUNCHES):
                answer = first.api.post("/api/v1/launches", json=_form(index), headers=WRITE)
                assert answer.status_code == 202, answer.text

            def mid_run() -> bool:
                seen = counts(launches(first.api))
                done = seen.get("succeeded", 0) >= 1 and seen.get("queued", 0) >= 1
                return done and seen.get("running", 0) >= 1 and bool(agents_of(first.process.pid))

            wait_until(mid_run, 60, "a launch succeeded, one running, one queued", 0.05)
            agents = agents_of(first.process.pid)
            os.killpg(first.process.pid, signal.SIGKILL)
            first.process.wait()
            killed_at = time.monotonic()
            orphans = [agent for agent in agents if alive(agent.pid)]
        before = stored(store_url)
        assert len(before) == LAUNCHES
        by_state = {s: {i for i, r in before.items() if r.state is s} for s in LaunchState}
        assert by_state[LaunchState.SUCCEEDED] and by_state[LaunchState.RUNNING]
        assert by_state[LaunchState.QUEUED]
        assert len(by_state[LaunchState.RUNNING]) <= 2
        running = {before[i].evaluation for i in by_state[LaunchState.RUNNING]}
        # each `mlms run` has a session of its own, out of reach of the group's SIGKILL: its
        # parent-death signal ends it with the server
        assert agents and {agent.evaluation for agent in agents} <= running | {
            before[i].evaluation for i in by_state[LaunchState.SUCCEEDED]
        }
        for orphan in orphans:
            wait_until(lambda o=orphan: not alive(o.pid), 5, f"`mlms run` {orphan.pid}", 0.05)

        with mlms_serve(store_url, tmp_path, "serve-2.log") as second:

            def settled() -> bool:
                seen = counts(launches(second.api))
                return not seen.get("queued") and not seen.get("running")

            wait_until(settled, 120, "every launch ended after the restart", 0.2)
            after = launches(second.api)
            runs = second.api.get("/api/v1/runs", params={"limit": 100}).json()
        settled_s = time.monotonic() - killed_at

        assert {item["state"] for item in after.values()} <= {"succeeded", "interrupted"}
        for launch_id, row in before.items():
            item = after[launch_id]
            if row.state is LaunchState.SUCCEEDED:  # kept, never run again
                assert item["state"] == "succeeded" and item["run_id"] == row.run_id
                assert _when(item["started_at"]) == row.started_at
            elif row.state is LaunchState.RUNNING:  # interrupted, not run again
                assert item["state"] == "interrupted", item
                assert "not run again" in item["message"]
                assert item["run_id"] is None
                assert _when(item["started_at"]) == row.started_at
            else:  # queued at the kill: run once by the restarted server
                assert row.state is LaunchState.QUEUED and row.started_at is None
                assert item["state"] == "succeeded", item["message"]
        succeeded = {i["run_id"]: i for i in after.values() if i["state"] == "succeeded"}
        assert None not in succeeded
        assert len(succeeded) == len(by_state[LaunchState.SUCCEEDED] | by_state[LaunchState.QUEUED])
        assert runs["total"] == len(succeeded)
        recorded = {run["run_id"]: run for run in runs["items"]}
        assert set(recorded) == set(succeeded)
        for run_id, item in succeeded.items():
            assert recorded[run_id]["evaluation"] == item["evaluation"]

        print(f"every launch ended {settled_s:.1f} s after the kill")
    finally:
        for orphan in orphans:
            with suppress(ProcessLookupError):
                os.killpg(orphan.pid, signal.SIGKILL)


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)
