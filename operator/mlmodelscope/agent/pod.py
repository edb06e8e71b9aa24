"""The agent inside an evaluation pod: `mlms agent`, the command of every evaluation Job.

It runs the same :func:`~mlmodelscope.agent.runner.evaluate` as `mlms run`, then publishes what
the operator needs on two independent paths, so one failing does not lose the result:

* the results ConfigMap the operator created empty (the agent only patches it): ``result.json``
  (the document without raw latency arrays, to fit a ConfigMap) and ``summary.json``;
* the container's termination message (<= 4096 bytes): the compact summary, which the kubelet
  keeps in the pod status even when the agent may not talk to the API server at all.

Exit codes tell the Job what a retry can do: 0 success, 1 failure (retried up to
``spec.retries``), :data:`EXIT_SPEC_ERROR` when the spec itself cannot work (the Job's
podFailurePolicy fails the Job at once). Paths go through ``map_container_path``, so the dev
cluster's exec kubelet, which runs the pod as a host process, works unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from mlmodelscope.agent.sources import map_container_path

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_SPEC_ERROR: Final = 3
"""The spec cannot work as written (bad field, model not found, digest mismatch)."""
TERMINATION_LIMIT: Final = 4096
"""The kubelet truncates termination messages beyond 4096 bytes."""
CONFIGMAP_LIMIT: Final = 1_048_576
"""Total bytes of a ConfigMap's data."""
CONFIGMAP_HEADROOM: Final = 16_384
"""Room left for the summary and object metadata."""
ESSENTIAL_KEYS: Final = frozenset(
    {"api_version", "kind", "run_id", "status", "evaluation", "model", "backend", "results",
     "accuracy", "error", "trace_id", "image", "started_at", "finished_at", "duration_s"}
)  # fmt: skip
"""What a shrunken result document keeps when even its measurements do not fit."""
SUMMARY_KIND: Final = "EvaluationSummary"
RESULT_KEY: Final = "result.json"
SUMMARY_KEY: Final = "summary.json"
PUBLISH_ATTEMPTS: Final = 4
ERROR_MESSAGE_LIMIT: Final = 1500

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------ documents to publish


def _encoded_size(document: Any) -> int:
    return len(json.dumps(document, separators=(",", ":"), allow_nan=False).encode())


def strip_document(document: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """The result document made to fit ``limit`` bytes of JSON: raw latency arrays go first,
    then per-repetition and per-window detail, then the measurements, then everything but
    :data:`ESSENTIAL_KEYS` (the headline ``results`` rows always stay)."""
    doc: dict[str, Any] = json.loads(json.dumps(document))
    measurements: list[dict[str, Any]] = doc.get("measurements") or []
    for m in measurements:
        m.pop("raw", None)
    if _encoded_size(doc) <= limit:
        return doc
    for m in measurements:
        m.pop("repetitions", None)
        m.pop("windows", None)
    if _encoded_size(doc) <= limit:
        return doc
    doc.pop("measurements", None)
    doc["truncated"] = "measurements removed to fit the results ConfigMap"
    if _encoded_size(doc) <= limit:
        return doc
    dropped = sorted(k for k in doc if k not in ESSENTIAL_KEYS)
    doc = {k: v for k, v in doc.items() if k in ESSENTIAL_KEYS}
    doc["truncated"] = f"measurements and {', '.join(dropped)} removed to fit the ConfigMap"
    return doc


def _round(value: Any) -> Any:
    """6 significant digits: plenty for a summary, and a third of the bytes."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def _stack_summary(document: Mapping[str, Any]) -> dict[str, str]:
    stack = document.get("stack")
    if not isinstance(stack, dict):
        return {}
    from mlmodelscope.agent.provenance import summarize_stack

    extra = {}
    sha = (document.get("model") or {}).get("sha256")
    if sha:
        extra["modelSha256"] = str(sha)
    if image := document.get("image"):
        extra["image"] = str(image)
    return summarize_stack(stack, **extra)


def compact_summary(document: Mapping[str, Any], limit: int = TERMINATION_LIMIT) -> dict[str, Any]:
    """What the operator needs for the status, in at most ``limit`` bytes of JSON: run id,
    status, the per-batch-size headline rows, the error, the trace id and the stack summary.
    Detail is dropped in order of usefulness until it fits."""
    evaluation = document.get("evaluation") or {}
    error = document.get("error")
    summary: dict[str, Any] = {
        "kind": SUMMARY_KIND,
        "run_id": document.get("run_id"),
        "status": document.get("status"),
        "evaluation": {
            "name": evaluation.get("name"),
            "namespace": evaluation.get("namespace"),
            "generation": evaluation.get("generation"),
        },
        "results": _round(list(document.get("results") or [])),
        "error": (
            {
                "type": error.get("type"),
                "field": error.get("field"),
                "message": str(error.get("message", ""))[:ERROR_MESSAGE_LIMIT],
            }
            if isinstance(error, dict)
            else None
        ),
        "trace_id": document.get("trace_id"),
        "stack_summary": _stack_summary(document),
    }
    if _encoded_size(summary) <= limit:
        return summary
    summary["stack_summary"] = {
        k: v for k, v in summary["stack_summary"].items() if k in ("framework", "device", "gpu")
    }
    for row in summary["results"]:
        row["invalid_reasons"] = row.get("invalid_reasons", [])[:1]
    while _encoded_size(summary) > limit and len(summary["results"]) > 1:
        summary["results"].pop()
        summary["truncated"] = True
    if _encoded_size(summary) > limit and summary["error"]:
        summary["error"]["message"] = summary["error"]["message"][:200]
    if _encoded_size(summary) > limit:
        summary["stack_summary"] = {}
        summary["results"] = []
    return summary


def failure_document(
    error: Exception, *, field: str | None, evaluation: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A Failed result for a run that never reached the runner (unreadable or invalid spec)."""
    from mlmodelscope.agent.runner import RESULT_API_VERSION, RESULT_KIND

    return {
        "api_version": RESULT_API_VERSION,
        "kind": RESULT_KIND,
        "run_id": None,
        "status": "Failed",
        "evaluation": dict(evaluation or {}),
        "error": {"type": type(error).__name__, "message": str(error), "field": field},
    }


# ------------------------------------------------------------------------------- publishing


def write_termination_message(summary: Mapping[str, Any], path: Path) -> None:
    """The compact summary where the kubelet reads the termination message (best effort)."""
    text = json.dumps(summary, separators=(",", ":"), allow_nan=False)
    try:
        path.write_text(text)
    except OSError as exc:
        log.warning("cannot write the termination message to %s: %s", path, exc)


def configmap_patch(document: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that publishes a result document into the results ConfigMap."""
    summary = json.dumps(compact_summary(document, limit=64 * 1024), indent=1, allow_nan=False)
    budget = CONFIGMAP_LIMIT - CONFIGMAP_HEADROOM - len(summary.encode())
    result = json.dumps(strip_document(document, budget), separators=(",", ":"), allow_nan=False)
    return {"data": {RESULT_KEY: result, SUMMARY_KEY: summary}}


def _pod_namespace() -> str | None:
    if ns := os.environ.get("MLMS_NAMESPACE"):
        return ns
    from mlmodelscope.controller.kube import ServiceAccount

    account = ServiceAccount.of_pod()
    return account.namespace if account else None


Patcher = Callable[[str, str, dict[str, Any]], None]


def _api_patcher() -> Patcher:
    """Merge-patches a ConfigMap with the pod's service account (token and CA paths mapped
    for the dev cluster, see ``ServiceAccount.of_pod``)."""
    from mlmodelscope.controller.kube import Kube, configmap_path

    kube = Kube.from_environment()

    def patch(namespace: str, name: str, body: dict[str, Any]) -> None:
        kube.merge_patch(configmap_path(namespace, name), body)

    return patch


def publish_configmap(
    document: Mapping[str, Any],
    name: str,
    namespace: str | None,
    patcher: Patcher | None = None,
    attempts: int = PUBLISH_ATTEMPTS,
) -> bool:
    """Patch the results ConfigMap, retrying transient errors; False (logged) if it failed,
    in which case the operator falls back to the termination message."""
    if not namespace:
        log.warning("no namespace known (MLMS_NAMESPACE unset): results ConfigMap not written")
        return False
    body = configmap_patch(document)
    delay = 0.5
    for attempt in range(1, attempts + 1):
        try:
            (patcher or _api_patcher())(namespace, name, body)
            log.info("published results to configmap %s/%s", namespace, name)
            return True
        except Exception as exc:  # any failure here must not lose the termination message
            status = getattr(exc, "status", None)
            permanent = status in (401, 403, 404, 422) or isinstance(exc, ImportError)
            log.warning(
                "publishing results to configmap %s/%s failed (attempt %d): %s",
                namespace,
                name,
                attempt,
                exc,
            )
            if permanent or attempt == attempts:
                return False
            time.sleep(delay)
            delay *= 2
    return False


# ------------------------------------------------------------------------------------ the run


def container_path(path: str) -> str:
    """``map_container_path``, unless ``path`` is already a host path the exec kubelet
    substituted (it rewrites mount paths in args itself; mapping twice would nest them)."""
    raw = os.environ.get("MLMS_PATH_MAP")
    if raw:
        try:
            hosts = [str(h).rstrip("/") for h in json.loads(raw).values()]
        except (ValueError, AttributeError):
            hosts = []
        if any(h and (path == h or path.startswith(h + "/")) for h in hosts):
            return path
    return map_container_path(path)


def _exit_code(document: Mapping[str, Any]) -> int:
    if document.get("status") == "Succeeded":
        return EXIT_OK
    error = document.get("error") or {}
    return EXIT_SPEC_ERROR if error.get("field") else EXIT_FAILED


def run_evaluation(spec_file: Path, output: Path) -> dict[str, Any]:
    """Load the one evaluation in ``spec_file`` and run it; always returns a result document
    (status Succeeded or Failed), never raises for evaluation problems."""
    from mlmodelscope.agent.runner import EvaluationError, Reporter, evaluate
    from mlmodelscope.spec import Problem, SpecValidationError, load_evaluations

    try:
        loaded = load_evaluations(spec_file)
        if len(loaded) != 1:
            found = f"expected exactly one ModelEvaluation, found {len(loaded)}"
            raise SpecValidationError(str(spec_file), [Problem("", found)])
    except SpecValidationError as exc:
        field = exc.problems[0].path if exc.problems else None
        log.error("%s", exc)
        # A problem without a path is the file itself (unreadable, not YAML): not the spec.
        return failure_document(exc, field=field or None)
    item = loaded[0]
    reporter = Reporter(stage=lambda name: log.info("stage: %s", name))
    try:
        return evaluate(item, output=output, reporter=reporter, include_raw=True).document
    except EvaluationError as exc:
        log.error("evaluation failed: %s", exc)
        return exc.document


def run_agent(
    spec: str,
    output: str,
    results_configmap: str | None,
    termination_log: str = "/dev/termination-log",
    patcher: Patcher | None = None,
) -> int:
    """`mlms agent`: evaluate, publish to the ConfigMap and the termination message, and
    return the process exit code."""
    spec_file = Path(container_path(spec))
    output_file = Path(container_path(output))
    message_file = Path(container_path(termination_log))
    log.info("agent: spec %s, output %s", spec_file, output_file)
    document = run_evaluation(spec_file, output_file)
    write_termination_message(compact_summary(document), message_file)
    if results_configmap:
        publish_configmap(document, results_configmap, _pod_namespace(), patcher)
    code = _exit_code(document)
    log.info("agent: %s (exit %d)", document.get("status"), code)
    return code
