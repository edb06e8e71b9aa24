"""Unit tests of the run logic shared by the handlers and the resync (issue 15): start-failure
diagnosis, Job rejection, ownership by UID, who waits ahead in the queue, and OOM kills."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from meval_docs import evaluation_doc
from result_docs import row, summary

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import KubeError, configmap_path, evaluation_path, pod_path
from mlmodelscope.contract.wire import SUMMARY_KEY
from mlmodelscope.controller import job_state, names, runs, status
from mlmodelscope.controller.admission import admit, fifo, ledger
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_job, handle_pod
from mlmodelscope.controller.runs import Handled
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.slim import slim, slim_evaluation, slim_job
from mlmodelscope.controller.status import ConditionType, Observed, Reason

T0 = "2026-11-22T08:00:00Z"
PODS = ("list", "pods")
EVENTS = ("list", "events")


def failed_create(job_name: str = "e-g1", reason: str = "FailedCreate", **fields: Any) -> dict:
    """An Event of the Job controller about Job ``job_name`` (uid j)."""
    involved = {"kind": "Job", "name": job_name, "uid": "j"}
    return {"metadata": {"generateName": f"{job_name}."}, "involvedObject": involved,
            "reason": reason, "lastTimestamp": T0, "message": reason, **fields}  # fmt: skip


def pods_and_events(
    pods: list[dict[str, Any]], events: list[dict[str, Any]] | None = None
) -> FakeKube:
    """The two reads :func:`runs.start_failure` makes, the Job e-g1's pods and its
    FailedCreate Events, from an API server that also holds another Job's waiting pod and
    e-g1's SuccessfulCreate Event (which neither read may return); the operator's client."""
    server = FakeApiServer()
    server.add_namespace("a")
    other = waiting_pod("CreateContainerConfigError", "another Job's pod")
    for index, pod in enumerate([*pods, other]):
        job_name = "e-g1" if index < len(pods) else "f-g1"
        meta = {"name": f"{job_name}-{index}", "labels": {runs.JOB_NAME_LABEL: job_name}}
        server.seed(pod_path("a"), {**pod, "metadata": {**meta, **(pod.get("metadata") or {})}})
    for event in [*(events or []), failed_create(reason="SuccessfulCreate")]:
        server.seed("/api/v1/namespaces/a/events", event)
    return FakeKube(server)


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
    ctx = ctx_with(pods_and_events(pods))
    assert runs.start_failure(ctx, job(age_s=10)) is None  # still young
    assert runs.start_failure(ctx, job(age_s=120)) == (
        "CreateContainerConfigError",
        'CreateContainerConfigError: secret "hf" not found',
    )
    assert runs.start_failure(ctx, job(age_s=120, suspend=True)) is None  # waits for Kueue


def test_waiting_for_a_node_or_running_is_not_a_start_failure() -> None:
    unschedulable = {"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled"}]}}
    assert runs.start_failure(ctx_with(pods_and_events([unschedulable])), job(120)) is None
    creating = waiting_pod("ContainerCreating", "")
    assert runs.start_failure(ctx_with(pods_and_events([creating])), job(120)) is None
    running = waiting_pod("ImagePullBackOff", "x", phase="Running")
    assert runs.start_failure(ctx_with(pods_and_events([running])), job(120)) is None


def test_a_job_that_cannot_create_its_pod_names_the_event() -> None:
    event = failed_create(
        message='Error creating: pods "e-g1-" is forbidden: serviceaccount "nobody" not found'
    )
    found = runs.start_failure(ctx_with(pods_and_events([], [event])), job(120))
    assert found is not None and found[0] == "FailedCreate"
    assert 'serviceaccount "nobody" not found' in found[1]
    assert runs.start_failure(ctx_with(pods_and_events([], [])), job(120)) is None


def test_a_run_whose_pod_ran_lists_nothing_and_a_job_without_pods_lists_no_pods() -> None:
    """At 5,000 evaluations the Job controller counted finished pods minutes late: each resync
    tick listed the pods and the Events of thousands of Jobs whose pod had run. A pod the
    watch saw Running or Succeeded marks its Job started (no request); a Succeeded pod in the
    listing ends the check without reading Events; a Job that counts no pod is asked only for
    its FailedCreate Event."""
    started = {"status": {"phase": "Succeeded"}, "metadata": {"ownerReferences": [
        {"kind": "Job", "uid": "j", "controller": True}]}}  # fmt: skip
    kube = pods_and_events([started])
    ctx = ctx_with(kube)
    assert runs.start_failure(ctx, job(120)) is None and kube.requests == {PODS: 1}
    ctx.started_jobs.observe_pod({**started, "status": {"phase": "Pending"}})
    assert not ctx.started_jobs.shown("j", True)  # waiting is not started
    ctx.started_jobs.observe_pod(started)
    assert runs.start_failure(ctx, job(120)) is None and kube.requests == {PODS: 1}
    ctx.started_jobs.forget("j")  # its Job was deleted
    kube = pods_and_events([], [])
    ctx = ctx_with(kube)
    assert runs.start_failure(ctx, job(120, active=0)) is None and kube.requests == {EVENTS: 1}
    uncounted = job(120, active=0)
    uncounted["status"] = {"uncountedTerminatedPods": {"failed": ["p"]}}
    assert runs.start_failure(ctx, uncounted) is None
    assert kube.requests == {EVENTS: 2, PODS: 1}


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
    change = status.job_rejected(
        Observed.of({}), 1, "e-g1", 'nodeSelector: Invalid value: "a b"', T0
    )
    st = change.patch
    assert (st["phase"] == "Failed" and "jobName" not in st) or st.get("jobName") is None
    failed = next(c for c in st["conditions"] if c["type"] == ConditionType.FAILED)
    assert failed["reason"] == Reason.JOB_REJECTED and "a b" in failed["message"]
    assert change.event is not None and change.event.reason == Reason.JOB_REJECTED
    assert status.job_rejected(
        Observed.of({**st, "observedGeneration": 1}), 1, "e-g1", "x", T0
    ) == (status.NO_CHANGE)


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
        fifo.QueueEntry(T0, "a", "queued")
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


def failed_job_world(
    pods: list[dict[str, Any]], limits: dict[str, str] | None = None
) -> tuple[Context, FakeKube, list[status.Event]]:
    """An evaluation Running its Job e-g1, which failed BackoffLimitExceeded after retries;
    the agent published a partial result (one batch size) before it was killed. The Job's
    ``pods`` are stored as created at their creationTimestamp, beside another Job's pod,
    running and ready, which no read of e-g1's pods may return; ``kube`` is the operator's
    client on the fake API server."""
    server = FakeApiServer()
    server.add_namespace("a")
    evaluation = server.seed(
        evaluation_path("a"),
        {
            "metadata": {"name": "e"},
            "spec": {"hardware": {"resources": {"limits": limits or {}}}},
            "status": {"observedGeneration": 1, "phase": "Running", "jobName": "e-g1"},
        },
    )
    partial = summary(status="Failed", results=[row(1)])
    owner = {"uid": evaluation["metadata"]["uid"]}
    configmap = {
        "metadata": {"name": "e-results", "ownerReferences": [owner]},
        "data": {SUMMARY_KEY: partial.model_dump_json()},
    }
    server.seed(configmap_path("a"), configmap)
    other = lost_pod("f-g1-a", T1, phase="Running")
    other["metadata"]["labels"] = {runs.JOB_NAME_LABEL: "f-g1"}
    other["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    for pod in [*pods, other]:
        server.seed(pod_path("a"), pod)
    kube = FakeKube(server)
    events: list[status.Event] = []
    ctx = Context(
        settings=OperatorSettings(),
        kube=kube,
        post_event=lambda _, event: events.append(event),
        clock=lambda: T1,
    )
    return ctx, kube, events


def user(kube: FakeKube) -> FakeKube:
    """A client of the same API server whose requests are not the operator's."""
    return FakeKube(kube.server)


def failed_reason(kube: FakeKube) -> str:
    """The reason of the stored evaluation's Failed condition."""
    conditions = stored(kube)["status"]["conditions"]
    return str(next(c for c in conditions if c["type"] == ConditionType.FAILED)["reason"])


def stored(kube: FakeKube) -> dict[str, Any]:
    """The evaluation as the API server has it now."""
    return user(kube).get(evaluation_path("a", "e"))


def write_status(kube: FakeKube, patch: dict[str, Any]) -> None:
    user(kube).merge_patch(evaluation_path("a", "e") + "/status", {"status": patch})


def write_pod_status(kube: FakeKube, pod: str, patch: dict[str, Any]) -> None:
    user(kube).merge_patch(pod_path("a", pod) + "/status", {"status": patch})


def failed_job(kube: FakeKube | None = None, reason: str = "BackoffLimitExceeded") -> dict:
    """The Job e-g1 (uid job-uid) of ``kube``'s evaluation (else of one with uid ev-uid),
    failed with ``reason``, as its event brings it."""
    owner = stored(kube)["metadata"]["uid"] if kube is not None else "ev-uid"
    meta = {
        "name": "e-g1",
        "namespace": "a",
        "uid": "job-uid",
        "labels": names.labels("e", 1),
        "ownerReferences": [{"uid": owner}],
    }
    conditions = [{"type": "Failed", "status": "True", "reason": reason, "message": "limit"}]
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_an_oom_killed_last_attempt_ends_oomkilled_and_keeps_the_partial_result() -> None:
    pods = [attempt("e-g1-b", T1, state=OOM), attempt("e-g1-a", T0, state=OOM)]
    ctx, kube, events = failed_job_world(pods)
    assert handle_job.job_changed(failed_job(kube), ctx) is Handled.FAILED
    st = stored(kube)["status"]
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
    assert handle_job.job_changed(failed_job(kube), ctx) is Handled.FAILED
    assert failed_reason(kube) == "BackoffLimitExceeded"
    ctx, kube, _ = failed_job_world([attempt("e-g1-a", T0, state=OOM)], {"memory": "1Gi"})
    assert handle_job.job_changed(failed_job(kube, "DeadlineExceeded"), ctx) is Handled.FAILED
    assert failed_reason(kube) == "DeadlineExceeded"
    ctx, kube, _ = failed_job_world([attempt("e-g1-a", T0, state=OOM)], {"memory": "512Mi"})
    assert handle_job.job_changed(failed_job(kube), ctx) is Handled.FAILED
    assert failed_reason(kube) == "OOMKilled"
    message = stored(kube)["status"]["message"]
    assert message.endswith("(OOMKilled, exit 137); raise spec.hardware.resources.limits.memory")


def test_a_transient_api_error_is_retried_later_without_sleeping_in_the_handler() -> None:
    pods = [attempt("e-g1-a", T0, state=OOM)]
    ctx, kube, events = failed_job_world(pods)
    job = failed_job(kube)
    patches: list[str] = []

    def flaky_patch(request: Request) -> None:
        if request.key == ("patch", "modelevaluations/status"):
            patches.append(request.path)
            if len(patches) == 1:
                raise KubeError(503, "PATCH", request.path, '{"reason": "ServiceUnavailable"}')

    kube.server.before = flaky_patch
    try:
        started = time.monotonic()
        outcome = handle_job.job_progressed(job, ctx)
        assert outcome is Handled.RETRYING
        assert time.monotonic() - started < handle_job.RETRY_DELAYS[0]  # the handler returned
        assert ctx.ledger.running() == {}  # the failed Job holds no slot, noted at once
        st = stored(kube)["status"]
        deadline = time.monotonic() + 5
        while st.get("phase") != "Failed" and time.monotonic() < deadline:
            time.sleep(0.05)
            st = stored(kube)["status"]
        assert st["phase"] == "Failed" and len(patches) == 2
        assert kube.requests[("patch", "modelevaluations/status")] == 2
        assert [e.reason for e in events] == ["OOMKilled"]
    finally:
        ctx.retries.stop()


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
    replacement["metadata"].update(meta)
    ctx, kube, events = failed_job_world([gone, replacement])
    assert handle_pod.pod_changed(gone, ctx) == "disrupted"
    st = stored(kube)["status"]
    assert st["phase"] == "Pending" and "e-g1-a on node cpu-exec-0" in st["message"]
    assert [(e.type, e.reason) for e in events] == [("Warning", "PodDisrupted")]
    handle_pod.pod_changed(gone, ctx)  # its next event (deleted) says nothing new
    assert len(events) == 1
    write_pod_status(kube, "e-g1-b", {"phase": "Running"})
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
    replacement["metadata"].update(meta)
    ctx, kube, events = failed_job_world([gone, replacement])
    assert handle_pod.pod_changed(gone, ctx) == "disrupted"
    job = failed_job(kube)
    job["status"] = {"active": 1, "ready": 1}
    handle_job.job_changed(job, ctx)
    handle_pod.pod_changed(gone, ctx)
    st = stored(kube)["status"]
    assert st["phase"] == "Pending"
    assert [e.reason for e in events] == ["PodDisrupted"]
    write_pod_status(kube, "e-g1-b", {"phase": "Running", "conditions": ready})
    assert handle_job.job_changed(job, ctx) == "running"
    assert stored(kube)["status"]["phase"] == "Running"


def test_a_job_deleted_because_the_spec_changed_does_not_fail_the_run_it_replaced() -> None:
    """A spec edit's handler deletes the running Job of generation 1; its DELETED event can
    arrive before the status names generation 2. That run was replaced, not failed: no
    Failed/JobDeleted (kubectl wait --for=condition=Failed must not fire), no Event. A Job
    deleted with the spec unchanged still fails its run."""
    ctx, kube, events = failed_job_world([])
    user(kube).delete(configmap_path("a", "e-results"))  # nothing published
    running = {**failed_job(kube), "status": {"active": 1}}
    user(kube).merge_patch(evaluation_path("a", "e"), {"spec": {"timeout": "5m"}})
    assert stored(kube)["metadata"]["generation"] == 2
    assert handle_job.job_changed(running, ctx, deleted=True) is Handled.REPLACED
    assert stored(kube)["status"]["phase"] == "Running" and events == []
    ctx, kube, events = failed_job_world([])  # the same, with the spec unchanged
    user(kube).delete(configmap_path("a", "e-results"))
    running = {**failed_job(kube), "status": {"active": 1}}
    assert stored(kube)["metadata"]["generation"] == 1
    assert handle_job.job_changed(running, ctx, deleted=True) is Handled.FAILED
    assert stored(kube)["status"]["phase"] == "Failed"
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
    assert job_state.is_suspended(kept) and "managedFields" in job["metadata"]  # a copy
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

    def unfinished(name: str) -> dict[str, Any]:
        st = {"observedGeneration": 1, "phase": "Pending", "jobName": f"{name}-g1"}
        return {"metadata": {"name": name, "namespace": "a", "generation": 1}, "status": st}

    listing = admit.Listing()
    for name in ("e1", "e2"):
        listing.evaluations["a", name] = unfinished(name)
        listing.jobs["a", f"{name}-g1"] = {"metadata": {"name": f"{name}-g1"}}
    assert listing.jobs["a", "e1-g1"] == {"metadata": {"name": "e1-g1"}}  # kept encoded
    assert listing.jobs._packed["a", "e1-g1"] == '{"metadata":{"name":"e1-g1"}}'
    seen: list[tuple[str, list[tuple[str, str]]]] = []

    def reconciled(ctx: Context, evaluation: dict[str, Any], listed: dict[Any, Any]) -> Handled:
        seen.append((evaluation["metadata"]["name"], sorted(listed)))
        return Handled.WAITING

    monkeypatch.setattr(admit, "sync_ledger", lambda ctx, **_: listing)
    monkeypatch.setattr(admit, "admit_queued", lambda ctx: [])
    monkeypatch.setattr(resync, "resync_one", reconciled)
    resync.EvaluationResync(ctx_with(None)).tick()
    assert seen == [("e1", [("a", "e1-g1"), ("a", "e2-g1")]), ("e2", [("a", "e2-g1")])]
    assert len(listing.evaluations) == 0 and len(listing.jobs) == 0


def test_the_resync_reads_the_evaluations_from_the_watch_and_lists_them_every_tenth_tick(
    monkeypatch: Any,
) -> None:
    """The API server encodes the evaluations for the first tick and every LIST_EVERY-th;
    the ticks between read what the watch delivered. The listing forgets an evaluation whose
    deletion the watch missed."""
    from mlmodelscope.controller import resync

    server = FakeApiServer()
    server.add_namespace("a")
    kube = FakeKube(server)
    ctx = ctx_with(kube)
    docs = {}
    for name in ("e1", "e2"):
        doc = evaluation_doc(name=name, namespace="a")
        doc["status"] = {"observedGeneration": 1, "phase": "Pending", "jobName": f"{name}-g1"}
        docs[name] = server.seed(evaluation_path("a"), doc)
        ctx.watched.observe(docs[name])  # as the evaluation watch delivered it
    seen: list[str] = []

    def reconciled(ctx: Context, evaluation: dict[str, Any], listed: Any) -> Handled:
        seen.append(evaluation["metadata"]["name"])
        return Handled.WAITING

    monkeypatch.setattr(resync, "resync_one", reconciled)
    ticking = resync.EvaluationResync(ctx)
    ticking.tick()
    assert seen == ["e1", "e2"] and kube.requests[("list", "modelevaluations")] == 1
    server.handle("DELETE", evaluation_path("a", "e2"), None, {})  # the watch never said so
    for _ in range(resync.LIST_EVERY - 1):
        seen.clear()
        ticking.tick()
        assert seen == ["e1", "e2"]  # read from the watch, which missed the deletion
    assert kube.requests[("list", "modelevaluations")] == 1
    seen.clear()
    ticking.tick()  # the tenth after the first lists again
    assert kube.requests[("list", "modelevaluations")] == 2
    assert seen == ["e1"] and ctx.watched.get("a", "e2") is None


def test_a_failed_run_the_resync_finds_reads_the_spec_its_copy_left_out() -> None:
    """The resync keeps no spec of what it listed; ending a failed run reads the memory limit
    from the spec, so it reads the evaluation again: the message names the spec's limit."""
    ctx, kube, _ = failed_job_world([attempt("e-g1-a", T0, state=OOM)], {"memory": "512Mi"})
    job = failed_job(kube)
    listed = slim_evaluation(stored(kube))
    assert "spec" not in listed
    assert handle_job.job_changed(job, ctx, listed=listed) is Handled.FAILED
    assert failed_reason(kube) == "OOMKilled"
    assert kube.requests[("get", "modelevaluations")] == 1
    message = stored(kube)["status"]["message"]
    assert message.endswith("(OOMKilled, exit 137); raise spec.hardware.resources.limits.memory")


def test_a_run_whose_status_shows_it_waits_for_a_node_lists_no_pods_for_a_start_failure() -> None:
    """Past the start timeout, every Job event and resync tick asked start_failure, which
    lists the Job's pods; at 5,000 evaluations on a 110-pod node that was thousands of pod
    LISTs per tick. A run whose status shows the scheduler's "unschedulable" waits for a node,
    which is not a start failure: nothing is listed. Without it, the pods are checked."""
    pending = {"metadata": {"name": "e-g1-a", "labels": {runs.JOB_NAME_LABEL: "e-g1"}},
               "status": {"phase": "Pending"}}  # fmt: skip
    ctx, kube, _ = failed_job_world([pending])
    ctx.settings = OperatorSettings(start_timeout_seconds=60)
    pending_status = {**stored(kube)["status"], "phase": "Pending"}
    change = status.unschedulable(
        Observed.of(pending_status), 1, "e-g1", "0/5 nodes are available", T1
    )
    write_status(kube, {"phase": "Pending", **change.patch})
    assert status.waits_for_a_node(status.read_status(stored(kube)["status"]), 1, "e-g1")
    old = {**failed_job(kube), "status": {"active": 1}}
    old["metadata"]["creationTimestamp"] = job(age_s=120)["metadata"]["creationTimestamp"]
    listed: list[str] = []

    def pod_lists(request: Request) -> None:
        if request.key == PODS:
            listed.append(request.path)

    kube.server.before = pod_lists
    assert handle_job.job_changed(old, ctx) == "waiting for a node" and listed == []
    write_status(kube, {"conditions": []})
    assert handle_job.job_changed(old, ctx) == "waiting"
    assert listed == ["/api/v1/namespaces/a/pods"]
