"""Unit tests of the run logic shared by the handlers and the resync (issue 15): start-failure
diagnosis, Job rejection, ownership by UID, and who waits ahead in the queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from mlmodelscope.contract.kube import KubeError
from mlmodelscope.controller import names, queue, runs, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers.handle_evaluation import _waiting
from mlmodelscope.controller.settings import OperatorSettings
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


def job(age_s: float, **spec: Any) -> dict[str, Any]:
    created = (datetime.now(UTC) - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": "e-g1", "namespace": "a", "uid": "j", "creationTimestamp": created},
        "spec": spec,
        "status": {},
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
    assert _waiting(listed) == [queue.QueueEntry(T0, "a", "queued")]
