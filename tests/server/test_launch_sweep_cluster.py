"""Launching a sweep into the cluster (issue 32): with `mlms serve --launch-namespace NS` a
sweep launch creates its EvaluationSweep in NS through the Kubernetes API (here the shared fake
API server behind the project's own client) and records the sweep and its children; the
operator's own reconcile (:func:`handle_sweep.reconcile`, which the test runs: the fake runs no
controller) creates the children, and the server's follower recognises each by the sweep's
label and owner, records its uid and takes its phases from the watch (one LIST after the
submit, then the watch: no GET). Cancel deletes the EvaluationSweep; the fake deletes the
children it owns in the same request, where a real cluster's garbage collector does so later
(tests/controller/test_launch_cluster_real.py runs the real parts)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from launch_fixtures import CATALOG, DIGITS, NS, WRITE, cluster_client, set_phase

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import evaluation_path, model_path, sweep_path
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_sweep
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.devtools.telemetry_servers import wait_until
from mlmodelscope.server.launch_cluster import (
    LAUNCH_LABEL,
    ClusterLaunches,
    adoptions,
    child_of,
)
from mlmodelscope.server.launch_queue import LaunchRow, LaunchState
from mlmodelscope.server.sweep_launches import SweepRef
from mlmodelscope.spec.sweep import LABEL_SWEEP, SWEEP_KIND

SWEEP: dict[str, Any] = {**DIGITS, "kind": "sweep", "name": "grid", "batch_sizes": [1, 8]}
"""The catalog's digits CNN in ONNX Runtime at two batch sizes: two children, one at a time."""
CHILDREN = ["grid-digits-cnn-onnxruntime-b1", "grid-digits-cnn-onnxruntime-b8"]
RUN_ID = "6f1c2a50-2a64-4c55-9d8e-2a8f0c6d1e11"

# ------------------------------------------------------------------------- pure: which child


REF = SweepRef("00000000-0000-4000-8000-000000000001", NS, "grid", "uid-sweep")


def _child(name: str = CHILDREN[0], **meta: Any) -> dict[str, Any]:
    """A child ModelEvaluation as the operator makes it (controller.sweeps.build_child)."""
    owner = {"apiVersion": "mlmodelscope.io/v1alpha1", "kind": SWEEP_KIND, "name": "grid",
             "uid": "uid-sweep", "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    base = {"name": name, "namespace": NS, "uid": f"uid-{name}",
            "labels": {LABEL_SWEEP: "grid"}, "ownerReferences": [owner]}  # fmt: skip
    return {"metadata": {**base, **meta}}


@pytest.mark.parametrize(
    ("meta", "belongs"),
    [
        ({}, True),
        ({"namespace": "team-b"}, False),
        ({"labels": {LABEL_SWEEP: "other"}}, False),
        ({"labels": {}}, False),  # owned, but not labelled: not as the operator makes them
        ({"ownerReferences": []}, False),  # the name and label alone are not enough
        ({"ownerReferences": [{"kind": SWEEP_KIND, "uid": "uid-earlier", "controller": True}]},
         False),  # a child of an earlier sweep of the same name
        ({"ownerReferences": [{"kind": SWEEP_KIND, "uid": "uid-sweep"}]}, False),  # not controller
    ],
)  # fmt: skip
def test_a_child_is_the_sweeps_by_label_and_owner_uid(meta: dict[str, Any], belongs: bool) -> None:
    assert child_of(_child(**meta), REF) is belongs


def _row(name: str, uid: str | None = None, sweep_id: str | None = REF.sweep_id) -> LaunchRow:
    return LaunchRow(
        launch_id=f"launch-{name}",
        evaluation=name,
        model_name="digits-cnn",
        framework="onnxruntime",
        state=LaunchState.QUEUED,
        spec="",
        run_id=None,
        message=None,
        created_at=datetime.now(UTC),
        started_at=None,
        finished_at=None,
        namespace=NS,
        resource_uid=uid,
        sweep_id=sweep_id,
    )


def test_only_a_waiting_child_of_that_name_adopts_its_evaluation() -> None:
    waiting, adopted = _row(CHILDREN[0]), _row(CHILDREN[1], uid="uid-older")
    alone = _row(CHILDREN[0], sweep_id=None)
    listed = [_child(CHILDREN[0]), _child(CHILDREN[1]), _child("grid-not-in-the-matrix")]
    assert adoptions([waiting, adopted, alone], listed, [REF]) == [(waiting, f"uid-{CHILDREN[0]}")]
    assert adoptions([waiting], listed, []) == []  # no sweep of this server's


# ------------------------------------------------------------ the server, the fake, the operator


@pytest.fixture
def api() -> FakeApiServer:
    """NS with the catalog's digits-cnn Model in it, which the operator resolves children in."""
    server = FakeApiServer()
    server.add_namespace(NS)
    model = yaml.safe_load((CATALOG / "digits-cnn.yaml").read_text())
    server.seed(model_path(NS), model)
    return server


@pytest.fixture
def client(store_url: str, api: FakeApiServer) -> Iterator[TestClient]:
    """The server launching into NS of ``api``, over SQLite and PostgreSQL."""
    with cluster_client(store_url, api) as served:
        wait_until(lambda: _target(served).kube.requests[("watch", "modelevaluations")] >= 1,
                   10, "the follower's watch")  # fmt: skip
        yield served


def _target(client: TestClient) -> ClusterLaunches:
    target: ClusterLaunches = client.app.state.launch_target  # type: ignore[attr-defined]
    return target


def operator_reconciles(api: FakeApiServer, name: str = "grid") -> str:
    """One reconcile of the sweep by the operator's own handler, as its own client: it creates
    the children the sweep's parallelism (1) allows."""
    ctx = Context(settings=OperatorSettings.from_env({}), kube=FakeKube(api),
                  post_event=lambda obj, event: None)  # fmt: skip
    return handle_sweep.reconcile(ctx, NS, name)


def launch_sweep(client: TestClient, form: dict[str, Any] = SWEEP) -> dict[str, Any]:
    answer = client.post("/api/v1/launches", json=form, headers=WRITE)
    assert answer.status_code == 202, answer.text
    sweep: dict[str, Any] = answer.json()["sweep"]
    return sweep


def stored(client: TestClient, sweep_id: str) -> dict[str, Any]:
    """The sweep as the store has it (``GET /api/v1/sweep-launches/{id}`` reads only the
    store)."""
    answer = client.get(f"/api/v1/sweep-launches/{sweep_id}")
    answer.raise_for_status()
    found: dict[str, Any] = answer.json()
    return found


def child_state(client: TestClient, sweep_id: str, index: int) -> tuple[str, str | None]:
    child = stored(client, sweep_id)["children"][index]
    return child["state"], child["resource_uid"]


def uid_of(api: FakeApiServer, name: str) -> str:
    return str(api.objects[("mlmodelscope.io", "modelevaluations", NS, name)]["metadata"]["uid"])


def phase_written(api: FakeApiServer, name: str, phase: str, **status: Any) -> None:
    """The child's phase as its operator writes it (for the generation it has seen)."""
    set_phase(api, name, phase=phase, observedGeneration=1, **status)


def test_a_sweep_launch_creates_the_sweep_and_follows_the_children_the_operator_makes(
    client: TestClient, api: FakeApiServer
) -> None:
    kube = _target(client).kube
    preview = client.post("/api/v1/launches?dry_run=true", json=SWEEP, headers=WRITE)
    assert preview.status_code == 200 and preview.json()["evaluations"] == CHILDREN
    assert api.of("evaluationsweeps") == []  # the dry run creates nothing
    lists, gets = (
        kube.requests[("list", "modelevaluations")],
        kube.requests[("get", "modelevaluations")],
    )

    sweep = launch_sweep(client)
    [created] = api.of("evaluationsweeps", NS)
    assert created["spec"] == yaml.safe_load(preview.json()["yaml"])["spec"]  # as previewed
    assert created["metadata"]["labels"] == {
        "app.kubernetes.io/created-by": "mlms-serve",
        LAUNCH_LABEL: sweep["sweep_id"],
    }
    assert (sweep["name"], sweep["namespace"], sweep["resource_uid"]) == (
        "grid", NS, created["metadata"]["uid"])  # fmt: skip
    assert sweep["state"] == "queued" and sweep["counts"] == {"queued": 2}
    assert [c["evaluation"] for c in sweep["children"]] == CHILDREN
    assert {(c["namespace"], c["resource_uid"]) for c in sweep["children"]} == {(NS, None)}
    assert api.of("modelevaluations", NS) == []  # the server creates no child itself
    page = client.get(f"/sweep-launches/{sweep['sweep_id']}")
    assert page.status_code == 200 and f"<th>namespace</th><td>{NS}</td>" in page.text
    first, second = (c["launch_id"] for c in sweep["children"])
    waiting = client.get(f"/api/v1/launches/{second}/events").json()
    assert waiting["applies"] is True and "does not exist yet" in waiting["reason"]
    assert "does not exist yet" in client.get(f"/api/v1/launches/{second}/log").json()["reason"]

    operator_reconciles(api)  # parallelism 1: the first child
    assert [o["metadata"]["name"] for o in api.of("modelevaluations", NS)] == CHILDREN[:1]
    wait_until(lambda: child_state(client, sweep["sweep_id"], 0)
               == ("queued", uid_of(api, CHILDREN[0])), 10, "the first child's uid")  # fmt: skip
    phase_written(api, CHILDREN[0], "Running")
    wait_until(lambda: stored(client, sweep["sweep_id"])["state"] == "running", 10, "running")
    phase_written(api, CHILDREN[0], "Succeeded", runId=RUN_ID)
    wait_until(lambda: child_state(client, sweep["sweep_id"], 0)[0] == "succeeded", 10, "done")

    operator_reconciles(api)  # as its child handler would: the second child
    wait_until(lambda: child_state(client, sweep["sweep_id"], 1)
               == ("queued", uid_of(api, CHILDREN[1])), 10, "the second child's uid")  # fmt: skip
    phase_written(api, CHILDREN[1], "Failed", message="no GPU here")
    wait_until(lambda: stored(client, sweep["sweep_id"])["state"] == "failed", 10, "failed")

    found = stored(client, sweep["sweep_id"])
    assert found["counts"] == {"succeeded": 1, "failed": 1}
    assert [(c["state"], c["run_id"], c["message"]) for c in found["children"]] == [
        ("succeeded", RUN_ID, None),
        ("failed", None, "no GPU here"),
    ]
    assert kube.requests[("list", "modelevaluations")] == lists + 1  # after the submit only
    assert kube.requests[("get", "modelevaluations")] == gets  # phases came from the watch
    watched = client.get(f"/api/v1/launches/{first}/events").json()  # read as any launch's
    assert watched["applies"] is True and watched["reason"] == "no Job yet"
    again = client.post(f"/api/v1/sweep-launches/{sweep['sweep_id']}/cancel", headers=WRITE)
    assert again.status_code == 409 and "already ended: failed" in again.json()["detail"]
    assert len(api.of("evaluationsweeps", NS)) == 1  # an ended sweep's object stays


def test_cancelling_a_sweep_launch_deletes_its_evaluation_sweep(
    client: TestClient, api: FakeApiServer
) -> None:
    sweep = launch_sweep(client)
    operator_reconciles(api)
    wait_until(lambda: child_state(client, sweep["sweep_id"], 0)[1] is not None, 10, "a child")
    phase_written(api, CHILDREN[0], "Running")
    wait_until(lambda: stored(client, sweep["sweep_id"])["state"] == "running", 10, "running")

    answer = client.post(f"/api/v1/sweep-launches/{sweep['sweep_id']}/cancel", headers=WRITE)
    assert answer.status_code == 200, answer.text
    cancelled = answer.json()
    assert cancelled["state"] == "cancelled" and cancelled["counts"] == {"cancelled": 2}
    assert {c["message"] for c in cancelled["children"]} == {"cancelled"}  # not "deleted"
    assert api.requests[("delete", "evaluationsweeps")] == 1
    assert api.of("evaluationsweeps", NS) == []
    assert api.of("modelevaluations", NS) == []  # owned: the fake collects them at once


def test_a_sweep_deleted_in_the_cluster_cancels_its_children(
    client: TestClient, api: FakeApiServer
) -> None:
    """Someone deletes the EvaluationSweep: its created child goes with it (cancelled as a
    deleted evaluation), and the deletion has the follower list again, which finds the sweep
    gone and cancels the child never created."""
    sweep = launch_sweep(client)
    operator_reconciles(api)
    wait_until(lambda: child_state(client, sweep["sweep_id"], 0)[1] is not None, 10, "a child")
    api.handle("DELETE", sweep_path(NS, "grid"), None, {})
    wait_until(lambda: stored(client, sweep["sweep_id"])["state"] == "cancelled", 10, "gone")
    messages = [c["message"] for c in stored(client, sweep["sweep_id"])["children"]]
    assert messages == [
        f"ModelEvaluation {NS}/{CHILDREN[0]} was deleted",
        f"EvaluationSweep {NS}/grid was deleted",
    ]


def test_a_taken_sweep_name_refuses_the_launch_and_records_nothing(
    client: TestClient, api: FakeApiServer
) -> None:
    api.seed(sweep_path(NS), {"metadata": {"name": "grid"}, "spec": {}})
    answer = client.post("/api/v1/launches", json=SWEEP, headers=WRITE)
    assert answer.status_code == 409, answer.text
    assert "already exists" in answer.json()["detail"]
    assert client.get("/api/v1/launches").json()["total"] == 0
    assert len(api.of("evaluationsweeps", NS)) == 1


def test_a_child_someone_else_made_of_that_name_is_not_adopted(
    client: TestClient, api: FakeApiServer
) -> None:
    """A ModelEvaluation of a child's name and sweep label but not owned by the launched sweep
    (made by hand) is not the child: the launch stays queued without its uid."""
    sweep = launch_sweep(client)
    impostor = {"metadata": {"name": CHILDREN[0], "labels": {LABEL_SWEEP: "grid"}}, "spec": {}}
    api.seed(evaluation_path(NS), impostor)
    _target(client).sync()
    assert child_state(client, sweep["sweep_id"], 0) == ("queued", None)
