"""What a cluster launch's page watches besides its phase: the Kubernetes Events of its
ModelEvaluation, of that evaluation's Job (``status.jobName``) and of the Job's pods (label
``batch.kubernetes.io/job-name``), and the tail of the agent container's log in the newest pod.

Read as the server's ServiceAccount, which may list events and pods and get ``pods/log`` in the
launch namespace only (the chart's Role). Everything the API server answers is untrusted text:
messages and log lines are redacted (:func:`~mlmodelscope.contract.redact.redact_text`) and
cut to :data:`MAX_TEXT` characters here, and escaped where they are shown. A read that fails
(no Job yet, the container not started, a 403) answers empty with the reason, never an error.

:func:`event_records` and :func:`log_lines` are pure; :func:`read_events` and :func:`read_log`
do the requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from mlmodelscope.contract.kube import (
    JOB_NAME_LABEL,
    Kube,
    KubeError,
    evaluation_path,
    namespaced,
    pod_path,
)
from mlmodelscope.contract.redact import redact_text
from mlmodelscope.contract.wire import CONTAINER_NAME

MAX_EVENTS: Final = 200
"""Events answered at most (the newest)."""
MAX_PODS: Final = 5
"""Of a Job's pods, the newest this many have their Events read (one LIST each)."""
MAX_TAIL: Final = 500
"""Log lines answered at most."""
DEFAULT_TAIL: Final = 100
MAX_LOG_BYTES: Final = 512 * 1024
"""``limitBytes`` of a log read: a tail of very long lines stays bounded."""
MAX_TEXT: Final = 4096
"""Characters kept of one Event message or one log line."""
TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
"""An OpenTelemetry trace id as the operator writes it; anything else is not linked."""
NOT_IN_CLUSTER: Final = (
    "events and the agent's log are read from the cluster: this launch runs on this server's "
    "own workers (mlms serve without --launch-namespace), whose `mlms run` output is not kept"
)


def _cut(text: object) -> str:
    value = redact_text(str(text or ""))
    return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"


@dataclass(frozen=True)
class EventRecord:
    """One Kubernetes Event, as the launch page shows it."""

    time: str | None
    """When it last happened (RFC 3339), or None when the Event says not."""
    type: str
    """Normal or Warning."""
    reason: str
    message: str
    kind: str
    """The object it is about: ModelEvaluation, Job or Pod ..."""
    name: str
    count: int

    @classmethod
    def of(cls, event: Mapping[str, Any]) -> EventRecord:
        involved = event.get("involvedObject") or {}
        meta = event.get("metadata") or {}
        series = event.get("series") or {}
        time = (
            series.get("lastObservedTime")
            or event.get("lastTimestamp")
            or event.get("eventTime")
            or event.get("firstTimestamp")
            or meta.get("creationTimestamp")
        )
        count = series.get("count") or event.get("count") or 1
        return cls(
            time=str(time)[:64] if time else None,
            type=_cut(event.get("type") or "Normal")[:32],
            reason=_cut(event.get("reason"))[:128],
            message=_cut(event.get("message")),
            kind=_cut(involved.get("kind"))[:64],
            name=_cut(involved.get("name"))[:253],
            count=int(count) if isinstance(count, int) else 1,
        )


def event_records(
    events: Iterable[Mapping[str, Any]], limit: int = MAX_EVENTS
) -> list[EventRecord]:
    """``events`` as records, oldest first (newest last), the newest ``limit`` kept; an Event
    listed twice (by uid) counts once."""
    seen: set[str] = set()
    unique = []
    for event in events:
        uid = str((event.get("metadata") or {}).get("uid") or "")
        if uid and uid in seen:
            continue
        seen.add(uid)
        unique.append(EventRecord.of(event))
    unique.sort(key=lambda r: r.time or "")
    return unique[-limit:] if limit > 0 else []


@dataclass(frozen=True)
class LaunchEvents:
    """A launch's Events, what they were read for, and why there are none where so."""

    applies: bool
    """False for a launch on this server's own workers (nothing read)."""
    job: str | None = None
    pods: tuple[str, ...] = ()
    """The Job's pods, oldest first."""
    trace_id: str | None = None
    """The evaluation's ``status.traceID``."""
    items: tuple[EventRecord, ...] = ()
    reason: str | None = None
    """Why some or all were not read."""


def newest_first(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Pod names by creation time, newest first (name breaks ties)."""
    keyed = [
        (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))
        for meta in (p.get("metadata") or {} for p in pods)
    ]
    return [name for _, name in sorted(keyed, reverse=True) if name]


def _events_of(kube: Kube, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    answer = kube.request(
        "GET",
        namespaced(namespace, "events"),
        params={"fieldSelector": selector, "limit": str(MAX_EVENTS)},
    )
    items: list[dict[str, Any]] = (answer or {}).get("items") or []
    return items


def _why(exc: Exception, what: str) -> str:
    if isinstance(exc, KubeError):
        return _cut(f"cannot read {what}: HTTP {exc.status}: {exc.message}")
    return _cut(f"cannot read {what}: {exc}")


def read_events(kube: Kube, namespace: str, evaluation: str, uid: str | None) -> LaunchEvents:
    """The Events of the evaluation (those of the object ``uid`` when given), of its Job and of
    the newest :data:`MAX_PODS` pods of that Job, newest last."""
    try:
        found = kube.get_or_none(evaluation_path(namespace, evaluation))
    except Exception as exc:  # the API server is away: say so, the page polls again
        return LaunchEvents(applies=True, reason=_why(exc, f"ModelEvaluation {evaluation}"))
    status = (found or {}).get("status") or {}
    job = status.get("jobName") if isinstance(status.get("jobName"), str) else None
    trace = status.get("traceID")
    trace = trace if isinstance(trace, str) and TRACE_ID.fullmatch(trace) else None
    reasons = [] if found is not None else [f"ModelEvaluation {namespace}/{evaluation} is gone"]
    if found is not None and job is None:
        reasons.append("no Job yet")
    pods: list[str] = []
    if job:
        try:
            pods = newest_first(kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job}"))
        except Exception as exc:
            reasons.append(_why(exc, f"the pods of Job {job}"))
    objects = [("ModelEvaluation", evaluation)]
    objects += [("Job", job)] if job else []
    objects += [("Pod", pod) for pod in pods[:MAX_PODS]]
    events: list[dict[str, Any]] = []
    for kind, name in objects:
        try:
            listed = _events_of(kube, namespace, kind, name)
        except Exception as exc:
            reasons.append(_why(exc, f"the Events of {kind} {name}"))
            continue
        if kind == "ModelEvaluation" and uid:  # not those of an earlier object of its name
            listed = [
                e for e in listed if (e.get("involvedObject") or {}).get("uid") in (None, uid)
            ]
        events += listed
    return LaunchEvents(
        applies=True,
        job=job,
        pods=tuple(reversed(pods)),
        trace_id=trace,
        items=tuple(event_records(events)),
        reason="; ".join(reasons) or None,
    )


@dataclass(frozen=True)
class LogTail:
    """The last lines of the agent's log, the pod they are from, and why there are none."""

    applies: bool
    pod: str | None = None
    container: str = CONTAINER_NAME
    lines: tuple[str, ...] = ()
    reason: str | None = None


def log_lines(text: str, tail: int) -> list[str]:
    """The last ``tail`` lines of ``text``, each redacted and cut to :data:`MAX_TEXT`."""
    lines = text.splitlines()
    return [_cut(line) for line in lines[-tail:]] if tail > 0 else []


def read_log(kube: Kube, namespace: str, evaluation: str, tail: int) -> LogTail:
    """The last ``tail`` (at most :data:`MAX_TAIL`) lines of the agent container's log in the
    newest pod of the evaluation's Job."""
    tail = max(0, min(tail, MAX_TAIL))
    try:
        found = kube.get_or_none(evaluation_path(namespace, evaluation))
        if found is None:
            return LogTail(True, reason=f"ModelEvaluation {namespace}/{evaluation} is gone")
        job = ((found.get("status") or {}).get("jobName")) or None
        if not isinstance(job, str):
            return LogTail(True, reason="no Job yet")
        pods = newest_first(kube.list(pod_path(namespace), f"{JOB_NAME_LABEL}={job}"))
    except Exception as exc:
        return LogTail(True, reason=_why(exc, f"the pods of ModelEvaluation {evaluation}"))
    if not pods:
        return LogTail(True, reason=f"no pod of Job {job} yet")
    pod = pods[0]
    params = {"container": CONTAINER_NAME, "tailLines": str(tail), "limitBytes": str(MAX_LOG_BYTES)}
    try:
        text = kube.text(f"{pod_path(namespace, pod)}/log", params)
    except Exception as exc:  # 400: the container has not started; 404: the pod is gone
        return LogTail(True, pod=pod, reason=_why(exc, f"the log of pod {pod}"))
    lines = log_lines(text, tail)
    return LogTail(True, pod=pod, lines=tuple(lines), reason=None if lines else "no output yet")


def local_events() -> LaunchEvents:
    return LaunchEvents(applies=False, reason=NOT_IN_CLUSTER)


def local_log() -> LogTail:
    return LogTail(applies=False, reason=NOT_IN_CLUSTER)


def trace_of(document: Mapping[str, Any] | None) -> str | None:
    """A recorded run's trace id (its result document's ``trace_id``)."""
    value = (document or {}).get("trace_id")
    return value if isinstance(value, str) and value else None
