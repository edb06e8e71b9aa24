"""A brick suite measured by Kubernetes Jobs on a chosen node pool (``mlms dlbricks-jobs``).

The suite (``analysis/bricksuite.py``) lies on a PersistentVolumeClaim. :func:`run_suite`

1. runs a plan Job: the worker prints the node's system stack and the suite;
2. looks the suite's bricks up in the store under that stack, and splits the missing ones
   round-robin into at most ``jobs`` batches, one Job each (no Job when none is missing);
3. reads each Job's timings from its pod's log and records them in the store under the stack
   that Job printed, Job by Job, so what came back is kept when another Job fails.

Each Job runs the worker (``analysis/brick_worker.py``) in the onnxruntime agent image under
Pod Security ``restricted``: non-root, read-only root filesystem (emptyDir /tmp and cache), no
privilege escalation, every capability dropped, RuntimeDefault seccomp, no service account
token. The claim is mounted read-only, and a Job is never retried (its bricks would be timed
twice). The Kubernetes client is passed in (:class:`KubeAPI`, which ``contract.kube.Kube``
is): this package imports no other (tests/test_layering.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol

from mlmodelscope.analysis.brick_lines import WorkerOutput, parse_output
from mlmodelscope.analysis.brickstore import BrickStore, MeasuredBrick, stack_key
from mlmodelscope.analysis.bricksuite import Suite

CONTAINER = "bricks"
CLAIM_ROOT = "/var/run/mlmodelscope/pvc"
"""Where a claim is mounted, as the operator mounts an evaluation's (``contract.wire``)."""
RUN_AS = 65532
"""The agent images' user."""
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
RUN_LABEL = "mlmodelscope.io/dlbricks-run"
TTL_S = 3600
"""Finished Jobs (and their logs) are kept an hour for a look, then deleted by Kubernetes."""
STUCK = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}
)
"""Container waiting reasons that end a Job's wait at once: it would never start."""


class KubeAPI(Protocol):
    """The plain-JSON Kubernetes calls a run makes (``contract.kube.Kube``)."""

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def get(self, path: str) -> dict[str, Any]: ...
    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]: ...
    def text(self, path: str, params: Mapping[str, str] | None = None) -> str: ...
    def delete(self, path: str, propagation: str = "Background") -> None: ...


class BrickJobError(RuntimeError):
    """The run cannot go on (the plan Job failed or printed no suite); names the Job."""


@dataclass(frozen=True)
class JobsConfig:
    """Where and how a suite's bricks run."""

    namespace: str
    image: str
    claim: str
    folder: str
    """The suite's folder inside the claim ('' for its root)."""
    jobs: int = 1
    threads: int = 1
    warmup: int = 3
    runs: int = 20
    timeout_s: int = 1800
    """Each Job's activeDeadlineSeconds; the wait for a Job ends a minute later."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, str], ...] = ()
    image_pull_policy: str = "IfNotPresent"

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.threads < 1 or self.runs < 1 or self.timeout_s < 1:
            raise ValueError("jobs, threads, runs and timeout must be >= 1")
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")

    @property
    def suite_path(self) -> str:
        """The suite folder inside the container."""
        return "/".join(p for p in (CLAIM_ROOT, self.claim, self.folder.strip("/")) if p)


# ------------------------------------------------------------------------- pure decisions


def node_selector(items: Sequence[str]) -> dict[str, str]:
    """``key=value`` items as a nodeSelector; ValueError for an item without ``=``."""
    selector = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"node selector {item!r}: write key=value")
        selector[key] = value
    return selector


def toleration(text: str) -> dict[str, str]:
    """``key[=value]:Effect`` as a toleration (``Equal`` with a value, else ``Exists``)."""
    spec, sep, effect = text.rpartition(":")
    key, has_value, value = spec.partition("=")
    effects = ("NoSchedule", "PreferNoSchedule", "NoExecute")
    if not sep or not key or effect not in effects:
        raise ValueError(f"toleration {text!r}: write key[=value]:Effect, Effect one of {effects}")
    if has_value:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}


def batches(keys: Sequence[str], jobs: int) -> list[tuple[str, ...]]:
    """``keys`` dealt round-robin into at most ``jobs`` non-empty batches (a suite lists a
    model's bricks in graph order, so each batch gets a share of every kind of layer)."""
    return [batch for i in range(jobs) if (batch := tuple(keys[i::jobs]))]


def job_name(run: str, part: str) -> str:
    return f"dlbricks-{run}-{part}"


def worker_command(config: JobsConfig, bricks: Sequence[str] | None) -> list[str]:
    """The worker's command line: plan (no ``bricks``) or measure ``bricks``."""
    command = ["python", "-m", "mlmodelscope.analysis.brick_worker", config.suite_path]
    command += ["--threads", str(config.threads), "--warmup", str(config.warmup)]
    command += ["--runs", str(config.runs)]
    if bricks is not None:
        command += ["--bricks", ",".join(bricks)]
    return command


def build_job(
    config: JobsConfig, name: str, run: str, bricks: Sequence[str] | None
) -> dict[str, Any]:
    """The Job running the worker once on the chosen nodes (see the module docstring)."""
    labels = {"app.kubernetes.io/name": "mlmodelscope-dlbricks", RUN_LABEL: run}
    restricted = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": CONTAINER,
                "image": config.image,
                "imagePullPolicy": config.image_pull_policy,
                "command": worker_command(config, bricks),
                "securityContext": restricted,
                "volumeMounts": [
                    {
                        "name": "suite",
                        "mountPath": f"{CLAIM_ROOT}/{config.claim}",
                        "readOnly": True,
                    },
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "cache", "mountPath": "/var/cache/mlmodelscope"},
                ],
            }
        ],
        "volumes": [
            {
                "name": "suite",
                "persistentVolumeClaim": {"claimName": config.claim, "readOnly": True},
            },
            {"name": "tmp", "emptyDir": {}},
            {"name": "cache", "emptyDir": {}},
        ],
    }
    if config.node_selector:
        pod["nodeSelector"] = dict(config.node_selector)
    if config.tolerations:
        pod["tolerations"] = [dict(t) for t in config.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": config.timeout_s,
            "ttlSecondsAfterFinished": TTL_S,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


class JobState(Enum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STUCK = "Stuck"
    """Its container waits for a reason it never leaves (:data:`STUCK`): deleted."""


@dataclass(frozen=True)
class JobOutcome:
    state: JobState
    reason: str = ""


def job_outcome(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> JobOutcome:
    """Where a Job stands: its Complete or Failed condition, else stuck when a pod's
    container waits for a reason it never leaves (:data:`STUCK`), else running."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return JobOutcome(JobState.SUCCEEDED)
        if condition.get("type") == "Failed":
            why = condition.get("message") or condition.get("reason") or "failed"
            return JobOutcome(JobState.FAILED, str(why))
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK:
                return JobOutcome(JobState.STUCK, f"{waiting['reason']}: {waiting.get('message')}")
    return JobOutcome(JobState.RUNNING)


def batch_problems(
    name: str, outcome: JobOutcome, asked: Sequence[str], output: WorkerOutput, planned: str
) -> list[str]:
    """What is wrong with a measuring Job's run: it failed, printed no stack, ran on another
    stack than the plan's (``planned``, a stack key), or measured less than it was asked."""
    problems = []
    if outcome.state is not JobState.SUCCEEDED:
        problems.append(f"Job {name} {outcome.state.value.lower()}: {outcome.reason}")
    if output.stack is None:
        problems.append(f"Job {name} printed no stack")
    elif stack_key(output.stack) != planned:
        problems.append(
            f"Job {name} ran on another stack than the plan Job ({stack_key(output.stack)[:12]}, "
            f"not {planned[:12]}): its timings are stored under their own stack"
        )
    got = {t.brick_key for t in output.timings}
    lost = [key for key in asked if key not in got]
    if lost:
        problems.append(
            f"Job {name} measured {len(asked) - len(lost)} of {len(asked)} bricks "
            f"(missing {', '.join(k[:12] for k in lost[:3])}{', ...' if len(lost) > 3 else ''})"
        )
    return problems


@dataclass(frozen=True)
class NodeEstimate:
    """A model's estimate from the bricks' p50 on the node (None while a brick has none)."""

    model: str
    layers: int
    bricks: int
    estimate_ms: float | None


def compose(suite: Suite, p50_ms: Mapping[str, float]) -> list[NodeEstimate]:
    """Each model's estimate: the sum over its layers of their brick's p50."""
    estimates = []
    for model in suite.models:
        known = all(key in p50_ms for key in model.layers)
        total = sum(p50_ms[key] for key in model.layers) if known else None
        estimates.append(NodeEstimate(model.name, len(model.layers), len(set(model.layers)), total))
    return estimates


# -------------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class JobsReport:
    stack: dict[str, Any]
    """The node's stack, as the plan Job printed it."""
    stack_key: str
    unique_bricks: int
    jobs: tuple[str, ...]
    """The measuring Jobs (none when the store held every brick)."""
    bricks_measured: int
    brick_bench_s: float
    """The measured bricks' measuring wall time, summed over Jobs."""
    bricks_reused: int
    reuse_saved_s: float
    """The reused bricks' stored measuring wall times."""
    wall_s: float
    """The whole run, plan Job and pod start-ups included."""
    models: tuple[NodeEstimate, ...]
    problems: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Running:
    name: str
    bricks: tuple[str, ...] | None
    outcome: JobOutcome = JobOutcome(JobState.RUNNING)


def _jobs_path(namespace: str, name: str = "") -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs" + (f"/{name}" if name else "")


def _pods(kube: KubeAPI, namespace: str, job: str) -> list[dict[str, Any]]:
    pods = kube.list(f"/api/v1/namespaces/{namespace}/pods", f"{JOB_NAME_LABEL}={job}")
    return sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))


def _start(
    kube: KubeAPI, config: JobsConfig, run: str, part: str, bricks: tuple[str, ...] | None
) -> _Running:
    name = job_name(run, part)
    kube.create(_jobs_path(config.namespace), build_job(config, name, run, bricks))
    return _Running(name, bricks)


def _wait(kube: KubeAPI, config: JobsConfig, jobs: Sequence[_Running], poll_s: float) -> None:
    """Until every Job has ended (or waited a minute past its deadline); a stuck one is
    deleted, since it would never start."""
    deadline = time.monotonic() + config.timeout_s + 60
    pending = list(jobs)
    while pending:
        for job in list(pending):
            state = kube.get(_jobs_path(config.namespace, job.name))
            job.outcome = job_outcome(state, _pods(kube, config.namespace, job.name))
            if job.outcome.state is JobState.RUNNING:
                continue
            pending.remove(job)
            if job.outcome.state is JobState.STUCK:
                kube.delete(_jobs_path(config.namespace, job.name))
        if pending and time.monotonic() > deadline:
            for job in pending:
                job.outcome = JobOutcome(JobState.FAILED, f"not ended after {config.timeout_s}s")
            return
        if pending:
            time.sleep(poll_s)


def _log(kube: KubeAPI, namespace: str, job: str) -> str:
    """The log of the Job's last pod ('' when no pod started)."""
    pods = _pods(kube, namespace, job)
    if not pods:
        return ""
    path = f"/api/v1/namespaces/{namespace}/pods/{pods[-1]['metadata']['name']}/log"
    return kube.text(path, {"container": CONTAINER})


def _read(kube: KubeAPI, namespace: str, job: _Running) -> WorkerOutput:
    """The Job's records (none from a stuck one: its container never started, and has no
    log); a Job that did not succeed gets its log's last line (not a record) in its
    outcome's reason."""
    if job.outcome.state is JobState.STUCK:
        return WorkerOutput(None, None, ())
    text = _log(kube, namespace, job.name)
    if job.outcome.state is not JobState.SUCCEEDED:
        said = [line for line in text.splitlines() if line.strip() and not line.startswith("{")]
        if said:
            job.outcome = JobOutcome(job.outcome.state, f"{job.outcome.reason}; log: {said[-1]}")
    return parse_output(text)


def run_suite(
    kube: KubeAPI,
    config: JobsConfig,
    run: str,
    store: BrickStore | None = None,
    log: Callable[[str], None] = lambda _: None,
    poll_s: float = 1.0,
) -> JobsReport:
    """Plan, measure what the store lacks for the node's stack, record it (module docstring).
    ``run`` names this run's Jobs (``dlbricks-<run>-plan``, ``dlbricks-<run>-<n>``)."""
    start = time.monotonic()
    plan = _start(kube, config, run, "plan", None)
    log(f"Job {plan.name}: the node's stack and the suite")
    _wait(kube, config, [plan], poll_s)
    planned = _read(kube, config.namespace, plan)
    if plan.outcome.state is not JobState.SUCCEEDED:
        state = plan.outcome.state.value.lower()
        raise BrickJobError(f"Job {plan.name} {state}: {plan.outcome.reason}")
    if planned.stack is None or planned.suite is None:
        raise BrickJobError(f"Job {plan.name} printed no stack or no suite")
    suite, stack = planned.suite, planned.stack
    key = stack_key(stack)
    keys = [b.key for b in suite.bricks]
    stored = dict(store.brick_timings(key, keys)) if store is not None else {}
    missing = [k for k in keys if k not in stored]
    running = [
        _start(kube, config, run, str(i + 1), batch)
        for i, batch in enumerate(batches(missing, config.jobs))
    ]
    for job in running:
        log(f"Job {job.name}: {len(job.bricks or ())} bricks")
    _wait(kube, config, running, poll_s)
    p50 = {k: t.p50_ms for k, t in stored.items()}
    measured: list[MeasuredBrick] = []
    problems: list[str] = []
    for job in running:
        output = _read(kube, config.namespace, job)
        problems += batch_problems(job.name, job.outcome, job.bricks or (), output, key)
        if store is not None and output.stack is not None and output.timings:
            store.record_brick_timings(stack_key(output.stack), output.stack, output.timings)
        if output.stack is not None and stack_key(output.stack) == key:
            measured += output.timings
            p50.update((t.brick_key, t.p50_ms) for t in output.timings)
    return JobsReport(
        stack=stack,
        stack_key=key,
        unique_bricks=len(keys),
        jobs=tuple(job.name for job in running),
        bricks_measured=len(measured),
        brick_bench_s=sum(t.measure_s for t in measured),
        bricks_reused=len(stored),
        reuse_saved_s=sum(t.measure_s for t in stored.values()),
        wall_s=time.monotonic() - start,
        models=tuple(compose(suite, p50)),
        problems=tuple(problems),
    )
