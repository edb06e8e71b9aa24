"""Unit tests of the run logic shared by the handlers and the resync (issue 15): start-failure
diagnosis, Job rejection, ownership by UID, who waits ahead in the queue, and OOM kills."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from result_docs import row, summary

from mlmodelscope.contract.kube import KubeError, configmap_path, evaluation_path
from mlmodelscope.contract.wire import SUMMARY_KEY
from mlmodelscope.controller import ledger, names, queue, runs, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_job, handle_pod
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.slim import slim, slim_evaluation, slim_job
from mlmodelscope.controller.status import ConditionType, Reason

T0 = "2026-11-22T08:00:00Z"


class PodsAndEvents:
    """The two reads :func:`runs.start_failure` makes: the Job's pods and its Events."""

    def __init__(self, pods: list[dict[str, Any]], events: list[dict[str, Any]] | None = None):
        self.pods = pods
        self.events = events or []

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        assert label_selector == f"{runs.JOB_NAME_LABEL}=e-g1"
        return self.pods

    def request(self, method: str, path: str, params: dict[str, str]) -> dict[str, Any]:
        assert "reason=FailedCreate" in params["fieldSelector"]
        return {"items": self.events}


def ctx_with(kube: Any, timeout: float = 60.0) -> Context:
    return Context(settings=OperatorSettings(start_timeout_seconds=timeout), kube=kube)


def job(age_s: float, active: int = 1, **spec: Any) -> dict[str, Any]:
    """A Job whose controller counts ``active`` pods (a pod that waits to start counts)."""
    created = (datetime.now(UTC) - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": "e-g1", "namespace": "a", "uid": "j", "creationTimestamp": created},
        "spec": spec,
        "status": {"active": active} if active else {},
    }


def waiting_pod(reason: str, message: str, phase: str = "Pending") -> dict[str, Any]:
    state = {"waiting": {"reason": reason, "message": message}}
    return {"status": {"phase": phase, "containerStatuses": [{"name": "agent", "state": state}]}}


def test_a_container_that_cannot_start_is_named_after_the_start_timeout() -> None:
    pods = [waiting_pod("CreateContainerConfigError", 'secret "hf" not found')]
    ctx = ctx_with(PodsAndEvents(pods))
    assert runs.start_failure(ctx, job(age_s=10)) is None  # still young
    assert runs.start_failure(ctx, job(age_s=120)) == (
        "CreateContainerConfigError",
        'CreateContainerConfigError: secret "hf" not found',
    )
    assert runs.start_failure(ctx, job(age_s=120, suspend=True)) is None  # waits for Kueue


def test_waiting_for_a_node_or_running_is_not_a_start_failure() -> None:
    unschedulable = {"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled"}]}}
    assert runs.start_failure(ctx_with(PodsAndEvents([unschedulable])), job(120)) is None
    creating = waiting_pod("ContainerCreating", "")
    assert runs.start_failure(ctx_with(PodsAndEvents([creating])), job(120)) is None
    running = waiting_pod("ImagePullBackOff", "x", phase="Running")
    assert runs.start_failure(ctx_with(PodsAndEvents([running])), job(120)) is None


def test_a_job_that_cannot_create_its_pod_names_the_event() -> None:
    event = {
        "involvedObject": {"uid": "j"},
        "lastTimestamp": T0,
        "message": 'Error creating: pods "e-g1-" is forbidden: serviceaccount "nobody" not found',
    }
    found = runs.start_failure(ctx_with(PodsAndEvents([], [event])), job(120))
    assert found is not None and found[0] == "FailedCreate"
    assert 'serviceaccount "nobody" not found' in found[1]
    assert runs.start_failure(ctx_with(PodsAndEvents([], [])), job(120)) is None


class Counted(PodsAndEvents):
    """Counts the pod LISTs and Event reads."""

    def __init__(self, pods: list[dict[str, Any]], events: list[dict[str, Any]] | None = None):
        super().__init__(pods, events)
        self.reads: list[str] = []

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        self.reads.append("pods")
        return super().list(path, label_selector)

    def request(self, method: str, path: str, params: dict[str, str]) -> dict[str, Any]:
        self.reads.append("events")
        return super().request(method, path, params)


def test_a_run_whose_pod_ran_lists_nothing_and_a_job_without_pods_lists_no_pods() -> None:
    """At 5,000 evaluations the Job controller counted finished pods minutes late: each resync
    tick listed the pods and the Events of thousands of Jobs whose pod had run. A pod the
    watch saw Running or Succeeded marks its Job started (no request); a Succeeded pod in the
    listing ends the check without reading Events; a Job that counts no pod is asked only for
    its FailedCreate Event."""
    started = {"status": {"phase": "Succeeded"}, "metadata": {"ownerReferences": [
        {"kind": "Job", "uid": "j", "controller": True}]}}  # fmt: skip
    kube = Counted([started])
    ctx = ctx_with(kube)
    assert runs.start_failure(ctx, job(120)) is None and kube.reads == ["pods"]
    ctx.started_jobs.observe_pod({**started, "status": {"phase": "Pending"}})
    assert not ctx.started_jobs.shown("j", True)  # waiting is not started
    ctx.started_jobs.observe_pod(started)
    assert runs.start_failure(ctx, job(120)) is None and kube.reads == ["pods"]
    ctx.started_jobs.forget("j")  # its Job was deleted
    kube = Counted([], [])
    ctx = ctx_with(kube)
    assert runs.start_failure(ctx, job(120, active=0)) is None and kube.reads == ["events"]
    uncounted = job(120, active=0)
    uncounted["status"] = {"uncountedTerminatedPods": {"failed": ["p"]}}
    assert runs.start_failure(ctx, uncounted) is None
    assert kube.reads == ["events", "pods", "events"]


def test_which_api_answers_are_a_rejection() -> None:
    def answer(code: int, message: str) -> KubeError:
        return KubeError(code, "POST", "/jobs", f'{{"message": "{message}"}}')

    assert runs.is_rejection(answer(422, "Job.batch is invalid"))
    assert runs.is_rejection(answer(400, "cannot unmarshal number into int32"))
    assert runs.is_rejection(answer(403, "forbidden: violates PodSecurity"))
    assert not runs.is_rejection(answer(403, "exceeded quota: jobs"))
    assert not runs.is_rejection(answer(409, "conflict"))
    assert not runs.is_rejection(answer(500, "etcd"))


def test_children_are_matched_by_owner_uid() -> None:
    child = {"metadata": {"ownerReferences": [{"uid": "old"}]}}
    assert names.owned_by(child, "old")
    assert not names.owned_by(child, "new")
    assert not names.owned_by(None, "new") and not names.owned_by(child, None)


def test_a_rejected_job_ends_failed_without_naming_a_job() -> None:
    change = status.job_rejected({}, 1, "e-g1", 'nodeSelector: Invalid value: "a b"', T0)
    st = change.patch
    assert (st["phase"] == "Failed" and "jobName" not in st) or st.get("jobName") is None
    failed = next(c for c in st["conditions"] if c["type"] == ConditionType.FAILED)
    assert failed["reason"] == Reason.JOB_REJECTED and "a b" in failed["message"]
    assert change.event is not None and change.event.reason == Reason.JOB_REJECTED
    assert status.job_rejected({**st, "observedGeneration": 1}, 1, "e-g1", "x", T0) == (
        status.NO_CHANGE
    )


def test_only_queued_evaluations_wait_ahead() -> None:
    def item(name: str, st: dict[str, Any]) -> dict[str, Any]:
        meta = {"name": name, "namespace": "a", "generation": 1, "creationTimestamp": T0}
        return {"metadata": meta, "status": st}

    listed = [
        item("never-got-a-status", {}),
        item("queued", {"observedGeneration": 1, "phase": "Queued"}),
        item("old-queued", {"observedGeneration": 0, "phase": "Queued"}),
        item("running", {"observedGeneration": 1, "phase": "Running"}),
    ]
    assert [e for e in map(ledger.waiting_entry, listed) if e] == [
        queue.QueueEntry(T0, "a", "queued")
    ]


# ------------------------------------------------------------------ defect 7: OOMKilled


def attempt(
    name: str,
    created: str,
    *,
    state: dict[str, Any] | None = None,
    last_state: dict[str, Any] | None = None,
    init: dict[str, Any] | None = None,
    limit: str | None = "512Mi",
) -> dict[str, Any]:
    """One pod of the Job as the kubelet leaves it: the agent's state and last state, an init
    container ``fetch`` (limit 128Mi) when ``init`` gives its state, and the agent's limit."""
    resources = {"limits": {"memory": limit}} if limit else {}
    spec: dict[str, Any] = {"containers": [{"name": "agent", "resources": resources}]}
    agent: dict[str, Any] = {"name": "agent", "state": state or {}}
    if last_state is not None:
        agent["lastState"] = last_state
    pod_status: dict[str, Any] = {"phase": "Failed", "containerStatuses": [agent]}
    if init is not None:
        spec["initContainers"] = [{"name": "fetch", "resources": {"limits": {"memory": "128Mi"}}}]
        pod_status["initContainerStatuses"] = [{"name": "fetch", "state": init}]
    meta = {
        "name": name,
        "namespace": "a",
        "creationTimestamp": created,
        "labels": {runs.JOB_NAME_LABEL: "e-g1"},
        "ownerReferences": [{"uid": "job-uid"}],
    }
    return {"metadata": meta, "spec": spec, "status": pod_status}


def ended(reason: str, exit_code: int = 137) -> dict[str, Any]:
    return {"terminated": {"reason": reason, "exitCode": exit_code, "message": "log tail"}}


OOM = ended("OOMKilled")
T1 = "2026-11-22T08:01:00Z"


def test_an_oom_killed_agent_is_named_with_its_memory_limit() -> None:
    kill = runs.oom_kill([attempt("e-g1-a", T0, state=OOM)])
    assert kill == runs.OOMKill("e-g1-a", container="agent", exit_code=137, memory_limit="512Mi")
    assert runs.oom_message(kill) == (
        "the agent was killed for exceeding its memory limit of 512Mi (OOMKilled, exit 137); "
        "raise spec.hardware.resources.limits.memory"
    )
    assert runs.oom_message(kill, limit_from_spec=False) == (
        "the agent was killed for exceeding its memory limit of 512Mi (OOMKilled, exit 137), "
        "which the operator set because the spec sets none; set "
        "spec.hardware.resources.limits.memory above it"
    )
    assert runs.oom_kill([attempt("e-g1-a", T0, state=ended("Error", 1))]) is None
    assert runs.oom_kill([]) is None


def test_oom_kills_are_found_in_the_last_state_and_in_init_containers() -> None:
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
    restarted = runs.oom_kill([attempt("p", T0, state=waiting, last_state=OOM)])
    assert restarted is not None and restarted.container == "agent"
    # The current termination is the latest: an OOM kill before a later plain exit is not it.
    assert runs.oom_kill([attempt("p", T0, state=ended("Error", 1), last_state=OOM)]) is None
    init = runs.oom_kill([attempt("p", T0, state=waiting, init=OOM)])
    assert init == runs.OOMKill("p", "fetch", 137, "128Mi")
    assert runs.oom_message(init) == (
        "container fetch was killed for exceeding its memory limit of 128Mi (OOMKilled, exit "
        "137); it is not the agent's container, so its own limit must rise"
    )


def test_with_retries_only_the_last_attempt_decides() -> None:
    oom_then_error = [attempt("b", T1, state=ended("Error", 1)), attempt("a", T0, state=OOM)]
    assert runs.oom_kill(oom_then_error) is None
    error_then_oom = [attempt("b", T1, state=OOM), attempt("a", T0, state=ended("Error", 1))]
    kill = runs.oom_kill(error_then_oom)
    assert kill is not None and kill.pod == "b"


def test_an_oom_kill_without_a_limit_says_the_node_ran_out() -> None:
    kill = runs.oom_kill([attempt("p", T0, state=OOM, limit=None)])
    assert kill is not None and kill.memory_limit is None
    message = runs.oom_message(kill)
    assert "without a memory limit: its node ran out of memory" in message
    assert "spec.hardware.resources.limits.memory" in message


class FakeKube:
    """Objects by API path: what the Job handler reads and the status patches it writes."""

    def __init__(self, objects: dict[str, dict[str, Any]], pods: list[dict[str, Any]]):
        self.objects = objects
        self.pods = pods

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        return self.objects.get(path)

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        assert path == "/api/v1/namespaces/a/pods"
        assert label_selector == f"{runs.JOB_NAME_LABEL}=e-g1"
        return self.pods

    def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        target = self.objects[path.removesuffix("/status")]
        target["status"] = {**target.get("status", {}), **body["status"]}
        return target


def failed_job_world(
    pods: list[dict[str, Any]], limits: dict[str, str] | None = None
) -> tuple[Context, FakeKube, list[status.Event]]:
    """An evaluation Running its Job e-g1, which failed BackoffLimitExceeded after retries;
    the agent published a partial result (one batch size) before it was killed."""
    evaluation = {
        "metadata": {"name": "e", "namespace": "a", "uid": "ev-uid", "generation": 1},
        "spec": {"hardware": {"resources": {"limits": limits or {}}}},
        "status": {"observedGeneration": 1, "phase": "Running", "jobName": "e-g1"},
    }
    partial = summary(status="Failed", results=[row(1)])
    configmap = {
        "metadata": {"ownerReferences": [{"uid": "ev-uid"}]},
        "data": {SUMMARY_KEY: partial.model_dump_json()},
    }
    kube = FakeKube(
        {
            evaluation_path("a", "e"): evaluation,
            configmap_path("a", "e-results"): configmap,
        },
        pods,
    )
    events: list[status.Event] = []
    ctx = Context(
        settings=OperatorSettings(),
        kube=kube,
        post_event=lambda _, event: events.append(event),
        clock=lambda: T1,
    )
    return ctx, kube, events


def failed_job(reason: str = "BackoffLimitExceeded") -> dict[str, Any]:
    meta = {
        "name": "e-g1",
        "namespace": "a",
        "uid": "job-uid",
        "labels": names.labels("e", 1),
        "ownerReferences": [{"uid": "ev-uid"}],
    }
    conditions = [{"type": "Failed", "status": "True", "reason": reason, "message": "limit"}]
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_an_oom_killed_last_attempt_ends_oomkilled_and_keeps_the_partial_result() -> None:
    pods = [attempt("e-g1-b", T1, state=OOM), attempt("e-g1-a", T0, state=OOM)]
    ctx, kube, events = failed_job_world(pods)
    assert handle_job.job_changed(failed_job(), ctx) == "OOMKilled"
    st = kube.objects[evaluation_path("a", "e")]["status"]
    failed = next(c for c in st["conditions"] if c["type"] == ConditionType.FAILED)
    assert st["phase"] == "Failed" and failed["reason"] == "OOMKilled"
    assert (
        st["message"]
        == failed["message"]
        == runs.oom_message(runs.OOMKill("e-g1-b", "agent", 137, "512Mi"), limit_from_spec=False)
    )
    assert [(e.type, e.reason) for e in events] == [("Warning", "OOMKilled")]
    assert [r["batchSize"] for r in st["results"]] == [1] and st["runId"] == "5d2c"


def test_the_oom_reason_needs_the_jobs_own_last_pod_and_no_deadline() -> None:
    foreign = attempt("e-g1-x", T1, state=OOM)
    foreign["metadata"]["ownerReferences"] = [{"uid": "an-earlier-job"}]
    ctx, kube, _ = failed_job_world([foreign, attempt("e-g1-a", T0, state=ended("Error", 1))])
    assert handle_job.job_changed(failed_job(), ctx) == "BackoffLimitExceeded"
    ctx, kube, _ = failed_job_world([attempt("e-g1-a", T0, state=OOM)], {"memory": "1Gi"})
    assert handle_job.job_changed(failed_job("DeadlineExceeded"), ctx) == "DeadlineExceeded"
    ctx, kube, _ = failed_job_world([attempt("e-g1-a", T0, state=OOM)], {"memory": "512Mi"})
    assert handle_job.job_changed(failed_job(), ctx) == "OOMKilled"
    message = kube.objects[evaluation_path("a", "e")]["status"]["message"]
    assert message.endswith("(OOMKilled, exit 137); raise spec.hardware.resources.limits.memory")


def test_a_transient_api_error_is_retried_later_without_sleeping_in_the_handler() -> None:
    pods = [attempt("e-g1-a", T0, state=OOM)]
    ctx, kube, events = failed_job_world(pods)
    patches: list[str] = []
    patch = kube.merge_patch

    def flaky_patch(path: str, body: dict[str, Any]) -> dict[str, Any]:
        patches.append(path)
        if len(patches) == 1:
            raise KubeError(503, "PATCH", path, '{"reason": "ServiceUnavailable"}')
        return patch(path, body)

    kube.merge_patch = flaky_patch  # type: ignore[method-assign]
    try:
        started = time.monotonic()
        outcome = handle_job.job_progressed(failed_job(), ctx)
        assert outcome == f"retrying in {handle_job.RETRY_DELAYS[0]:.1f}s"
        assert time.monotonic() - started < handle_job.RETRY_DELAYS[0]  # the handler returned
        assert ctx.ledger.running() == {}  # the failed Job holds no slot, noted at once
        st = kube.objects[evaluation_path("a", "e")]["status"]
        deadline = time.monotonic() + 5
        while st.get("phase") != "Failed" and time.monotonic() < deadline:
            time.sleep(0.05)
            st = kube.objects[evaluation_path("a", "e")]["status"]
        assert st["phase"] == "Failed" and len(patches) == 2
        assert [e.reason for e in events] == ["OOMKilled"]
    finally:
        ctx.later.stop()


def lost_pod(name: str, created: str, phase: str = "Failed", **condition: str) -> dict[str, Any]:
    conditions = [{"type": "DisruptionTarget", "status": "True", **condition}] if condition else []
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"nodeName": "cpu-exec-0"},
        "status": {"phase": phase, "conditions": conditions},
    }


def test_a_pod_whose_node_was_deleted_is_a_disruption_naming_pod_node_and_reason() -> None:
    pod = lost_pod(
        "e-g1-abcde", T0, reason="DeletionByPodGC", message="PodGC: node no longer exists"
    )
    lost = runs.disruption(pod)
    assert lost == runs.Disruption(
        "e-g1-abcde", "cpu-exec-0", "DeletionByPodGC", "PodGC: node no longer exists"
    )
    assert runs.disruption_message(lost, "e-g1", counted=False) == (
        "evaluation pod e-g1-abcde on node cpu-exec-0 was disrupted (DeletionByPodGC: PodGC: "
        "node no longer exists); Job e-g1 replaces it without counting it against spec.retries"
    )
    assert runs.disruption_message(lost, "e-g1", counted=True).endswith(
        "Job e-g1 replaces it if spec.retries allows"
    )
    assert runs.disruption(lost_pod("e-g1-fghij", T0)) is None  # failed, not disrupted
    false = lost_pod("e-g1-klmno", T0, reason="x")
    false["status"]["conditions"][0]["status"] = "False"
    assert runs.disruption(false) is None


def test_news_of_a_disrupted_pod_is_stale_once_a_later_attempt_runs() -> None:
    old = lost_pod("e-g1-aaaaa", T0, reason="DeletionByPodGC")
    later = "2026-11-22T08:01:00Z"
    waiting = lost_pod("e-g1-bbbbb", later, phase="Pending")
    assert not runs.superseded(old, [old, waiting])  # the replacement does not run yet
    running = lost_pod("e-g1-bbbbb", later, phase="Running")
    assert runs.superseded(old, [old, running])
    assert not runs.superseded(running, [old, running])  # an earlier pod never supersedes


def test_the_pod_handler_reports_a_disruption_unless_a_later_attempt_runs() -> None:
    meta = {"labels": {**names.labels("e", 1), runs.JOB_NAME_LABEL: "e-g1"}, "namespace": "a"}
    gone = lost_pod("e-g1-a", T0, reason="DeletionByPodGC", message="PodGC: node no longer exists")
    gone["metadata"].update(meta)
    replacement = lost_pod("e-g1-b", T1, phase="Pending")
    ctx, kube, events = failed_job_world([gone, replacement])
    assert handle_pod.pod_changed(gone, ctx) == "disrupted"
    st = kube.objects[evaluation_path("a", "e")]["status"]
    assert st["phase"] == "Pending" and "e-g1-a on node cpu-exec-0" in st["message"]
    assert [(e.type, e.reason) for e in events] == [("Warning", "PodDisrupted")]
    handle_pod.pod_changed(gone, ctx)  # its next event (deleted) says nothing new
    assert len(events) == 1
    kube.pods[1]["status"]["phase"] = "Running"
    assert handle_pod.pod_changed(gone, ctx) == "disrupted, superseded"


def test_a_ready_count_of_the_lost_pod_does_not_flip_a_disrupted_run_back_to_running() -> None:
    """The Job still counts the disrupted pod ready (its node is gone, nobody updates it):
    the run stays Pending, one PodDisrupted Warning, until a live replacement is ready."""
    meta = {"labels": {**names.labels("e", 1), runs.JOB_NAME_LABEL: "e-g1"}, "namespace": "a"}
    ready = [{"type": "Ready", "status": "True"}]
    gone = lost_pod("e-g1-a", T0, phase="Running", reason="DeletionByPodGC", message="gone")
    gone["metadata"].update(meta)
    gone["status"]["conditions"] += ready
    replacement = lost_pod("e-g1-b", T1, phase="Pending")
    ctx, kube, events = failed_job_world([gone, replacement])
    assert handle_pod.pod_changed(gone, ctx) == "disrupted"
    job = failed_job()
    job["status"] = {"active": 1, "ready": 1}
    handle_job.job_changed(job, ctx)
    handle_pod.pod_changed(gone, ctx)
    st = kube.objects[evaluation_path("a", "e")]["status"]
    assert st["phase"] == "Pending"
    assert [e.reason for e in events] == ["PodDisrupted"]
    kube.pods[1]["status"] = {"phase": "Running", "conditions": ready}
    assert handle_job.job_changed(job, ctx) == "running"
    assert kube.objects[evaluation_path("a", "e")]["status"]["phase"] == "Running"


def test_a_job_deleted_because_the_spec_changed_does_not_fail_the_run_it_replaced() -> None:
    """A spec edit's handler deletes the running Job of generation 1; its DELETED event can
    arrive before the status names generation 2. That run was replaced, not failed: no
    Failed/JobDeleted (kubectl wait --for=condition=Failed must not fire), no Event. A Job
    deleted with the spec unchanged still fails its run."""
    ctx, kube, events = failed_job_world([])
    evaluation = kube.objects[evaluation_path("a", "e")]
    kube.objects.pop(configmap_path("a", "e-results"))  # nothing published
    running = {**failed_job(), "status": {"active": 1}}
    evaluation["metadata"]["generation"] = 2
    assert handle_job.job_changed(running, ctx, deleted=True) == "replaced"
    assert evaluation["status"]["phase"] == "Running" and events == []
    evaluation["metadata"]["generation"] = 1
    assert handle_job.job_changed(running, ctx, deleted=True) == "job deleted"
    assert evaluation["status"]["phase"] == "Failed"
    assert [e.reason for e in events] == ["JobDeleted"]


def test_the_resync_keeps_slim_copies_of_what_it_listed() -> None:
    """The resync holds every unfinished evaluation and its Job for a whole tick: it keeps
    them without managedFields and the Job without its pod template, which nothing reads."""
    managed = [{"manager": "kube-controller-manager", "fieldsV1": {"f:status": {}}}]
    job = failed_job()
    job["metadata"]["managedFields"] = managed
    job["spec"] = {"suspend": True, "template": {"spec": {"containers": [{"name": "agent"}]}}}
    kept = slim_job(job)
    assert kept["spec"] == {"suspend": True} and "managedFields" not in kept["metadata"]
    assert kept["status"] == job["status"] and kept["metadata"]["labels"] == names.labels("e", 1)
    assert queue.is_suspended(kept) and "managedFields" in job["metadata"]  # a copy
    evaluation = {
        "kind": "ModelEvaluation",
        "metadata": {"name": "e", "managedFields": managed},
        "spec": {"timeout": "1h"},
        "status": {"phase": "Pending"},
    }
    assert slim(evaluation) == {**evaluation, "metadata": {"name": "e"}}
    assert slim_evaluation(evaluation) == {
        "kind": "ModelEvaluation",
        "metadata": {"name": "e"},
        "status": {"phase": "Pending"},
    }


def test_a_resync_tick_drops_each_copy_once_it_is_reconciled(monkeypatch: Any) -> None:
    """The tick holds the listing's copies, encoded, only until each is reconciled, so its
    memory shrinks as it goes (at 5,000 a tick that checks start failures lasts minutes)."""
    from mlmodelscope.controller import resync
    from mlmodelscope.controller.handlers import handle_evaluation

    def unfinished(name: str) -> dict[str, Any]:
        st = {"observedGeneration": 1, "phase": "Pending", "jobName": f"{name}-g1"}
        return {"metadata": {"name": name, "namespace": "a", "generation": 1}, "status": st}

    listing = handle_evaluation.Listing()
    for name in ("e1", "e2"):
        listing.evaluations["a", name] = unfinished(name)
        listing.jobs["a", f"{name}-g1"] = {"metadata": {"name": f"{name}-g1"}}
    assert listing.jobs["a", "e1-g1"] == {"metadata": {"name": "e1-g1"}}  # kept encoded
    assert listing.jobs._packed["a", "e1-g1"] == '{"metadata":{"name":"e1-g1"}}'
    seen: list[tuple[str, list[tuple[str, str]]]] = []

    def reconciled(ctx: Context, evaluation: dict[str, Any], listed: dict[Any, Any]) -> str:
        seen.append((evaluation["metadata"]["name"], sorted(listed)))
        return "waiting"

    monkeypatch.setattr(handle_evaluation, "sync_ledger", lambda ctx: listing)
    monkeypatch.setattr(handle_evaluation, "admit_queued", lambda ctx: [])
    monkeypatch.setattr(resync, "resync_one", reconciled)
    resync.EvaluationResync(ctx_with(None)).tick()
    assert seen == [("e1", [("a", "e1-g1"), ("a", "e2-g1")]), ("e2", [("a", "e2-g1")])]
    assert len(listing.evaluations) == 0 and len(listing.jobs) == 0


def test_a_failed_run_the_resync_finds_reads_the_spec_its_copy_left_out() -> None:
    """The resync keeps no spec of what it listed; ending a failed run reads the memory limit
    from the spec, so it reads the evaluation again: the message names the spec's limit."""
    ctx, kube, _ = failed_job_world([attempt("e-g1-a", T0, state=OOM)], {"memory": "512Mi"})
    evaluation = kube.objects[evaluation_path("a", "e")]
    reads: list[str] = []
    get = kube.get_or_none

    def counted(path: str) -> dict[str, Any] | None:
        reads.append(path)
        return get(path)

    kube.get_or_none = counted  # type: ignore[method-assign]
    listed = slim_evaluation(evaluation)
    assert "spec" not in listed
    assert handle_job.job_changed(failed_job(), ctx, listed=listed) == "OOMKilled"
    assert reads.count(evaluation_path("a", "e")) == 1
    message = evaluation["status"]["message"]
    assert message.endswith("(OOMKilled, exit 137); raise spec.hardware.resources.limits.memory")


def test_a_run_whose_status_shows_it_waits_for_a_node_lists_no_pods_for_a_start_failure() -> None:
    """Past the start timeout, every Job event and resync tick asked start_failure, which
    lists the Job's pods; at 5,000 evaluations on a 110-pod node that was thousands of pod
    LISTs per tick. A run whose status shows the scheduler's "unschedulable" waits for a node,
    which is not a start failure: nothing is listed. Without it, the pods are checked."""
    ctx, kube, _ = failed_job_world([])
    ctx.settings = OperatorSettings(start_timeout_seconds=60)
    evaluation = kube.objects[evaluation_path("a", "e")]
    evaluation["status"]["phase"] = "Pending"
    change = status.unschedulable(evaluation["status"], 1, "e-g1", "0/5 nodes are available", T1)
    evaluation["status"].update(change.patch)
    assert status.waits_for_a_node(evaluation["status"], 1, "e-g1")
    old = {**failed_job(), "status": {"active": 1}}
    old["metadata"]["creationTimestamp"] = job(age_s=120)["metadata"]["creationTimestamp"]
    listed: list[str] = []

    def pending_pods(path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        listed.append(path)
        return [{"status": {"phase": "Pending"}}]

    kube.list = pending_pods  # type: ignore[method-assign]
    assert handle_job.job_changed(old, ctx) == "waiting for a node" and listed == []
    evaluation["status"]["conditions"] = []
    assert handle_job.job_changed(old, ctx) == "waiting"
    assert listed == ["/api/v1/namespaces/a/pods"]
