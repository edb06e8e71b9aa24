"""Launching into the cluster (issue 32): with `mlms serve --launch-namespace NS` a launch
creates its ModelEvaluations in NS through the Kubernetes API (here the shared fake API server
behind the project's own client), records which objects it created, follows their phases and
deletes them on cancel. :func:`decide`, the phase-to-state mapping, is tested on its own."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from launch_fixtures import DIGITS, NS, WRITE, cluster_client, launch_in, set_phase

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import KubeError, evaluation_path
from mlmodelscope.devtools.telemetry_servers import wait_until
from mlmodelscope.server.launch_cluster import (
    LAUNCH_LABEL,
    Change,
    ClusterLaunches,
    Observed,
    decide,
    labelled,
)
from mlmodelscope.server.launch_queue import LaunchQueue, LaunchRow, LaunchState, NewLaunch
from mlmodelscope.spec.status import Phase
from mlmodelscope.store import open_store

TWO = {**DIGITS, "frameworks": ["onnxruntime", "pytorch"]}


def _row(state: LaunchState, uid: str = "uid-1") -> LaunchRow:
    return LaunchRow(
        launch_id=str(uuid.uuid4()),
        evaluation="digits-cnn-onnxruntime",
        model_name="digits-cnn",
        framework="onnxruntime",
        state=state,
        spec="",
        run_id=None,
        message=None,
        created_at=datetime.now(UTC),
        started_at=None,
        finished_at=None,
        namespace=NS,
        resource_uid=uid,
    )


RUN_ID = str(uuid.uuid4())


@pytest.mark.parametrize(
    ("state", "observed", "change"),
    [
        (LaunchState.QUEUED, Observed("uid-1", Phase.PENDING, None, ""), None),
        (LaunchState.QUEUED, Observed("uid-1", Phase.QUEUED, None, "quota"), None),
        (
            LaunchState.QUEUED,
            Observed("uid-1", Phase.RUNNING, None, ""),
            Change(LaunchState.RUNNING),
        ),
        (LaunchState.RUNNING, Observed("uid-1", Phase.RUNNING, None, ""), None),
        (LaunchState.RUNNING, Observed("uid-1", Phase.QUEUED, None, ""), None),
        (
            LaunchState.RUNNING,
            Observed("uid-1", Phase.SUCCEEDED, RUN_ID, ""),
            Change(LaunchState.SUCCEEDED, RUN_ID),
        ),
        (
            LaunchState.QUEUED,
            Observed("uid-1", Phase.FAILED, None, "refused by the namespace policy"),
            Change(LaunchState.FAILED, None, "refused by the namespace policy"),
        ),
        (
            LaunchState.RUNNING,
            Observed("uid-1", Phase.FAILED, RUN_ID, ""),
            Change(LaunchState.FAILED, RUN_ID, "the ModelEvaluation failed"),
        ),
        (
            LaunchState.RUNNING,
            None,
            Change(LaunchState.CANCELLED, None, f"ModelEvaluation {NS}/digits-cnn-onnxruntime "
                   "was deleted"),
        ),
        (
            LaunchState.QUEUED,
            Observed("uid-2", Phase.SUCCEEDED, RUN_ID, ""),
            Change(LaunchState.CANCELLED, None, f"ModelEvaluation {NS}/digits-cnn-onnxruntime "
                   "was deleted"),
        ),
        (LaunchState.SUCCEEDED, None, None),
        (LaunchState.CANCELLED, Observed("uid-1", Phase.RUNNING, None, ""), None),
    ],
)  # fmt: skip
def test_decide_maps_the_evaluation_phase_to_the_launch_state(
    state: LaunchState, observed: Observed | None, change: Change | None
) -> None:
    assert decide(_row(state), observed) == change


def test_observed_reads_the_status_or_what_it_can_of_it() -> None:
    obj = {"metadata": {"uid": "u"}, "status": {"phase": "Succeeded", "runId": RUN_ID}}
    assert Observed.of(obj) == Observed("u", Phase.SUCCEEDED, RUN_ID, "")
    assert Observed.of({"metadata": {"uid": "u"}}) == Observed("u", Phase.PENDING, None, "")
    newer = {"metadata": {"uid": "u"}, "status": {"phase": "Failed", "message": "m", "x": 1}}
    assert Observed.of(newer) == Observed("u", Phase.FAILED, None, "m")


def test_labelled_keeps_the_document_and_adds_the_launch_label() -> None:
    document = {"apiVersion": "v", "kind": "K", "metadata": {"name": "n"}, "spec": {"a": 1}}
    body = labelled(document, "L")
    assert body["metadata"]["labels"] == {"app.kubernetes.io/created-by": "mlms-serve",
                                          LAUNCH_LABEL: "L"}  # fmt: skip
    assert {k: v for k, v in body.items() if k != "metadata"} == {
        k: v for k, v in document.items() if k != "metadata"
    }
    assert "labels" not in document["metadata"]


def stored_state(target: ClusterLaunches, launch_id: str) -> str | None:
    """The launch's state as the store has it (no GET of its evaluation)."""
    row = target.queue.get(launch_id)
    return None if row is None else row.state.value


def test_the_follower_watches_phases_without_reading_each_launch(sqlite_url: str) -> None:
    """The follower lists once when a launch is submitted, then takes each phase from the
    watch (no GET, no other LIST); a deleted evaluation cancels its launch; a watch from a
    resourceVersion that is too old is refused with 410 (the follower then lists again)."""
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api) as client:
        target = client.app.state.launch_target  # type: ignore[attr-defined]
        kube = target.kube
        wait_until(lambda: kube.requests[("watch", "modelevaluations")] >= 1, 10, "a watch")
        lists = kube.requests[("list", "modelevaluations")]
        gets = kube.requests[("get", "modelevaluations")]
        [one, two] = launch_in(client, TWO)
        set_phase(api, one["evaluation"], phase="Running")
        wait_until(lambda: stored_state(target, one["launch_id"]) == "running", 10, "running")
        set_phase(api, one["evaluation"], phase="Succeeded", runId=RUN_ID)
        wait_until(lambda: stored_state(target, one["launch_id"]) == "succeeded", 10, "done")
        api.handle("DELETE", evaluation_path(NS, two["evaluation"]), None, {})
        wait_until(lambda: stored_state(target, two["launch_id"]) == "cancelled", 10, "gone")
        assert kube.requests[("list", "modelevaluations")] == lists + 1  # after the submit
        assert kube.requests[("get", "modelevaluations")] == gets

    api.compacted = api.resource_version  # etcd compacted the history before it
    stale = ClusterLaunches(open_store(sqlite_url), FakeKube(api), NS)
    with pytest.raises(KubeError) as gone:
        stale.follow_watch("1", timeout_s=1)
    assert gone.value.status == 410


def _state(client: TestClient, launch_id: str) -> dict[str, Any]:
    answer = client.get(f"/api/v1/launches/{launch_id}")
    answer.raise_for_status()
    found: dict[str, Any] = answer.json()
    return found


def test_a_launch_creates_the_previewed_evaluations_and_follows_their_phases(
    sqlite_url: str,
) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api) as client:
        preview = client.post("/api/v1/launches?dry_run=true", json=TWO, headers=WRITE).json()
        items = launch_in(client, TWO)
        created = {o["metadata"]["name"]: o for o in api.of("modelevaluations", NS)}
        assert sorted(created) == sorted(preview["evaluations"])
        for item, document in zip(items, yaml.safe_load_all(preview["yaml"]), strict=True):
            obj = created[item["evaluation"]]
            assert obj["spec"] == document["spec"]  # what the preview showed
            assert obj["metadata"]["labels"][LAUNCH_LABEL] == item["launch_id"]
            assert (item["namespace"], item["resource_uid"]) == (NS, obj["metadata"]["uid"])
            assert item["state"] == "queued"
        assert api.of("modelevaluations", "default") == []
        first, second = (i["launch_id"] for i in items)

        set_phase(api, items[0]["evaluation"], phase="Running")
        running = _state(client, first)  # a GET reads the evaluation
        assert running["state"] == "running" and running["started_at"]
        set_phase(api, items[0]["evaluation"], phase="Succeeded", runId=RUN_ID)
        done = _state(client, first)
        assert (done["state"], done["run_id"], done["finished_at"] is not None) == (
            "succeeded",
            RUN_ID,
            True,
        )

        set_phase(api, items[1]["evaluation"], phase="Failed", message="no GPU here")
        target = client.app.state.launch_target  # type: ignore[attr-defined]
        wait_until(lambda: stored_state(target, second) == "failed", 10, "the watch")
        failed = client.get("/api/v1/launches?state=failed").json()["items"]
        assert [(f["launch_id"], f["message"]) for f in failed] == [(second, "no GPU here")]
        assert client.post(f"/api/v1/launches/{first}/cancel", headers=WRITE).status_code == 409
        assert len(api.of("modelevaluations", NS)) == 2  # an ended launch's object stays


def test_cancel_deletes_the_evaluation_and_a_deleted_one_cancels_its_launch(
    sqlite_url: str,
) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    with cluster_client(sqlite_url, api) as client:
        [kept] = launch_in(client, DIGITS)
        set_phase(api, kept["evaluation"], phase="Running")
        answer = client.post(f"/api/v1/launches/{kept['launch_id']}/cancel", headers=WRITE)
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "cancelled"
        assert api.of("modelevaluations", NS) == []
        assert api.requests[("delete", "modelevaluations")] == 1

        [other] = launch_in(client, {**DIGITS, "name": "again"})
        api.handle("DELETE", evaluation_path(NS, other["evaluation"]), None, {})
        gone = _state(client, other["launch_id"])
        assert gone["state"] == "cancelled"
        assert gone["message"] == f"ModelEvaluation {NS}/again-onnxruntime was deleted"


def test_a_taken_name_refuses_the_whole_launch_and_creates_nothing(sqlite_url: str) -> None:
    api = FakeApiServer()
    api.add_namespace(NS)
    api.seed(evaluation_path(NS), {"metadata": {"name": "digits-cnn-pytorch"}, "spec": {}})
    with cluster_client(sqlite_url, api) as client:
        answer = client.post("/api/v1/launches", json=TWO, headers=WRITE)
        assert answer.status_code == 409, answer.text
        assert "already exists" in answer.json()["detail"]
        names = [o["metadata"]["name"] for o in api.of("modelevaluations", NS)]
        assert names == ["digits-cnn-pytorch"]  # the onnxruntime one was deleted again
        assert client.get("/api/v1/launches").json()["total"] == 0


def test_the_local_workers_never_take_nor_interrupt_a_cluster_launch(sqlite_url: str) -> None:
    with open_store(sqlite_url) as store:
        queue = LaunchQueue(store)
        new = NewLaunch("e", "m", "onnxruntime", "spec", namespace=NS, resource_uid="u")
        [queued] = queue.enqueue([new])
        [running] = queue.enqueue([new])
        assert queue.follow(running.launch_id, LaunchState.RUNNING)
        assert queue.claim_next() is None
        assert queue.interrupt_running() == 0
        assert [r.launch_id for r in queue.in_cluster()] == [queued.launch_id, running.launch_id]
        assert not queue.follow(running.launch_id, LaunchState.RUNNING)  # started once
