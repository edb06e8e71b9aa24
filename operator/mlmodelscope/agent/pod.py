"""The agent inside an evaluation pod: `mlms agent`, the command of every evaluation Job.

It runs the same :func:`~mlmodelscope.agent.runner.evaluate` as `mlms run`, then publishes what
the operator needs on two independent paths, so one failing does not lose the result:

* the results ConfigMap the operator created empty (the agent only patches it): ``result.json``
  (the document without raw latency arrays, to fit a ConfigMap) and ``summary.json``;
* the container's termination message (<= 4096 bytes): the compact summary, which the kubelet
  keeps in the pod status even when the agent may not talk to the API server at all.

Every name, limit and exit code here is the contract's (:mod:`mlmodelscope.contract.wire`), and
what is published is the contract's types (:mod:`mlmodelscope.contract.result`). Exit codes
tell the Job what a retry can do: 0 success, 1 failure (retried up to ``spec.retries``),
``EXIT_SPEC_ERROR`` when the spec itself cannot work (the Job's podFailurePolicy fails the Job
at once). Paths go through :func:`~mlmodelscope.contract.paths.container_path`, so the dev
cluster's exec kubelet, which runs the pod as a host process, works unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

from mlmodelscope.agent.cost import price_from_environment
from mlmodelscope.agent.credentials import remember_evaluation_secrets
from mlmodelscope.agent.hooks import HooksFactory, no_hooks
from mlmodelscope.contract.paths import container_path
from mlmodelscope.contract.redact import install_log_redaction, redact_text
from mlmodelscope.contract.result import (
    RESULT_API_VERSION,
    RESULT_KIND,
    EvaluationRef,
    EvaluationSummary,
    ResultDocument,
    ResultError,
)
from mlmodelscope.contract.wire import (
    CONFIGMAP_HEADROOM,
    CONFIGMAP_LIMIT,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SPEC_ERROR,
    RESULT_KEY,
    SUMMARY_KEY,
    TERMINATION_LIMIT,
)

ESSENTIAL_KEYS: Final = frozenset(
    {"api_version", "kind", "run_id", "status", "evaluation", "model", "backend", "results",
     "accuracy", "error", "trace_id", "image", "started_at", "finished_at", "duration_s"}
)  # fmt: skip
"""What a shrunken result document keeps when even its measurements do not fit."""
PUBLISH_ATTEMPTS: Final = 4
SUMMARY_CONFIGMAP_LIMIT: Final = 64 * 1024
"""The summary in the ConfigMap may say more than the termination message can."""

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------ documents to publish


def _encoded_size(document: Any) -> int:
    return len(json.dumps(document, separators=(",", ":"), allow_nan=False).encode())


RAW_SAMPLE: Final = 2000
"""Per measurement, the published document keeps at most this many per-query latencies,
evenly spaced in issue order: what `mlms compare` and `mlms gate` resample (they thin to the
same number), so a cluster run's latency can still be tested."""


def _sampled(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` reduced to an evenly spaced sample of its query latencies."""
    latencies = list(raw.get("latencies_ns") or [])
    if len(latencies) > RAW_SAMPLE:
        step = (len(latencies) - 1) / (RAW_SAMPLE - 1)
        latencies = [latencies[round(i * step)] for i in range(RAW_SAMPLE)]
    return {"latencies_ns": latencies, "sample_of": len(raw.get("latencies_ns") or [])}


def strip_document(document: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """The result document made to fit ``limit`` bytes of JSON: raw latency arrays go first
    (to a sample of at most :data:`RAW_SAMPLE` query latencies, then altogether), then
    per-repetition and per-window detail, then the measurements, then everything but
    :data:`ESSENTIAL_KEYS` (the headline ``results`` rows always stay)."""
    doc: dict[str, Any] = json.loads(json.dumps(document))
    measurements: list[dict[str, Any]] = doc.get("measurements") or []
    for m in measurements:
        if m.get("raw"):
            m["raw"] = _sampled(m["raw"])
    if _encoded_size(doc) <= limit:
        return doc
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


def summarize(document: Mapping[str, Any]) -> EvaluationSummary:
    """The operator's view of a result document, before any size limit. The document is
    checked against the contract once, here; a violation becomes a Failed summary, since a bug
    here must not cost the user the outcome."""
    try:
        parsed = ResultDocument.model_validate(document)
    except ValidationError as exc:
        log.error("result document does not match the contract: %s", exc)
        return EvaluationSummary(
            run_id=document.get("run_id"),
            status="Failed",
            error=ResultError(type="ContractError", message=str(exc)),
        )
    return EvaluationSummary.of(parsed, _stack_summary(document))


def compact_summary(
    document: Mapping[str, Any], limit: int = TERMINATION_LIMIT
) -> EvaluationSummary:
    """:func:`summarize`, in at most ``limit`` bytes of JSON."""
    return summarize(document).fit(limit)


def failure_document(
    error: Exception, *, field: str | None, evaluation: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A Failed result for a run that never reached the runner (unreadable or invalid spec)."""
    from mlmodelscope import __version__

    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    failed = ResultDocument(
        api_version=RESULT_API_VERSION,
        kind=RESULT_KIND,
        run_id=None,
        status="Failed",
        evaluation=EvaluationRef.model_validate(dict(evaluation or {})),
        error=ResultError(type=type(error).__name__, message=redact_text(str(error)), field=field),
        agent_version=__version__,
        started_at=now,
        finished_at=now,
        duration_s=0.0,
        stage_durations_s={},
        spec={},
    )
    return failed.to_json_dict()


# ------------------------------------------------------------------------------- publishing


def write_termination_message(summary: EvaluationSummary, path: Path) -> None:
    """The compact summary where the kubelet reads the termination message (best effort)."""
    text = summary.to_wire()
    try:
        path.write_text(text)
    except OSError as exc:
        log.warning("cannot write the termination message to %s: %s", path, exc)


def configmap_patch(
    document: Mapping[str, Any], summary: EvaluationSummary | None = None
) -> dict[str, Any]:
    """The merge patch that publishes a result document (and its summary, made by
    :func:`summarize` when not given) into the results ConfigMap."""
    summary_text = (summary or summarize(document)).fit(SUMMARY_CONFIGMAP_LIMIT).to_wire()
    budget = CONFIGMAP_LIMIT - CONFIGMAP_HEADROOM - len(summary_text.encode())
    result = json.dumps(strip_document(document, budget), separators=(",", ":"), allow_nan=False)
    return {"data": {RESULT_KEY: result, SUMMARY_KEY: summary_text}}


def _pod_namespace() -> str | None:
    if ns := os.environ.get("MLMS_NAMESPACE"):
        return ns
    from mlmodelscope.contract.kube import ServiceAccount  # the one client of both sides

    account = ServiceAccount.of_pod()
    return account.namespace if account else None


Patcher = Callable[[str, str, dict[str, Any]], None]


def _api_patcher() -> Patcher:
    """Merge-patches a ConfigMap with the pod's service account (token and CA paths mapped
    for the dev cluster, see ``ServiceAccount.of_pod``)."""
    from mlmodelscope.contract.kube import Kube, configmap_path

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
    summary: EvaluationSummary | None = None,
) -> bool:
    """Patch the results ConfigMap, retrying transient errors; False (logged) if it failed,
    in which case the operator falls back to the termination message."""
    if not namespace:
        log.warning("no namespace known (MLMS_NAMESPACE unset): results ConfigMap not written")
        return False
    body = configmap_patch(document, summary)
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


def _exit_code(document: Mapping[str, Any]) -> int:
    if document.get("status") == "Succeeded":
        return EXIT_OK
    error = document.get("error") or {}
    return EXIT_SPEC_ERROR if error.get("field") else EXIT_FAILED


def _raw_documents(spec_file: Path) -> list[Any]:
    """The YAML documents of ``spec_file`` as written (none when it cannot be read)."""
    try:
        return list(yaml.safe_load_all(spec_file.read_text()))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []


def run_evaluation(spec_file: Path, output: Path, hooks: HooksFactory = no_hooks) -> dict[str, Any]:
    """Load the one evaluation in ``spec_file`` and run it; always returns a result document
    (status Succeeded or Failed), never raises for evaluation problems."""
    from mlmodelscope.agent.hooks import Reporter
    from mlmodelscope.agent.runner import EvaluationError, evaluate
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
        price = price_from_environment(os.environ)
    except ValueError as exc:
        log.error("%s: the cost per 1,000 inferences is not measured", exc)
        price = None
    try:
        outcome = evaluate(
            item, output=output, reporter=reporter, include_raw=True, hooks=hooks, price=price
        )
        return outcome.document
    except EvaluationError as exc:
        log.error("evaluation failed: %s", exc)
        return exc.document


def run_agent(
    spec: str,
    output: str,
    results_configmap: str | None,
    termination_log: str = "/dev/termination-log",
    patcher: Patcher | None = None,
    hooks: HooksFactory = no_hooks,
) -> int:
    """`mlms agent`: evaluate, publish to the ConfigMap and the termination message, and
    return the process exit code."""
    install_log_redaction()
    spec_file = Path(container_path(spec))
    output_file = Path(container_path(output))
    message_file = Path(container_path(termination_log))
    remember_evaluation_secrets(_raw_documents(spec_file))  # before the spec is even valid
    log.info("agent: spec %s, output %s", spec_file, output_file)
    document = run_evaluation(spec_file, output_file, hooks)
    summary = summarize(document)
    write_termination_message(summary.fit(TERMINATION_LIMIT), message_file)
    if results_configmap:
        publish_configmap(document, results_configmap, _pod_namespace(), patcher, summary=summary)
    code = _exit_code(document)
    log.info("agent: %s (exit %d)", document.get("status"), code)
    return code
