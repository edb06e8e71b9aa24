"""The operator's own watches: evaluations, feeding the work queue and the caches that read
them (:mod:`.workqueue`, :mod:`.watched`, the ledger), and the Jobs and pods it manages,
feeding :mod:`.object_events`.

Kopf watches EvaluationSweeps, whose handlers it runs, and the evaluations of a sweep (their
events reconcile the sweep). Every other event needs only to be triaged and queued, which
needs no request; Kopf would also run each one through a per-object worker and keep a record
of every evaluation, Job and pod for as long as it exists. One thread per collection
(:mod:`.runtime.watcher`) lists and watches the objects (the Jobs and pods with the
managed-by label, a server-side selector) and hands each to its triage as it arrives,
keeping nothing per object.

Plain namespace names are watched one namespace at a time (a namespaced install's Roles allow
it); otherwise the collection is watched cluster-wide, and objects outside the patterns are
dropped (:mod:`.scope`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mlmodelscope.contract.kube import (
    Kube,
    all_evaluations_path,
    all_jobs_path,
    evaluation_path,
    job_path,
    pod_path,
)
from mlmodelscope.controller import names, scope
from mlmodelscope.controller.runtime.watcher import Handle, Watcher

ALL_PODS = "/api/v1/pods"


def _in_scope(handle: Handle, patterns: tuple[str, ...]) -> Handle:
    if not patterns:
        return handle

    def filtered(obj: dict[str, Any], deleted: bool) -> None:
        if scope.holds(obj, patterns):
            handle(obj, deleted)

    return filtered


Kind = tuple[str, Callable[[str], str], str, Handle]
"""(name, namespaced path for a namespace, cluster-wide path, handle) of a watched collection."""


def evaluation_watches(
    kube: Kube, patterns: tuple[str, ...], on_evaluation: Handle
) -> list[Watcher]:
    """The watchers (not started) of the ModelEvaluations in the namespaces ``patterns`` name
    (``MLMS_OPERATOR_NAMESPACES``; empty: every namespace)."""
    kind: Kind = ("modelevaluations", evaluation_path, all_evaluations_path(), on_evaluation)
    return _watches(kube, patterns, [kind], None)


def job_and_pod_watches(
    kube: Kube, patterns: tuple[str, ...], on_job: Handle, on_pod: Handle
) -> list[Watcher]:
    """The watchers (not started) of the managed Jobs and pods in the namespaces
    ``patterns`` name."""
    kinds: list[Kind] = [
        ("jobs", job_path, all_jobs_path(), on_job),
        ("pods", pod_path, ALL_PODS, on_pod),
    ]
    return _watches(kube, patterns, kinds, names.MANAGED_SELECTOR)


def _watches(
    kube: Kube, patterns: tuple[str, ...], kinds: list[Kind], selector: str | None
) -> list[Watcher]:
    plain = scope.plain_names(patterns)
    if plain is not None:
        return [
            Watcher(kube, path_for(ns), handle, label_selector=selector, name=f"{kind}-{ns}")
            for kind, path_for, _, handle in kinds
            for ns in plain
        ]
    return [
        Watcher(kube, everywhere, _in_scope(handle, patterns), label_selector=selector, name=kind)
        for kind, _, everywhere, handle in kinds
    ]


def uid_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")
