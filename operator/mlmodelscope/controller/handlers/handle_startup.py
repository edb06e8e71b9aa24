"""Operator startup: Kopf's own settings, chosen once before any watch starts.

Kopf's bookkeeping (handler progress, the last handled spec, a finalizer if one were ever
needed) lives under the project's API group instead of kopf.zalando.org, so `kubectl get -o
yaml` shows whose annotations they are. Kopf watches EvaluationSweeps and, with a server-side
label selector, only the evaluations a sweep made; every evaluation, Job and pod has the
operator's own watches (:mod:`..object_watches`). Lifecycle transitions are posted as Events
with their own reasons (Queued, JobCreated, Succeeded, InvalidSpec, ...).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf

from mlmodelscope import API_GROUP
from mlmodelscope.contract.kube import LIST_PAGE
from mlmodelscope.controller import names
from mlmodelscope.spec.document import PLURAL
from mlmodelscope.spec.sweep import LABEL_SWEEP, SWEEP_KIND

MAX_WORKERS = 8
"""Kopf's threads for its synchronous handlers (EvaluationSweeps and their evaluations' events);
evaluations have the operator's own watches and queue (:mod:`..object_watches`,
:mod:`..workqueue`), Jobs and pods too (:mod:`..object_events`)."""


class SweepDiffBase(kopf.AnnotationsDiffBaseStorage):
    """Kopf's last-handled spec, for EvaluationSweeps only: the one kind with create/update
    handlers. Kopf builds this essence (a deep copy of the object) for every event of every
    kind it watches, and a sweep's evaluations, which have only an event handler, never use
    it; for them it is empty."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        if body.get("kind") != SWEEP_KIND:
            return kopf.BodyEssence()
        return super().build(body=body, extra_fields=extra_fields)


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = SweepDiffBase(
        prefix=API_GROUP, key="last-handled-configuration", ignored_fields=["status"]
    )
    settings.posting.reporting_component = names.MANAGED_BY
    settings.posting.reporting_instance = os.environ.get("HOSTNAME", "local")
    settings.posting.event_name_prefix = "mlmodelscope-"
    # Transitions are posted as Events with their own reasons; from the per-object loggers
    # only warnings and errors (a retried handler, a rejected request) become Events.
    settings.posting.level = logging.WARNING
    # Of the evaluations, Kopf needs only a sweep's (their events reconcile the sweep).
    settings.watching.label_selectors[API_GROUP, PLURAL] = LABEL_SWEEP
    # Kopf lists every watched kind at start and after each watch expiry: in pages, so that a
    # relisting of a thousand-run sweep never sits in memory at once.
    settings.watching.chunk_size = LIST_PAGE
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    settings.execution.max_workers = MAX_WORKERS
