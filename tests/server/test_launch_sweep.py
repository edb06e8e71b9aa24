"""Launching an EvaluationSweep from `mlms serve` without a cluster (issue 32): the form with
``kind: sweep`` makes one EvaluationSweep (the document a GitOps user would commit), validated
by the spec loader (422 naming the form's field); submitted, its children (the spec's own
expansion) are queued as launches grouped under the sweep, whose state is summed up from
theirs; cancelling the sweep cancels every child. In the cluster (`--launch-namespace`):
test_launch_sweep_cluster.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from launch_fixtures import CATALOG, DIGITS, WRITE, launch_client, wait_for_state

from mlmodelscope.server.launch_queue import LaunchQueue, LaunchState
from mlmodelscope.server.sweep_launches import sweep_state
from mlmodelscope.spec.resources import check_files
from mlmodelscope.spec.sweep import EvaluationSweep, expand

SWEEP: dict[str, Any] = {
    **DIGITS,
    "kind": "sweep",
    "frameworks": ["onnxruntime", "pytorch", "tensorflow"],
    "batch_sizes": [1, 8],
}
"""The catalog's digits CNN in three frameworks at two batch sizes: six children."""
CHILDREN = [
    f"digits-cnn-digits-cnn-{framework}-b{batch}"
    for framework in ("onnxruntime", "pytorch", "tensorflow")
    for batch in (1, 8)
]

Q, R, S, F, C, I = (  # noqa: E741
    LaunchState.QUEUED,
    LaunchState.RUNNING,
    LaunchState.SUCCEEDED,
    LaunchState.FAILED,
    LaunchState.CANCELLED,
    LaunchState.INTERRUPTED,
)


@pytest.mark.parametrize(
    ("children", "state"),
    [
        ([Q, Q], Q),
        ([R, Q], R),
        ([S, Q], R),  # one ended, one still to run
        ([F, R], R),  # a failure does not stop the others (failurePolicy Continue)
        ([S, S], S),
        ([S, F, C], F),
        ([S, I, C], I),
        ([S, C], C),
        ([], Q),
    ],
)
def test_a_sweeps_state_is_summed_up_from_its_childrens(
    children: list[LaunchState], state: LaunchState
) -> None:
    assert sweep_state(children) is state


def _problems(answer: Any) -> dict[tuple[Any, ...], str]:
    assert answer.status_code == 422, answer.text
    return {tuple(p["loc"]): p["msg"] for p in answer.json()["detail"]}


def test_a_sweep_preview_is_one_evaluation_sweep_mlms_validate_accepts(
    sqlite_url: str, tmp_path: Path
) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        answer = client.post("/api/v1/launches?dry_run=true", json=SWEEP, headers=WRITE)
        assert answer.status_code == 200, answer.text
        assert client.get("/api/v1/launches").json()["total"] == 0  # a dry run queues nothing
    preview = answer.json()
    assert preview["kind"] == "sweep" and preview["dry_run"] is True
    assert preview["launches"] == [] and preview["sweep"] is None
    assert preview["evaluations"] == CHILDREN
    spec = tmp_path / "sweep.yaml"
    spec.write_text(preview["yaml"])
    checked, unusable = check_files([spec], [CATALOG])
    assert unusable == [] and [c.error for c in checked] == [None]
    [sweep] = [c.resource for c in checked]
    assert isinstance(sweep, EvaluationSweep)
    assert sweep.metadata.name == "digits-cnn"
    assert [m.model_ref and m.model_ref.name for m in sweep.spec.matrix.models] == ["digits-cnn"]
    assert [f.value for f in sweep.spec.matrix.frameworks] == SWEEP["frameworks"]
    assert sweep.spec.matrix.batch_sizes == [1, 8]
    assert sweep.spec.template.dataset.type == "digits"
    assert sweep.spec.template.scenario.min_query_count == 20
    assert [c.name for c in expand(sweep)] == CHILDREN


@pytest.mark.parametrize(
    ("change", "loc", "says"),
    [
        ({"batch_sizes": [1, 0]}, ("body", "batch_sizes"), "spec.matrix.batchSizes"),
        ({"batch_sizes": [8, 8]}, ("body", "batch_sizes"), "batch sizes must be unique"),
        ({"frameworks": ["caffe"]}, ("body", "frameworks", 0), "spec.matrix.frameworks[0]"),
        ({"devices": ["tpu"]}, ("body", "devices", 0), "spec.matrix.hardware[0].device"),
        ({"models": ["no-such-model"]}, ("body", "models", 0), "no Model 'no-such-model'"),
        ({"scenario": "Sometimes"}, ("body", "scenario"), "spec.template.scenario.type"),
        (
            {"scenario_settings": {"minDuration": "soon"}},
            ("body", "scenario_settings", "minDuration"),
            "spec.template.scenario.minDuration",
        ),
        (
            {"model": "resnet50", "frameworks": ["tensorflow"], "dataset": {"type": "digits"}},
            ("body", "model"),
            "framework 'tensorflow' loads savedmodel",
        ),
        ({"name": "Digits_CNN"}, ("body", "name"), "metadata.name"),
        ({"kind": "evaluation", "devices": ["cpu"]}, ("body", "devices"), "only for a sweep"),
        ({"kind": "matrix"}, ("body", "kind"), "'evaluation' or 'sweep'"),
    ],
)
def test_a_bad_sweep_is_refused_naming_its_field(
    sqlite_url: str, change: dict[str, Any], loc: tuple[Any, ...], says: str
) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        for dry_run in ("true", "false"):
            answer = client.post(
                f"/api/v1/launches?dry_run={dry_run}", json={**SWEEP, **change}, headers=WRITE
            )
            problems = _problems(answer)
            assert loc in problems, problems
            assert says in problems[loc]
        assert client.get("/api/v1/launches").json()["total"] == 0


def test_submitting_a_sweep_queues_its_children_and_cancel_cancels_them(
    sqlite_url: str,
) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        answer = client.post("/api/v1/launches", json=SWEEP, headers=WRITE)
        assert answer.status_code == 202, answer.text
        sweep = answer.json()["sweep"]
        assert sweep["state"] == "queued" and sweep["counts"] == {"queued": 6}
        assert sweep["location"] == f"/api/v1/sweep-launches/{sweep['sweep_id']}"
        assert sweep["spec"] == answer.json()["yaml"]
        assert [c["evaluation"] for c in sweep["children"]] == CHILDREN  # matrix order
        assert [c["launch_id"] for c in answer.json()["launches"]] == [
            c["launch_id"] for c in sweep["children"]
        ]
        listed = client.get("/api/v1/launches").json()
        assert listed["total"] == 6
        assert {i["sweep_id"] for i in listed["items"]} == {sweep["sweep_id"]}
        first = sweep["children"][0]
        assert "batchSizes: [1]" in first["spec"]
        assert "mlmodelscope.io/sweep: digits-cnn" in first["spec"]
        assert (first["model"], first["framework"]) == ("digits-cnn", "onnxruntime")

        # a worker takes the children in matrix order; the sweep runs while any does
        queue = LaunchQueue(client.app.state.store)  # type: ignore[attr-defined]
        claimed = queue.claim_next()
        assert claimed is not None and claimed.launch_id == first["launch_id"]
        assert queue.finish(claimed.launch_id, LaunchState.SUCCEEDED, None, None)
        now = client.get(sweep["location"]).json()
        assert now["state"] == "running"
        assert now["counts"] == {"succeeded": 1, "queued": 5}

        cancelled = client.post(f"{sweep['location']}/cancel", headers=WRITE)
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        assert cancelled.json()["counts"] == {"succeeded": 1, "cancelled": 5}
        assert [c["state"] for c in cancelled.json()["children"]] == ["succeeded"] + [
            "cancelled"
        ] * 5
        again = client.post(f"{sweep['location']}/cancel", headers=WRITE)
        assert again.status_code == 409 and "already ended: cancelled" in again.json()["detail"]
        assert client.post(f"{sweep['location']}/cancel").status_code == 403  # the read token
        unknown = "/api/v1/sweep-launches/00000000-0000-4000-8000-000000000000"
        assert client.get(unknown).status_code == 404
        assert client.post(f"{unknown}/cancel", headers=WRITE).status_code == 404
        assert client.get("/api/v1/sweep-launches/not-a-uuid").status_code == 404
        assert queue.claim_next() is None  # nothing left to run


@pytest.mark.frameworks
def test_a_sweep_runs_its_children_and_succeeds(sqlite_url: str, pvc_root: Path) -> None:
    form = {**SWEEP, "frameworks": ["onnxruntime"]}
    with launch_client(sqlite_url, workers=1) as client:
        sweep = client.post("/api/v1/launches", json=form, headers=WRITE).json()["sweep"]
        for child in sweep["children"]:
            wait_for_state(client, child["launch_id"])
        done = client.get(sweep["location"]).json()
        assert done["state"] == "succeeded", [c["message"] for c in done["children"]]
        runs = [client.get(f"/api/v1/runs/{c['run_id']}").json() for c in done["children"]]
    assert [r["evaluation"]["name"] for r in runs] == CHILDREN[:2]
    assert [[b["batch_size"] for b in r["results"]] for r in runs] == [[1], [8]]
    assert all(r["evaluation"]["labels"]["mlmodelscope.io/sweep"] == "digits-cnn" for r in runs)
