"""The operator records every finished run in the results store: against the real control
plane and a real PostgreSQL, with the database up, and with it stopped during the run.

Each test runs its own `mlms operator --standalone` subprocess (the fixtures of
test_operator_cluster.py) with ``MLMS_OPERATOR_STORE_URL`` pointing at a fresh database; the
digits evaluations really run on the exec node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_evaluations import apply, evaluation, events, events_with, get, wait_phase
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, configmap_path, evaluation_path
from mlmodelscope.controller import recording
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.devtools.postgres import PostgreSQL
from mlmodelscope.spec.status import BatchResult
from mlmodelscope.store import open_store

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

RETRY_SECONDS = 2


def record_of(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return dict((get(kube, namespace, name).get("status") or {}).get("record") or {})


def wait_record(
    kube: Kube, namespace: str, name: str, state: str, timeout: float = 60.0
) -> dict[str, Any]:
    wait_for(
        f"{namespace}/{name} status.record.state {state}",
        lambda: record_of(kube, namespace, name).get("state") == state,
        timeout,
    )
    return get(kube, namespace, name)


def outboxes(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return kube.list(configmap_path(namespace), recording.OUTBOX_SELECTOR)


def same_numbers(document: dict[str, Any], status: dict[str, Any]) -> None:
    """The stored rows are the status rows (which the agent's summary rounds to 6 digits)."""
    stored = [BatchResult.model_validate(r) for r in document["results"]]
    shown = [BatchResult.model_validate(r) for r in status["results"]]
    assert [r.batch_size for r in stored] == [r.batch_size for r in shown]
    for a, b in zip(stored, shown, strict=True):
        numbers = (a.latency_ms.p50, a.latency_ms.p99, a.throughput, a.top1)
        assert numbers == pytest.approx(
            (b.latency_ms.p50, b.latency_ms.p99, b.throughput, b.top1), rel=1e-5
        )
        assert a.valid == b.valid


def check_served(store_url: str, run_id: str, name: str) -> None:
    """The run through `mlms serve`'s API and dashboard (the ``serve`` extra's app)."""
    from fastapi.testclient import TestClient

    from mlmodelscope.server.app import ServeSettings, create_app

    with TestClient(create_app(ServeSettings(store_url=store_url))) as client:
        answer = client.get(f"/api/v1/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["run_id"] == run_id
        page = client.get("/")
        assert page.status_code == 200, page.text
        assert name in page.text


def test_a_finished_run_is_recorded_and_outlives_its_evaluation(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    postgresql: PostgreSQL,
) -> None:
    store_url = postgresql.create_database()
    start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, MLMS_OPERATOR_STORE_URL=store_url)
    apply(cluster, namespace, evaluation("digits", digits_onnx))
    wait_phase(kube, namespace, "digits", ("Succeeded", "Failed"))
    ev = wait_record(kube, namespace, "digits", "Recorded", timeout=30)
    status = ev["status"]
    assert status["phase"] == "Succeeded", status.get("message")
    run_id = status["runId"]
    record = status["record"]
    assert record["runId"] == run_id and record["attempts"] == 1 and record["recordedAt"]
    with open_store(store_url) as store:
        document = store.get(run_id)
        assert document is not None and document["run_id"] == run_id
        same_numbers(document, status)
        [run] = store.list_runs(evaluation="digits", namespace=namespace)
        assert run.run_id == run_id and run.status == "Succeeded"
        assert run.top1 == pytest.approx(status["summary"]["top1"], rel=1e-5)
        assert [r.latency_ms.p50 for r in run.results] == pytest.approx(
            [r["latencyMs"]["p50"] for r in status["results"]], rel=1e-5
        )
    results = kube.get(configmap_path(namespace, "digits-results"))
    assert json.loads(results["data"]["result.json"]) == document
    assert not outboxes(kube, namespace)
    reasons = {e["reason"] for e in events(kube, namespace, "digits")}
    assert "RecordPending" not in reasons and "NotRecorded" not in reasons
    check_served(store_url, run_id, "digits")

    cluster.kubectl("delete", "meval", "digits", "-n", namespace, "--wait=true")
    assert kube.get_or_none(evaluation_path(namespace, "digits")) is None
    with open_store(store_url) as store:
        assert store.get(run_id) == document
        assert len(store.list_runs(namespace=namespace)) == 1


def test_a_run_that_ends_while_the_database_is_down_is_recorded_when_it_is_back(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    private_postgresql: PostgreSQL,
) -> None:
    """Two runs end with the database stopped: both wait in outbox ConfigMaps (status Pending);
    one evaluation is deleted meanwhile. Once the database is back, both are recorded within
    the retry interval, the outboxes are gone, and the remaining evaluation says Recorded."""
    server = private_postgresql
    store_url = server.create_database()
    server.stop()
    op = start_operator(
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac,
        MLMS_OPERATOR_STORE_URL=store_url,
        MLMS_OPERATOR_RECORD_RETRY_SECONDS=str(RETRY_SECONDS),
    )
    for name in ("digits", "digits-deleted"):
        apply(cluster, namespace, evaluation(name, digits_onnx))
    run_ids = {}
    for name in ("digits", "digits-deleted"):
        wait_phase(kube, namespace, name, ("Succeeded", "Failed"))
        status = wait_record(kube, namespace, name, "Pending", timeout=30)["status"]
        assert status["phase"] == "Succeeded", status.get("message")
        run_ids[name] = status["runId"]
        record = status["record"]
        assert record["runId"] == status["runId"] and "recordedAt" not in record
        assert f"mlmodelscope-unrecorded-{status['runId']}" in record["message"]
        results = kube.get(configmap_path(namespace, f"{name}-results"))
        outbox = kube.get(configmap_path(namespace, recording.outbox_name(status["runId"])))
        assert outbox["data"]["result.json"] == results["data"]["result.json"]
        assert not outbox["metadata"].get("ownerReferences")
        warnings = [
            e
            for e in events_with(kube, namespace, name, "RecordPending")
            if e["reason"] == "RecordPending"
        ]
        assert warnings and warnings[0]["type"] == "Warning"
    assert len(outboxes(kube, namespace)) == 2
    # Pending survives a retry pass with the database still down, and counts the attempts.
    wait_for(
        "a failed retry to be counted",
        lambda: record_of(kube, namespace, "digits").get("attempts", 0) >= 2,
        RETRY_SECONDS * 5,
    )

    cluster.kubectl("delete", "meval", "digits-deleted", "-n", namespace, "--wait=true")
    wait_for(
        "the results ConfigMap to be garbage-collected",
        lambda: kube.get_or_none(configmap_path(namespace, "digits-deleted-results")) is None,
        60,
    )
    assert len(outboxes(kube, namespace)) == 2  # the deleted evaluation's result is kept

    server.start()
    ev = wait_record(kube, namespace, "digits", "Recorded", timeout=RETRY_SECONDS * 5)
    wait_for("the outboxes to be deleted", lambda: not outboxes(kube, namespace), RETRY_SECONDS * 5)
    record = ev["status"]["record"]
    assert record["runId"] == run_ids["digits"] and record["recordedAt"]
    assert record["attempts"] >= 3 and record["message"] == ""
    recorded = [
        e for e in events_with(kube, namespace, "digits", "Recorded") if e["reason"] == "Recorded"
    ]
    assert recorded and recorded[0]["type"] == "Normal"
    with open_store(store_url) as store:
        for name, run_id in run_ids.items():
            document = store.get(run_id)
            assert document is not None, f"{name}'s run {run_id} is not in the store"
            assert document["evaluation"]["name"] == name
        assert len(store.list_runs(namespace=namespace)) == 2
    assert "Traceback" not in op.tail(200)
