"""EvaluationSweep decisions with no cluster: which children to create, the aggregate status,
ownership, and the reconcile against an in-memory API (idempotent creation, name conflicts,
status patched only when it changes)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import evaluation_path, sweep_path
from mlmodelscope.controller import status as evaluation_status
from mlmodelscope.controller import sweeps
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_sweep
from mlmodelscope.controller.runs import InvalidSpecError
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.spec.sweep import (
    LABEL_CELL,
    LABEL_REPEAT,
    LABEL_SWEEP,
    SweepChild,
    expand,
    parse_sweep,
)

NOW = "2026-11-22T08:00:00Z"
UID = "5e7e1c4a-aaaa-bbbb-cccc-444455556666"
MODEL = {
    "name": "digits",
    "uri": "file:///models/digits.onnx",
    "format": "onnx",
    "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
    "outputs": [{"name": "logits", "shape": [-1, 10]}],
}
EXPORTS = [
    {"format": "torchscript", "uri": "file:///models/digits.torchscript.pt"},
    {"format": "savedmodel", "uri": "file:///models/digits_savedmodel"},
]
NAMES = [
    f"grid-cnn-{framework}-b{batch}"
    for framework in ("onnxruntime", "pytorch", "tensorflow")
    for batch in (1, 8)
]


def sweep_body(**spec: Any) -> dict[str, Any]:
    """A stored-looking sweep: digits x 3 frameworks x 2 batch sizes, parallelism 2."""
    base: dict[str, Any] = {
        "matrix": {
            "models": [{"name": "cnn", "model": MODEL, "exports": EXPORTS}],
            "frameworks": ["onnxruntime", "pytorch", "tensorflow"],
            "batchSizes": [1, 8],
        },
        "template": {
            "preprocessing": [
                {"scale": {"factor": 0.0625}},
                {"layout": {"from": "HWC", "to": "CHW"}},
            ],
            "dataset": {"type": "digits"},
        },
        "parallelism": 2,
    }
    base.update(spec)
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "EvaluationSweep",
        "metadata": {"name": "grid", "namespace": "team-a", "uid": UID, "generation": 1},
        "spec": base,
    }


def expanded(body: Mapping[str, Any]) -> list[SweepChild]:
    return expand(handle_sweep.parse_body(body))


def child(
    body: Mapping[str, Any], name: str, phase: str | None = None, **status: Any
) -> dict[str, Any]:
    """The stored child ``name`` of ``body``, with a status in ``phase`` (None: not seen)."""
    [entry] = [c for c in expanded(body) if c.name == name]
    obj = sweeps.build_child(body, entry)
    obj["metadata"]["generation"] = 1
    obj["metadata"]["uid"] = f"uid-{name}"
    if phase is not None:
        obj["status"] = {"observedGeneration": 1, "phase": phase, **status}
    return obj


def decide(
    body: Mapping[str, Any],
    owned: list[dict[str, Any]],
    current: Mapping[str, Any] | None = None,
    conflicts: tuple[str, ...] = (),
) -> sweeps.Plan:
    sweep = handle_sweep.parse_body(body)
    by_name = {c["metadata"]["name"]: c for c in owned}
    return sweeps.plan(sweep, expand(sweep), by_name, current or {}, NOW, conflicts)


def created(plan: sweeps.Plan) -> list[str]:
    return [c.name for c in plan.create]


SUCCEEDED_STATUS: dict[str, Any] = {
    "summary": {"batchSize": 1, "p50Ms": 0.2, "throughput": 500.0, "top1": 0.977778},
    "results": [
        {
            "batchSize": 1,
            "scenario": "SingleStream",
            "latencyMs": {"p50": 0.2, "p99": 0.9},
            "throughput": 500.0,
            "top1": 0.977778,
        }
    ],
    "runId": "0f5e1c4a-1111-2222-3333-444455556666",
    "message": "evaluation succeeded",
}


# ---------------------------------------------------------------------------- ownership


def test_children_are_owned_by_the_sweep_labelled_and_in_its_namespace() -> None:
    body = sweep_body()
    entries = expanded(body)
    assert [c.name for c in entries] == NAMES
    obj = sweeps.build_child(body, entries[0])
    meta = obj["metadata"]
    assert meta["name"] == "grid-cnn-onnxruntime-b1" and meta["namespace"] == "team-a"
    assert meta["labels"][LABEL_SWEEP] == "grid"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "mlmodelscope.io/v1alpha1",
            "kind": "EvaluationSweep",
            "name": "grid",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert obj["kind"] == "ModelEvaluation" and obj["spec"]["framework"]["name"] == "onnxruntime"
    assert entries[0].document["metadata"].get("namespace") is None  # expand's is not touched
    assert sweeps.owner_of(obj) == ("team-a", "grid", UID)


def test_a_child_belongs_only_with_the_label_and_the_owners_uid() -> None:
    body = sweep_body()
    mine = child(body, NAMES[0])
    unlabelled = copy.deepcopy(mine)
    del unlabelled["metadata"]["labels"][LABEL_SWEEP]
    unowned = copy.deepcopy(mine)
    unowned["metadata"]["ownerReferences"] = []
    earlier = copy.deepcopy(mine)  # a child of a deleted sweep of the same name
    earlier["metadata"]["ownerReferences"][0]["uid"] = "another-uid"
    owned = sweeps.owned_children(body, [mine, unlabelled, unowned, earlier])
    assert list(owned) == [NAMES[0]] and owned[NAMES[0]] is mine
    assert sweeps.owner_of(unlabelled) is None and sweeps.owner_of(unowned) is None


def test_build_child_needs_a_stored_sweep() -> None:
    body = sweep_body()
    del body["metadata"]["uid"]
    with pytest.raises(ValueError, match="uid"):
        sweeps.build_child(body, expanded(sweep_body())[0])


# ---------------------------------------------------------------------------- decisions


def test_a_new_sweep_creates_parallelism_children_in_matrix_order() -> None:
    plan = decide(sweep_body(), [])
    assert created(plan) == NAMES[:2]
    st = plan.status
    assert st.phase == "Running" and (st.total, st.created, st.active) == (6, 2, 2)
    assert st.progress == "0/6 Succeeded"
    assert [r.name for r in st.children] == NAMES
    assert [r.phase for r in st.children] == ["Pending", "Pending", None, None, None, None]
    row = st.children[2]
    assert (row.model, row.framework, row.device, row.scenario, row.batch_size) == (
        "cnn",
        "pytorch",
        "cpu",
        "SingleStream",
        1,
    )
    assert st.observed_generation == 1


def test_no_more_than_parallelism_children_are_active() -> None:
    body = sweep_body()
    running = [child(body, NAMES[0], "Running"), child(body, NAMES[1])]
    assert created(decide(body, running)) == []
    one_done = [child(body, NAMES[0], "Succeeded", **SUCCEEDED_STATUS), child(body, NAMES[1])]
    assert created(decide(body, one_done)) == [NAMES[2]]
    both_done = [child(body, n, "Succeeded", **SUCCEEDED_STATUS) for n in NAMES[:2]]
    assert created(decide(body, both_done)) == NAMES[2:4]
    wide = decide(sweep_body(parallelism=10), [])
    assert created(wide) == NAMES and wide.status.active == 6


def test_an_owned_child_outside_the_matrix_still_holds_a_slot() -> None:
    body = sweep_body(parallelism=1)
    stray = child(body, NAMES[0], "Running")
    stray["metadata"]["name"] = "grid-cnn-onnxruntime-b4"  # the matrix had batch size 4 once
    plan = decide(body, [stray])
    assert created(plan) == [] and plan.status.active == 1 and plan.status.created == 0


def test_a_child_not_yet_seen_by_its_operator_is_pending_and_active() -> None:
    body = sweep_body(parallelism=1)
    stale = child(body, NAMES[0], "Succeeded", **SUCCEEDED_STATUS)
    stale["metadata"]["generation"] = 2  # edited; its operator has not caught up
    plan = decide(body, [stale])
    assert created(plan) == []
    row = plan.status.children[0]
    assert row.phase == "Pending" and row.p50_ms is None


def test_the_aggregate_holds_each_childs_numbers_and_ends_succeeded() -> None:
    body = sweep_body()
    done = [child(body, n, "Succeeded", **SUCCEEDED_STATUS) for n in NAMES]
    plan = decide(body, done)
    st = plan.status
    assert created(plan) == []
    assert st.phase == "Succeeded" and st.progress == "6/6 Succeeded"
    assert (st.succeeded, st.failed, st.active, st.created) == (6, 0, 0, 6)
    row = st.children[0]
    assert (row.p50_ms, row.p99_ms, row.throughput, row.top1) == (0.2, 0.9, 500.0, 0.977778)
    assert row.run_id == SUCCEEDED_STATUS["runId"] and row.batch_size == 1
    conds = {c.type: c for c in st.conditions}
    assert conds["Succeeded"].status == "True" and conds["Failed"].status == "False"
    assert conds["Valid"].status == "True" and "Suspended" not in conds
    assert all(c.observed_generation == 1 for c in st.conditions)


def test_a_childs_in_process_interval_is_in_its_row() -> None:
    """A child run with scenario.repetitions has its p50 interval in status.results[0]; the
    sweep's row carries it, and a malformed one is left out rather than failing the sweep."""
    body = sweep_body()
    interval = {"estimate": 0.21, "low": 0.2, "high": 0.23, "confidenceLevel": 0.95}
    results = [{**SUCCEEDED_STATUS["results"][0], "p50IntervalMs": {**interval, "repetitions": 3}}]
    done = [child(body, NAMES[0], "Succeeded", **{**SUCCEEDED_STATUS, "results": results})]
    done.append(child(body, NAMES[1], "Succeeded", **SUCCEEDED_STATUS))
    broken = [{**results[0], "p50IntervalMs": {"low": "slow"}}]
    done.append(child(body, NAMES[2], "Succeeded", **{**SUCCEEDED_STATUS, "results": broken}))
    rows = decide(body, done).status.children
    with_interval = rows[0].p50_interval_ms
    assert with_interval is not None
    assert (with_interval.estimate, with_interval.low, with_interval.high) == (0.21, 0.2, 0.23)
    assert with_interval.repetitions == 3
    assert rows[1].p50_interval_ms is None and rows[2].p50_interval_ms is None
    assert rows[2].p50_ms == rows[1].p50_ms  # the rest of the broken row stands
    dumped = rows[0].model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["p50IntervalMs"] == {**interval, "repetitions": 3}


def test_a_sweep_over_tasks_shows_each_childs_metric_by_name() -> None:
    """Rows of a sweep whose models entries have their own task: each row names its child's
    primary metric (summary.metric) next to its value; top1 only where the child has one."""
    tasks = {"cnn": None, "det": ("map", 0.369), "seg": ("miou", 0.4936)}
    models = [
        {"name": "cnn", "model": MODEL, "exports": EXPORTS},
        {
            "name": "det",
            "model": MODEL,
            "exports": EXPORTS,
            "dataset": {"type": "coco", "path": "/d/images", "annotations": "/d/i.json"},
            "task": {"type": "detection"},
        },
        {
            "name": "seg",
            "model": MODEL,
            "exports": EXPORTS,
            "dataset": {"type": "masks", "path": "/d/images", "masks": "/d/masks"},
            "task": {"type": "segmentation", "numClasses": 4},
        },
    ]
    body = sweep_body(matrix={"models": models, "frameworks": ["onnxruntime"]}, parallelism=3)
    done = []
    for entry in expanded(body):
        status = copy.deepcopy(SUCCEEDED_STATUS)
        metric = tasks[entry.axes["model"]]
        if metric is not None:
            status["summary"].update(top1=None, metric=metric[0], metricValue=metric[1])
        else:
            status["summary"].update(metric="top1", metricValue=0.977778)
        done.append(child(body, entry.name, "Succeeded", **status))
    rows = decide(body, done).status.children
    assert [(r.model, r.metric, r.metric_value, r.top1) for r in rows] == [
        ("cnn", "top1", 0.977778, 0.977778),
        ("det", "map", 0.369, None),
        ("seg", "miou", 0.4936, None),
    ]
    shown = sweeps.to_json(decide(body, done).status)["children"]
    assert [(r["metric"], r["metricValue"]) for r in shown][1] == ("map", 0.369)


def test_suspend_creates_nothing_and_resuming_creates_again() -> None:
    suspended = sweep_body(suspend=True)
    plan = decide(suspended, [])
    assert created(plan) == [] and plan.status.phase == "Suspended"
    conds = {c.type: c for c in plan.status.conditions}
    assert conds["Suspended"].status == "True"
    current = sweeps.to_json(plan.status)
    change = sweeps.change({}, plan.status)
    assert change.event is not None and change.event.reason == "Suspended"

    resumed = decide(sweep_body(), [], current)
    assert created(resumed) == NAMES[:2] and resumed.status.phase == "Running"
    conds = {c.type: c for c in resumed.status.conditions}
    assert (conds["Suspended"].status, conds["Suspended"].reason) == ("False", "Resumed")
    event = sweeps.change(current, resumed.status).event
    assert event is not None and (event.type, event.reason) == ("Normal", "Resumed")


def test_suspending_lets_running_children_finish() -> None:
    body = sweep_body(suspend=True)
    plan = decide(body, [child(body, NAMES[0], "Running")])
    assert created(plan) == [] and plan.status.phase == "Suspended"
    assert plan.status.active == 1


def test_failure_policy_stop_creates_nothing_after_a_failure() -> None:
    body = sweep_body(failurePolicy="Stop")
    failing = [
        child(body, NAMES[0], "Failed", message="spec.model.sha256: digest mismatch"),
        child(body, NAMES[1], "Running"),
    ]
    plan = decide(body, failing)
    st = plan.status
    assert created(plan) == [] and st.phase == "Stopped"
    assert (st.failed, st.active, st.created) == (1, 1, 2)
    assert NAMES[0] in st.message and "Stop" in st.message
    assert st.children[0].message == "spec.model.sha256: digest mismatch"
    assert "Failed" not in {c.type for c in st.conditions}  # a child still runs
    event = sweeps.change({"phase": "Running"}, st).event
    assert event is not None and (event.type, event.reason) == ("Warning", "Stopped")

    finished = [failing[0], child(body, NAMES[1], "Succeeded", **SUCCEEDED_STATUS)]
    st = decide(body, finished).status
    assert st.phase == "Stopped" and st.active == 0
    conds = {c.type: c for c in st.conditions}
    assert (conds["Failed"].status, conds["Failed"].reason) == ("True", "FailurePolicyStop")


def test_failure_policy_continue_runs_everything_and_ends_failed() -> None:
    body = sweep_body()
    failing = [child(body, NAMES[0], "Failed", message="boom"), child(body, NAMES[1], "Running")]
    assert created(decide(body, failing)) == [NAMES[2]]
    done = [child(body, NAMES[0], "Failed", message="boom")] + [
        child(body, n, "Succeeded", **SUCCEEDED_STATUS) for n in NAMES[1:]
    ]
    st = decide(body, done).status
    assert st.phase == "Failed" and (st.succeeded, st.failed, st.total) == (5, 1, 6)
    assert st.progress == "5/6 Succeeded" and NAMES[0] in st.message
    conds = {c.type: c for c in st.conditions}
    assert (conds["Failed"].status, conds["Failed"].reason) == ("True", "ChildrenFailed")
    event = sweeps.change({"phase": "Running"}, st).event
    assert event is not None and (event.type, event.reason) == ("Warning", "ChildrenFailed")


def test_an_ended_child_that_was_deleted_is_not_run_again() -> None:
    body = sweep_body(parallelism=1)
    first = decide(body, [child(body, NAMES[0], "Succeeded", **SUCCEEDED_STATUS)])
    assert created(first) == [NAMES[1]]
    current = sweeps.to_json(first.status)
    again = decide(body, [], current)  # someone deleted the finished child
    assert created(again) == [NAMES[1]]
    assert again.status.children[0].phase == "Succeeded" and again.status.succeeded == 1


def test_a_name_taken_by_someone_elses_evaluation_fails_that_row() -> None:
    plan = decide(sweep_body(parallelism=1), [], conflicts=(NAMES[0],))
    assert created(plan) == [NAMES[1]]
    row = plan.status.children[0]
    assert row.phase == "Failed" and "does not belong to this sweep" in row.message


def test_invalid_sweep_status_is_failed_invalid_spec() -> None:
    st = sweeps.invalid(3, "spec.matrix.models[0]: bad", {}, NOW)
    assert st.phase == "Failed" and st.observed_generation == 3
    conds = {c.type: c for c in st.conditions}
    assert conds["Valid"].status == "False" and conds["Failed"].reason == "InvalidSpec"
    event = sweeps.change({}, st).event
    assert event is not None and (event.type, event.reason) == ("Warning", "InvalidSpec")


def test_an_unchanged_status_is_not_patched_and_posts_nothing() -> None:
    body = sweep_body()
    plan = decide(body, [child(body, NAMES[0], "Running"), child(body, NAMES[1])])
    current = sweeps.to_json(plan.status)
    later = decide(body, [child(body, NAMES[0], "Running"), child(body, NAMES[1])], current)
    change = sweeps.change(current, later.status)
    assert not change.patch and change.event is None
    conds = {c["type"]: c for c in current["conditions"]}
    assert conds["Valid"]["lastTransitionTime"] == NOW


def test_a_patch_removes_fields_the_new_status_no_longer_has() -> None:
    old = {"phase": "Running", "somethingOld": 1}
    patch = sweeps.change(old, sweeps.invalid(1, "bad", {}, NOW)).patch
    assert patch["somethingOld"] is None and patch["phase"] == "Failed"


# ------------------------------------------------------------------ reconcile, in memory


PATCHES = ("patch", "evaluationsweeps/status")


class Cluster:
    """A fake API server holding the sweep ``grid`` (and ``others``) in team-a; ``kube`` is
    the operator's client on it. ``fail_next_create_after_storing``: the next child created
    is stored but its answer is lost (the server's ``before`` hook stores it, then raises)."""

    def __init__(self, sweep: dict[str, Any], *others: dict[str, Any]) -> None:
        self.server = FakeApiServer()
        self.server.add_namespace("team-a")
        self.sweep_path = sweep_path("team-a", "grid")
        self.server.seed(sweep_path("team-a"), sweep)
        for other in others:
            self.server.seed(evaluation_path("team-a"), other)
        self.since = len(self.server.watch_log)
        self.kube = FakeKube(self.server)
        self.user = FakeKube(self.server)
        """The test's own client (what it writes and reads is not the operator's)."""
        self.fail_next_create_after_storing = False
        self.server.before = self._lose_a_create_answer

    def _lose_a_create_answer(self, request: Request) -> None:
        if self.fail_next_create_after_storing and request.key == ("create", "modelevaluations"):
            self.fail_next_create_after_storing = False
            self.server.handle(request.method, request.path, request.body, request.params)
            raise OSError("connection reset")

    @property
    def creates(self) -> list[str]:
        """The ModelEvaluations created since the cluster was seeded, in order."""
        return [
            event.key[1]
            for event in self.server.changes(self.since, "modelevaluations")
            if event.type == "ADDED"
        ]

    def status(self) -> dict[str, Any]:
        return dict(self.user.get(self.sweep_path).get("status") or {})

    def child(self, name: str) -> dict[str, Any]:
        return self.user.get(evaluation_path("team-a", name))

    def set_child_phase(self, name: str, phase: str, **status: Any) -> None:
        body = {"status": {"observedGeneration": 1, "phase": phase, **status}}
        self.user.merge_patch(evaluation_path("team-a", name) + "/status", body)


def context(cluster: Cluster, events: list[tuple[str, str]]) -> Context:
    def post(obj: Mapping[str, Any], event: evaluation_status.Event) -> None:
        events.append((event.reason, event.message))

    return Context(
        settings=OperatorSettings.from_env({}),
        kube=cluster.kube,
        post_event=post,
        clock=lambda: NOW,
    )


def test_reconcile_creates_children_runs_them_through_and_patches_only_changes() -> None:
    cluster = Cluster(sweep_body())
    events: list[tuple[str, str]] = []
    ctx = context(cluster, events)
    outcome = handle_sweep.reconcile(ctx, "team-a", "grid")
    assert cluster.creates == NAMES[:2], outcome
    assert [r for r, _ in events] == ["ChildCreated", "ChildCreated"]
    assert cluster.status()["active"] == 2 and cluster.kube.requests[PATCHES] == 1
    assert cluster.kube.requests[("create", "modelevaluations")] == 2
    handle_sweep.reconcile(ctx, "team-a", "grid")  # nothing changed: no write, no event
    assert cluster.kube.requests[PATCHES] == 1 and len(events) == 2
    assert cluster.creates == NAMES[:2]
    assert cluster.kube.requests[("create", "modelevaluations")] == 2

    for index, name in enumerate(NAMES):
        cluster.set_child_phase(name, "Succeeded", **SUCCEEDED_STATUS)
        handle_sweep.child_changed(cluster.child(name), ctx)
        assert len(cluster.creates) == min(len(NAMES), index + 3)
    st = cluster.status()
    assert st["phase"] == "Succeeded" and st["progress"] == "6/6 Succeeded"
    assert cluster.creates == NAMES
    assert events[-1][0] == "Succeeded"


def test_reconcile_is_idempotent_when_a_create_answer_was_lost() -> None:
    cluster = Cluster(sweep_body(parallelism=1))
    ctx = context(cluster, [])
    cluster.fail_next_create_after_storing = True
    with pytest.raises(OSError):
        handle_sweep.reconcile(ctx, "team-a", "grid")
    handle_sweep.reconcile(ctx, "team-a", "grid")  # the retry lists the child: no second one
    assert cluster.creates == [NAMES[0]]
    assert cluster.kube.requests[("create", "modelevaluations")] == 1
    assert cluster.status()["active"] == 1


def test_reconcile_reports_a_name_conflict_once() -> None:
    foreign = {"metadata": {"name": NAMES[0], "namespace": "team-a", "labels": {}}}
    cluster = Cluster(sweep_body(parallelism=1), foreign)
    events: list[tuple[str, str]] = []
    ctx = context(cluster, events)
    handle_sweep.reconcile(ctx, "team-a", "grid")
    handle_sweep.reconcile(ctx, "team-a", "grid")
    assert cluster.creates == [NAMES[1]]
    assert [r for r, _ in events].count("NameConflict") == 1
    assert cluster.status()["children"][0]["phase"] == "Failed"


def test_reconcile_of_an_invalid_sweep_writes_failed_and_raises() -> None:
    body = sweep_body()
    body["spec"]["matrix"]["frameworks"] = ["onnxruntime", "pytorch"]
    body["spec"]["matrix"]["models"][0]["exports"] = []  # pytorch cannot load ONNX
    cluster = Cluster(body)
    events: list[tuple[str, str]] = []
    with pytest.raises(InvalidSpecError, match=r"spec\.matrix\.models\[0\]"):
        handle_sweep.reconcile(context(cluster, events), "team-a", "grid")
    st = cluster.status()
    assert st["phase"] == "Failed" and "pytorch" in st["message"]
    assert cluster.creates == [] and [r for r, _ in events] == ["InvalidSpec"]


def test_reconcile_ignores_a_child_of_an_earlier_sweep_of_the_same_name() -> None:
    cluster = Cluster(sweep_body())
    ctx = context(cluster, [])
    orphan = child(sweep_body(), NAMES[0], "Running")
    orphan["metadata"]["ownerReferences"][0]["uid"] = "an-older-sweep"
    assert handle_sweep.child_changed(orphan, ctx) == "another sweep of that name"
    assert cluster.creates == []


def test_parse_body_ignores_server_fields() -> None:
    body = sweep_body()
    body["metadata"].update(resourceVersion="7", managedFields=[{}], finalizers=[])
    body["status"] = {"phase": "Running"}
    assert handle_sweep.parse_body(body).metadata.name == "grid"
    assert parse_sweep({**sweep_body(), "metadata": {"name": "grid"}}).spec.parallelism == 2


# ------------------------------------------------------------------------------- repeats


CELLS = ["grid-cnn-onnxruntime-b1", "grid-cnn-onnxruntime-b8"]
REPEATED = [f"{cell}-r{repeat}" for repeat in (1, 2, 3) for cell in CELLS]
"""Repeat by repeat: every cell's first repeat, then every cell's second, ..."""
P50 = {1: 0.21, 2: 0.19, 3: 0.26}
THROUGHPUT = {1: 480.0, 2: 520.0, 3: 390.0}


def repeated_body(**spec: Any) -> dict[str, Any]:
    """grid with one framework (two cells: batch sizes 1 and 8), three repeats each."""
    body = sweep_body(repeats=3, **spec)
    body["spec"]["matrix"]["frameworks"] = ["onnxruntime"]
    return body


def repeat_status(repeat: int) -> dict[str, Any]:
    """A succeeded repeat's status: its own p50 and throughput."""
    status = copy.deepcopy(SUCCEEDED_STATUS)
    status["summary"].update(p50Ms=P50[repeat], throughput=THROUGHPUT[repeat])
    return status


def scipy_median_interval(values: list[float]) -> tuple[float, float]:
    import numpy as np
    from scipy.stats import bootstrap

    found = bootstrap(
        (np.asarray(values),), np.median, method="percentile", rng=np.random.default_rng(0)
    )
    return float(found.confidence_interval.low), float(found.confidence_interval.high)


def test_without_repeats_the_status_has_no_cells() -> None:
    body = sweep_body()
    done = [child(body, n, "Succeeded", **SUCCEEDED_STATUS) for n in NAMES]
    shown = sweeps.to_json(decide(body, done).status)
    assert "cells" not in shown and "interval" not in shown
    assert all("cell" not in r and "repeat" not in r for r in shown["children"])


def test_a_failed_repeat_keeps_the_sweep_from_succeeding_and_its_cell_says_so() -> None:
    body = repeated_body(parallelism=6)
    done = [
        child(body, name, "Succeeded", **repeat_status(int(name[-1])))
        for name in REPEATED
        if name != f"{CELLS[0]}-r2"
    ]
    failed = child(body, f"{CELLS[0]}-r2", "Failed", message="OOMKilled")
    st = decide(body, [*done, failed]).status
    assert st.phase == "Failed" and (st.succeeded, st.failed, st.total) == (5, 1, 6)
    assert st.cells is not None
    first, second = st.cells
    assert (first.repeats, first.succeeded, first.failed) == (3, 2, 1)
    assert first.message == "2 of 3 repeats succeeded, 1 failed"
    assert first.p50_ms is not None and first.p50_ms.repeats == 2
    assert first.p50_ms.median == pytest.approx((P50[1] + P50[3]) / 2)
    assert (second.succeeded, second.message) == (3, "3 of 3 repeats succeeded")

    running = decide(body, [*done, child(body, f"{CELLS[0]}-r2", "Running")]).status
    assert running.phase == "Running" and running.cells is not None
    assert running.cells[0].message == "2 of 3 repeats succeeded, 1 not finished"


def test_reconcile_creates_every_repeat_and_aggregates_them_in_the_status() -> None:
    cluster = Cluster(repeated_body(parallelism=6))
    events: list[tuple[str, str]] = []
    ctx = context(cluster, events)
    handle_sweep.reconcile(ctx, "team-a", "grid")
    assert cluster.creates == REPEATED
    assert events[0] == (
        "ChildCreated",
        f"created ModelEvaluation {REPEATED[0]} (model cnn, framework onnxruntime, device cpu, "
        "scenario SingleStream, batchSize 1, repeat 1)",
    )
    for name in REPEATED:
        meta = cluster.child(name)["metadata"]
        labels = meta["labels"]
        assert labels[LABEL_SWEEP] == "grid"
        assert (labels[LABEL_CELL], labels[LABEL_REPEAT]) == (name[:-3], name[-1])
        owner = sweeps.owner_of(cluster.child(name))
        assert owner is not None and owner[1] == "grid"
    st = cluster.status()
    assert [(r["cell"], r["repeat"]) for r in st["children"]] == [
        (name[:-3], int(name[-1])) for name in REPEATED
    ]
    assert [c["name"] for c in st["cells"]] == CELLS
    assert st["cells"][0] == {
        "name": CELLS[0],
        "model": "cnn",
        "framework": "onnxruntime",
        "device": "cpu",
        "scenario": "SingleStream",
        "batchSize": 1,
        "repeats": 3,
        "succeeded": 0,
        "failed": 0,
        "message": "0 of 3 repeats succeeded, 3 not finished",
    }

    for name in REPEATED:
        cluster.set_child_phase(name, "Succeeded", **repeat_status(int(name[-1])))
        handle_sweep.child_changed(cluster.child(name), ctx)
    st = cluster.status()
    assert st["phase"] == "Succeeded" and st["progress"] == "6/6 Succeeded"
    assert st["interval"] == {
        "statistic": "median",
        "method": "percentile",
        "confidenceLevel": 0.95,
        "resamples": 9999,
        "seed": 0,
    }
    low, high = scipy_median_interval(list(P50.values()))
    for cell in st["cells"]:
        assert (cell["succeeded"], cell["message"]) == (3, "3 of 3 repeats succeeded")
        assert cell["p50Ms"] == {
            "median": 0.21,
            "low": pytest.approx(low),
            "high": pytest.approx(high),
            "repeats": 3,
        }
        assert cell["throughput"]["median"] == 480.0
        assert (cell["metric"], cell["metricValue"]) == ("top1", 0.977778)
    patches = cluster.kube.requests[PATCHES]
    handle_sweep.reconcile(ctx, "team-a", "grid")  # the same interval again: no write
    assert cluster.kube.requests[PATCHES] == patches
