"""Recording every finished run in the results store (``MLMS_OPERATOR_STORE_URL``).

When an evaluation's Job ends, the full result document the agent left in the results
ConfigMap (key ``result.json``) is written into the store with ``Store.record``, idempotent by
run UUID: a retried write never duplicates a run (it finds it there, which counts as
recorded). ``status.record`` says how it went.

A store that fails never costs a result. The results ConfigMap is owned by the evaluation
(deleted with it) and emptied by its next generation, so the document is first copied into an
*outbox* ConfigMap ``mlmodelscope-unrecorded-<run id>`` in the evaluation's namespace: no
owner reference (it outlives the evaluation), label ``mlmodelscope.io/record=pending``. Then
``status.record`` says Pending. A background thread lists the outbox ConfigMaps with that
server-side label selector every ``MLMS_OPERATOR_RECORD_RETRY_SECONDS`` (and once at start),
records each, deletes it, and, when the evaluation still shows that run, sets Recorded. A
document the store rejects as not a result document is relabelled ``record=rejected`` and
kept for a person to look at.

The store itself, opened on first use, is :class:`.run_store.Recorder`.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mlmodelscope import API_GROUP
from mlmodelscope.contract.kube import configmap_path
from mlmodelscope.contract.wire import RESULT_KEY
from mlmodelscope.controller import names, scope, status
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.run_store import (
    DocumentRejectedError,
    Recorder,
    StoreUnavailableError,
)
from mlmodelscope.controller.runtime.periodic import Periodic

log = logging.getLogger(__name__)

OUTBOX_PREFIX: Final = "mlmodelscope-unrecorded-"
LABEL_RECORD: Final = f"{API_GROUP}/record"
PENDING: Final = "pending"
REJECTED: Final = "rejected"
OUTBOX_SELECTOR: Final = f"{LABEL_RECORD}={PENDING}"
"""Server-side label selector of the outbox ConfigMaps still to record."""
ANNOTATION_RUN_ID: Final = f"{API_GROUP}/run-id"
ANNOTATION_ERROR: Final = f"{API_GROUP}/record-error"
OUTBOX_COMPONENT: Final = "unrecorded-result"


# ------------------------------------------------------------------------ documents and outbox


@dataclass(frozen=True)
class Finished:
    """A run's full result document, ready to record."""

    run_id: str
    document: dict[str, Any]
    text: str


def document_in(configmap: Mapping[str, Any] | None, generation: int) -> Finished | str:
    """The result document the results ConfigMap holds for ``generation``, or why there is
    none to record."""
    text = ((configmap or {}).get("data") or {}).get(RESULT_KEY)
    if not text:
        return (
            f"no result document for this run (ConfigMap key {RESULT_KEY} is empty; the agent "
            "may lack the Role to write it, so only the termination message's summary exists)"
        )
    try:
        document = json.loads(text)
    except ValueError as exc:
        return f"{RESULT_KEY} in the results ConfigMap is not JSON: {exc}"
    if not isinstance(document, dict):
        return f"{RESULT_KEY} in the results ConfigMap is not a result document"
    published = (document.get("evaluation") or {}).get("generation")
    if published is not None and published != generation:
        return f"the result document is for generation {published}, not {generation}"
    run_id = document.get("run_id")
    try:
        run_id = str(uuid.UUID(str(run_id)))
    except ValueError:
        return f"the result document has no run UUID (run_id {run_id!r})"
    return Finished(run_id, document, text)


def outbox_name(run_id: str) -> str:
    return f"{OUTBOX_PREFIX}{run_id}"


def build_outbox(
    namespace: str, evaluation: str, generation: int, finished: Finished, error: str
) -> dict[str, Any]:
    """The outbox ConfigMap that keeps an unrecorded result until the store takes it: no
    ownerReference, so deleting the evaluation (or its next generation) cannot lose it."""
    labels = names.labels(evaluation, generation)
    labels[names.LABEL_COMPONENT] = OUTBOX_COMPONENT
    labels[LABEL_RECORD] = PENDING
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": outbox_name(finished.run_id),
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_RUN_ID: finished.run_id,
                ANNOTATION_ERROR: error[:1024],
            },
        },
        "data": {RESULT_KEY: finished.text},
    }


# ----------------------------------------------------------------------- a Job has finished


def record_finished(
    ctx: Context, namespace: str, evaluation: str, generation: int, run_id: str | None
) -> str:
    """Record the run that just ended (``run_id`` from its summary, None when there is none)
    and say so in ``status.record``; returns what it did (for logs)."""
    recorder = ctx.recorder
    if recorder is None:
        return "no store"
    configmap = ctx.kube.get_or_none(
        configmap_path(namespace, names.results_configmap_name(evaluation))
    )
    found = document_in(configmap, generation)
    if isinstance(found, str):
        recorder.not_recordable()
        ctx.update_status(
            namespace,
            evaluation,
            lambda st: status.not_recorded(st, generation, run_id, f"not recorded: {found}"),
        )
        return "not recorded"
    with recorder.claim(found.run_id) as mine:
        if not mine:
            return "being recorded"
        return _record(ctx, recorder, namespace, evaluation, generation, found)


def _record(
    ctx: Context,
    recorder: Recorder,
    namespace: str,
    evaluation: str,
    generation: int,
    found: Finished,
) -> str:
    run_id = found.run_id
    try:
        recorder.record(found.document)
    except DocumentRejectedError as exc:
        message = f"the results store rejects run {run_id}: {exc}"
        ctx.update_status(
            namespace, evaluation, lambda st: status.not_recorded(st, generation, run_id, message)
        )
        return "rejected"
    except StoreUnavailableError as exc:
        error = str(exc)
        outbox = build_outbox(namespace, evaluation, generation, found, error)
        ctx.kube.create_if_absent(configmap_path(namespace), outbox)
        message = (
            f"{error}; the result waits in ConfigMap {outbox_name(run_id)} and is retried every "
            f"{ctx.settings.record_retry_seconds:g}s"
        )
        ctx.update_status(
            namespace, evaluation, lambda st: status.record_pending(st, generation, run_id, message)
        )
        return "record pending"
    now = ctx.clock()
    ctx.update_status(
        namespace, evaluation, lambda st: status.recorded(st, generation, run_id, now)
    )
    return "recorded"


# ------------------------------------------------------------------------------ the retries


def list_outboxes(ctx: Context) -> list[dict[str, Any]]:
    """Outbox ConfigMaps still to record, in the watched namespaces: listed per namespace
    when they are plain names (a namespaced install's RBAC suffices), else cluster-wide."""
    patterns = ctx.settings.namespaces
    if (plain := scope.plain_names(patterns)) is not None:
        found: list[dict[str, Any]] = []
        for namespace in plain:
            found.extend(ctx.kube.list(configmap_path(namespace), OUTBOX_SELECTOR))
        return found
    everywhere = ctx.kube.list("/api/v1/configmaps", OUTBOX_SELECTOR)
    return [c for c in everywhere if scope.holds(c, patterns)]


def retry_outbox(ctx: Context, configmap: Mapping[str, Any]) -> str:
    """Try one outbox ConfigMap again; returns what it did."""
    recorder = ctx.recorder
    meta = configmap.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    labels = meta.get("labels") or {}
    evaluation = str(labels.get(names.LABEL_EVALUATION) or "")
    try:
        generation = int(labels.get(names.LABEL_GENERATION, ""))
    except ValueError:
        generation = -1
    text = (configmap.get("data") or {}).get(RESULT_KEY) or ""
    try:
        document = json.loads(text)
        run_id = str(uuid.UUID(str(document["run_id"])))
    except (ValueError, TypeError, KeyError) as exc:
        return _reject(ctx, namespace, name, f"{RESULT_KEY} is not a result document: {exc}")
    if recorder is None:
        return "no store"
    with recorder.claim(run_id) as mine:
        if not mine:
            return "being recorded"
        try:
            recorder.record(document)
        except DocumentRejectedError as exc:
            message = f"the results store rejects run {run_id}: {exc}"
            if evaluation:
                ctx.update_status(
                    namespace,
                    evaluation,
                    lambda st: status.not_recorded(st, generation, run_id, message),
                )
            return _reject(ctx, namespace, name, message)
        except StoreUnavailableError as exc:
            message = (
                f"{exc}; the result waits in ConfigMap {name} and is retried every "
                f"{ctx.settings.record_retry_seconds:g}s"
            )
            if evaluation:
                ctx.update_status(
                    namespace,
                    evaluation,
                    lambda st: status.record_pending(st, generation, run_id, message),
                )
            return "still pending"
        if evaluation:
            now = ctx.clock()
            ctx.update_status(
                namespace, evaluation, lambda st: status.recorded(st, generation, run_id, now)
            )
        ctx.kube.delete(configmap_path(namespace, name))
        log.info("recorded run %s from ConfigMap %s/%s", run_id, namespace, name)
        return "recorded"


def _reject(ctx: Context, namespace: str, name: str, message: str) -> str:
    """Keep what the store will never take, but stop retrying it."""
    log.warning("ConfigMap %s/%s cannot be recorded, kept as %s=%s: %s", namespace, name,
                LABEL_RECORD, REJECTED, message)  # fmt: skip
    patch = {
        "metadata": {
            "labels": {LABEL_RECORD: REJECTED},
            "annotations": {ANNOTATION_ERROR: message[:1024]},
        }
    }
    ctx.kube.merge_patch(configmap_path(namespace, name), patch)
    return "rejected"


def retry_pending(ctx: Context) -> int:
    """One retry pass over every outbox ConfigMap; returns how many are still waiting."""
    if ctx.recorder is None:
        return 0
    waiting = 0
    outboxes = list_outboxes(ctx)
    for configmap in outboxes:
        meta = configmap["metadata"]
        try:
            outcome = retry_outbox(ctx, configmap)
        except Exception as exc:  # one bad ConfigMap or API hiccup must not stop the pass
            log.warning("retrying ConfigMap %s/%s: %r", meta.get("namespace"), meta["name"], exc)
            outcome = "error"
        if outcome not in ("recorded", "rejected"):
            waiting += 1
    if ctx.recorder.metrics is not None:
        ctx.recorder.metrics.pending_records(waiting)
    return waiting


class RecordRetrier(Periodic):
    """A retry pass at start, then every ``record_retry_seconds`` (see :mod:`.runtime.periodic`)."""

    name = "record-retry"
    first_tick_at_start = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx.acting)
        self.ctx = ctx

    def interval(self) -> float:
        return self.ctx.settings.record_retry_seconds

    def tick(self) -> None:
        retry_pending(self.ctx)

    def start(self) -> None:
        if self.ctx.recorder is None or self._thread is not None:
            return
        super().start()
        log.info(
            "recording finished runs in %s (retries every %gs)",
            self.ctx.recorder.url,
            self.ctx.settings.record_retry_seconds,
        )
