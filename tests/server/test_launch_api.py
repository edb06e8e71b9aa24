"""Launching from `mlms serve` without a cluster (issue 32): ``POST /api/v1/launches`` turns a
form into ModelEvaluations of a catalog Model, validated by the spec loader (422 naming the
form's field and the spec path), queued in the store and run by the server's workers in
`mlms run` processes; restart and cancel semantics on a real SQLite store."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from launch_fixtures import CATALOG, DIGITS, FAILS_FAST, WRITE, launch_client, wait_for_state
from launch_fixtures import workers_of as workers
from serve_fixtures import READ_TOKEN, bearer

from mlmodelscope.server.launch_queue import LaunchQueue, LaunchState, NewLaunch
from mlmodelscope.spec.document import ModelEvaluation
from mlmodelscope.spec.resources import check_files
from mlmodelscope.store import open_store


def _problems(answer: Any) -> dict[tuple[Any, ...], str]:
    assert answer.status_code == 422, answer.text
    return {tuple(p["loc"]): p["msg"] for p in answer.json()["detail"]}


@pytest.mark.parametrize(
    ("change", "loc", "says"),
    [
        ({"model": "no-such-model"}, ("body", "model"), "no Model 'no-such-model' in the catalog"),
        ({"frameworks": ["caffe"]}, ("body", "frameworks", 0), "spec.framework.name"),
        ({"scenario": "Sometimes"}, ("body", "scenario"), "spec.scenario.type"),
        ({"batch_sizes": [0]}, ("body", "batch_sizes"), "spec.scenario.batchSizes"),
        ({"batch_sizes": ["many"]}, ("body", "batch_sizes", 0), "integer"),
        (
            {"scenario_settings": {"minDuration": "soon"}},
            ("body", "scenario_settings", "minDuration"),
            "spec.scenario.minDuration: 'soon' is not a duration",
        ),
        (
            {"scenario_settings": {"minQueries": 5}},
            ("body", "scenario_settings", "minQueries"),
            "spec.scenario.minQueries: unknown field",
        ),
        (
            {"dataset": {"type": "digits", "split": "validation"}},
            ("body", "dataset", "split"),
            "spec.dataset.split",
        ),
        ({"name": "Digits_CNN"}, ("body", "name"), "metadata.name"),
        (
            {"model": "resnet50", "frameworks": ["tensorflow"], "dataset": {"type": "digits"}},
            ("body", "frameworks", 0),
            "framework 'tensorflow' loads savedmodel",
        ),
        ({"model": "resnet50"}, ("body", "dataset"), "'imagenet-1k'"),
        ({"frameworks": ["onnxruntime", "onnxruntime"]}, ("body", "frameworks", 1), "twice"),
        ({"colour": "blue"}, ("body", "colour"), "Extra inputs are not permitted"),
        (
            {"hardware": {"device": "tpu"}},
            ("body", "hardware", "device"),
            "spec.hardware.device",
        ),
    ],
)
def test_a_bad_form_is_refused_naming_its_field(
    sqlite_url: str, change: dict[str, Any], loc: tuple[Any, ...], says: str
) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        for dry_run in ("true", "false"):
            answer = client.post(
                f"/api/v1/launches?dry_run={dry_run}", json={**DIGITS, **change}, headers=WRITE
            )
            problems = _problems(answer)
            assert loc in problems, problems
            assert says in problems[loc]
        assert client.get("/api/v1/launches").json()["total"] == 0


def test_every_problem_is_named_at_once(sqlite_url: str) -> None:
    form = {**DIGITS, "frameworks": ["caffe", "onnxruntime"], "scenario": "Sometimes"}
    form["dataset"] = {"type": "digits", "split": "validation"}
    with launch_client(sqlite_url, workers=0) as client:
        problems = _problems(client.post("/api/v1/launches", json=form, headers=WRITE))
    assert set(problems) == {
        ("body", "frameworks", 0),
        ("body", "scenario"),
        ("body", "dataset", "split"),
    }


def test_the_hardware_reaches_every_evaluation_and_a_sweeps_template(sqlite_url: str) -> None:
    """A node pool chosen on the form: its nodeSelector and tolerations, as the spec has them."""
    hardware = {
        "nodeSelector": {"mlmodelscope.io/pool": "cpu"},
        "tolerations": [
            {"key": "pool", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}
        ],
    }
    with launch_client(sqlite_url, workers=0) as client:
        one = client.post(
            "/api/v1/launches?dry_run=true", json={**DIGITS, "hardware": hardware}, headers=WRITE
        )
        sweep = client.post(
            "/api/v1/launches?dry_run=true",
            json={**DIGITS, "kind": "sweep", "hardware": hardware},
            headers=WRITE,
        )
    assert one.status_code == 200, one.text
    for document in yaml.safe_load_all(one.json()["yaml"]):
        assert document["spec"]["hardware"] == hardware
    assert sweep.status_code == 200, sweep.text
    [swept] = yaml.safe_load_all(sweep.json()["yaml"])
    assert swept["spec"]["template"]["hardware"] == hardware


def test_the_preview_is_what_mlms_validate_accepts(sqlite_url: str, tmp_path: Path) -> None:
    form = {**DIGITS, "frameworks": ["onnxruntime", "pytorch", "tensorflow"]}
    with launch_client(sqlite_url, workers=0) as client:
        answer = client.post("/api/v1/launches?dry_run=true", json=form, headers=WRITE)
        assert answer.status_code == 200, answer.text
        assert client.get("/api/v1/launches").json()["total"] == 0  # a dry run queues nothing
    preview = answer.json()
    assert preview["dry_run"] is True and preview["launches"] == []
    names = ["digits-cnn-onnxruntime", "digits-cnn-pytorch", "digits-cnn-tensorflow"]
    assert preview["evaluations"] == names
    spec = tmp_path / "preview.yaml"
    spec.write_text(preview["yaml"])
    checked, unusable = check_files([spec], [CATALOG])
    assert unusable == [] and [c.error for c in checked] == [None] * 3
    evaluations = [c.resource for c in checked if isinstance(c.resource, ModelEvaluation)]
    assert len(evaluations) == 3
    assert [e.spec.framework.name for e in evaluations] == ["onnxruntime", "pytorch", "tensorflow"]
    assert [e.spec.model and e.spec.model.format for e in evaluations] == [
        "onnx",
        "torchscript",
        "savedmodel",
    ]
    assert all(e.spec.scenario.batch_sizes == [1, 8] for e in evaluations)
    assert all(e.spec.dataset.type == "digits" for e in evaluations)


def test_launching_needs_the_write_token(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        queued = LaunchQueue(client.app.state.store).enqueue(  # type: ignore[attr-defined]
            [NewLaunch("x-onnxruntime", "x", "onnxruntime", FAILS_FAST)]
        )[0]
        cancel = f"/api/v1/launches/{queued.launch_id}/cancel"
        for path in ("/api/v1/launches", "/api/v1/launches?dry_run=true", cancel):
            body = DIGITS if "cancel" not in path else None
            none = client.post(path, json=body, headers={"Authorization": ""})
            assert none.status_code == 401, none.text
            assert none.headers["www-authenticate"].startswith("Bearer")
            read = client.post(path, json=body, headers=bearer(READ_TOKEN))
            assert read.status_code == 403
            assert "may only read" in read.json()["detail"]
            wrong = client.post(path, json=body, headers=bearer("not-a-token"))
            assert wrong.status_code == 401
        # a bad form without the token: refused for the token, not the form
        assert (
            client.post("/api/v1/launches", json={}, headers=bearer(READ_TOKEN)).status_code == 403
        )
        listed = client.get("/api/v1/launches").json()
        assert [i["state"] for i in listed["items"]] == ["queued"]  # nothing queued, none cancelled
    with launch_client(sqlite_url, workers=0, write_token=None) as client:
        answer = client.post("/api/v1/launches", json=DIGITS, headers=bearer(READ_TOKEN))
        assert answer.status_code == 403
        assert "--write-token-file" in answer.json()["detail"]


@pytest.mark.frameworks
def test_a_digits_launch_runs_and_records_its_run(sqlite_url: str, pvc_root: Path) -> None:
    with launch_client(sqlite_url, workers=1) as client:
        answer = client.post("/api/v1/launches", json=DIGITS, headers=WRITE)
        assert answer.status_code == 202, answer.text
        [launch] = answer.json()["launches"]
        assert launch["state"] == "queued" and launch["run_id"] is None
        assert launch["location"] == f"/api/v1/launches/{launch['launch_id']}"
        seen = wait_for_state(client, launch["launch_id"])
        done = client.get(launch["location"]).json()
        assert seen == ["queued", "running", "succeeded"] or seen == ["running", "succeeded"], seen
        assert done["state"] == "succeeded", done["message"]
        assert done["message"] is None
        assert done["created_at"] <= done["started_at"] <= done["finished_at"]
        run = client.get(f"/api/v1/runs/{done['run_id']}")
        assert run.status_code == 200
        document = run.json()
        listed = client.get("/api/v1/launches", params={"state": "succeeded"}).json()
        assert [i["launch_id"] for i in listed["items"]] == [launch["launch_id"]]
        assert workers(client).started == [launch["launch_id"]]
    assert document["status"] == "Succeeded"
    assert document["evaluation"]["name"] == "digits-cnn-onnxruntime"
    assert document["backend"]["framework"] == "onnxruntime"
    assert [r["batch_size"] for r in document["results"]] == [1, 8]
    assert document["accuracy"]["top1"] > 0.9
    with open_store(sqlite_url) as store:
        [summary] = store.list_runs()
    assert summary.run_id == done["run_id"] and summary.model_name == "digits-cnn"


def test_a_run_left_running_is_interrupted_on_restart_and_never_rerun(sqlite_url: str) -> None:
    # a server that queued a launch and died while it ran
    with launch_client(sqlite_url, workers=0) as client:
        queue = LaunchQueue(client.app.state.store)  # type: ignore[attr-defined]
        [lost] = queue.enqueue([NewLaunch("lost-onnxruntime", "lost", "onnxruntime", FAILS_FAST)])
        claimed = queue.claim_next()
        assert claimed is not None and claimed.launch_id == lost.launch_id
        assert claimed.state is LaunchState.RUNNING
        [later] = queue.enqueue([NewLaunch("later-onnxruntime", "x", "onnxruntime", FAILS_FAST)])
    for restart in range(2):
        with launch_client(sqlite_url, workers=1) as client:
            item = client.get(f"/api/v1/launches/{lost.launch_id}").json()
            assert item["state"] == "interrupted"
            assert "not run again" in item["message"]
            assert datetime.fromisoformat(item["started_at"]) == claimed.started_at
            if restart == 0:  # the queued one runs (and fails fast): the worker looked at both
                wait_for_state(client, later.launch_id)
                assert workers(client).started == [later.launch_id]
            else:
                assert workers(client).started == []
            item = client.get(f"/api/v1/launches/{lost.launch_id}").json()
            assert item["state"] == "interrupted" and item["run_id"] is None
            failed = client.get(f"/api/v1/launches/{later.launch_id}").json()
            assert failed["state"] == "failed"
            assert "no-such-model" in failed["message"]


def test_cancel_a_queued_launch(sqlite_url: str) -> None:
    with launch_client(sqlite_url, workers=0) as client:
        answer = client.post("/api/v1/launches", json=DIGITS, headers=WRITE)
        [launch] = answer.json()["launches"]
        cancel = f"/api/v1/launches/{launch['launch_id']}/cancel"
        cancelled = client.post(cancel, headers=WRITE)
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        assert cancelled.json()["finished_at"] is not None
        again = client.post(cancel, headers=WRITE)
        assert again.status_code == 409 and "already ended: cancelled" in again.json()["detail"]
        unknown = "/api/v1/launches/00000000-0000-4000-8000-000000000000/cancel"
        assert client.post(unknown, headers=WRITE).status_code == 404
        assert client.get("/api/v1/launches/not-a-uuid").status_code == 404
        queue = LaunchQueue(client.app.state.store)  # type: ignore[attr-defined]
        [after] = queue.enqueue([NewLaunch("after-onnxruntime", "x", "onnxruntime", FAILS_FAST)])
    with launch_client(sqlite_url, workers=1) as client:
        wait_for_state(client, after.launch_id)  # the older, cancelled one is never taken
        assert workers(client).started == [after.launch_id]
        assert client.get(f"/api/v1/launches/{launch['launch_id']}").json()["state"] == "cancelled"


@pytest.mark.frameworks
def test_cancel_a_running_launch_stops_its_process(sqlite_url: str, pvc_root: Path) -> None:
    long = {**DIGITS, "scenario_settings": {**DIGITS["scenario_settings"], "minDuration": "60s"}}
    with launch_client(sqlite_url, workers=1) as client:
        [launch] = client.post("/api/v1/launches", json=long, headers=WRITE).json()["launches"]
        wait_for_state(client, launch["launch_id"], lambda state: state == "running")
        answer = client.post(f"/api/v1/launches/{launch['launch_id']}/cancel", headers=WRITE)
        assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
        # the worker stops the process and takes the next launch
        [after] = LaunchQueue(client.app.state.store).enqueue(  # type: ignore[attr-defined]
            [NewLaunch("after-onnxruntime", "x", "onnxruntime", FAILS_FAST)]
        )
        workers(client).wake()
        wait_for_state(client, after.launch_id, timeout_s=30)
        item = client.get(f"/api/v1/launches/{launch['launch_id']}").json()
        assert item["state"] == "cancelled" and item["run_id"] is None
        assert client.get("/api/v1/runs").json()["total"] == 0
