"""An EvaluationSweep was created, its spec changed, the operator (re)started and found it,
one of its child ModelEvaluations changed, or the resync came round: make its children and
its status match its spec.

Level-based, whatever the trigger: read the sweep and its children (label and owner UID),
let :func:`mlmodelscope.controller.sweeps.plan` decide, create the children it names
(deterministic names, so a restarted operator finds them: "already exists" is success), and
patch ``.status`` only when it changed. The whole reconcile of one sweep runs under one lock,
and the children are listed inside it, so ``spec.parallelism`` holds however many events
arrive at once. Children are deleted with the sweep by the garbage collector (their
ownerReference), so there is no finalizer and no delete handler beyond dropping the lock.

The resync (:class:`SweepResync`) is a plain thread, not a Kopf timer, for the same reason
the evaluations have none: Kopf would put a finalizer on every sweep for a timer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from mlmodelscope.contract.kube import KubeError, evaluation_path, sweep_path
from mlmodelscope.controller import model_refs, scope, sweeps
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runs import InvalidSpecError
from mlmodelscope.controller.runtime.periodic import Periodic
from mlmodelscope.spec import SpecValidationError
from mlmodelscope.spec.manifest import ModelLookup
from mlmodelscope.spec.status import Phase
from mlmodelscope.spec.sweep import (
    SWEEP_PLURAL,
    EvaluationSweep,
    SweepStatus,
    expand,
    parse_sweep,
)

log = logging.getLogger(__name__)

RESYNC_SECONDS: Final = 30.0
"""How often every sweep is reconciled regardless of events (a missed watch event heals)."""
KEPT_METADATA: Final = ("name", "namespace", "uid", "generation", "creationTimestamp", "labels")


def parse_body(body: Mapping[str, Any], models: ModelLookup | None = None) -> EvaluationSweep:
    """Validate a stored sweep with the same rules as `mlms validate`, its expanded children
    included (their modelRefs resolved against ``models`` when given); raises
    SpecValidationError."""
    meta = body.get("metadata") or {}
    document = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {k: meta[k] for k in KEPT_METADATA if k in meta},
        "spec": body.get("spec"),
    }
    return parse_sweep(document, f"{meta.get('namespace')}/{meta.get('name')}", models)


def _models_to_check(ctx: Context, namespace: str, body: Mapping[str, Any]) -> ModelLookup | None:
    """The namespace's Models while the sweep still creates children, so an unknown Model,
    a basedOn cycle or a missing format is refused before any child exists; None once every
    child of this generation exists (each child resolved its Model when it started, and a
    Model deleted since must not turn a finished sweep Failed)."""
    current = body.get("status") or {}
    generation = int(body["metadata"].get("generation") or 1)
    settled = (
        current.get("observedGeneration") == generation
        and int(current.get("total") or 0) > 0
        and int(current.get("created") or 0) >= int(current.get("total") or 0)
    )
    return None if settled else model_refs.api_lookup(ctx.kube, namespace)


def lock_key(name: str) -> str:
    """The sweep's key in the context's per-object locks ('/' never occurs in a name, so it
    cannot collide with an evaluation's)."""
    return f"{SWEEP_PLURAL}/{name}"


def sweep_changed(body: Mapping[str, Any], ctx: Context) -> str:
    meta = body["metadata"]
    return reconcile(ctx, str(meta["namespace"]), str(meta["name"]))


def child_changed(child: Mapping[str, Any], ctx: Context) -> str:
    """A child ModelEvaluation changed (or vanished): reconcile the sweep that owns it."""
    owner = sweeps.owner_of(child)
    if owner is None:
        return "no sweep"
    namespace, name, uid = owner
    return reconcile(ctx, namespace, name, uid)


def sweep_deleted(body: Mapping[str, Any], ctx: Context) -> str:
    meta = body.get("metadata") or {}
    ctx.forget(str(meta.get("namespace")), lock_key(str(meta.get("name"))))
    return "forgotten"


def reconcile(ctx: Context, namespace: str, name: str, uid: str | None = None) -> str:
    """Reconcile one sweep; returns what it did (for logs). Raises InvalidSpecError after
    writing Failed/InvalidSpec into the status."""
    with ctx.lock(namespace, lock_key(name)):
        body = ctx.kube.get_or_none(sweep_path(namespace, name))
        if body is None or body["metadata"].get("deletionTimestamp"):
            return "gone"
        if uid is not None and body["metadata"].get("uid") != uid:
            return "another sweep of that name"
        generation = int(body["metadata"].get("generation") or 1)
        current = body.get("status") or {}
        models = _models_to_check(ctx, namespace, body)
        try:
            sweep = parse_body(body, models)
            children = expand(sweep, models)
        except SpecValidationError as exc:
            message = "; ".join(str(p) for p in exc.problems) or str(exc)
            _write_status(ctx, body, sweeps.invalid(generation, message, current, ctx.clock()))
            raise InvalidSpecError(message) from None
        listed = ctx.kube.list(evaluation_path(namespace), sweeps.children_selector(name))
        owned = dict(sweeps.owned_children(body, listed))
        conflicts: set[str] = set()
        shown_failed = {
            row.get("name")
            for row in current.get("children") or []
            if row.get("phase") == Phase.FAILED
        }
        created = []
        decision = sweeps.plan(sweep, children, owned, current, ctx.clock())
        for _ in range(len(children)):
            if not decision.create:
                break
            for child in decision.create:
                document = sweeps.build_child(body, child)
                try:
                    owned[child.name] = ctx.kube.create(evaluation_path(namespace), document)
                    created.append(child)
                    continue
                except KubeError as exc:
                    if exc.status != 409 or exc.reason != "AlreadyExists":
                        raise
                found = ctx.kube.get_or_none(evaluation_path(namespace, child.name))
                if found is not None and sweeps.owned_children(body, [found]):
                    owned[child.name] = found  # made by an earlier attempt, listed too late
                elif found is not None:
                    conflicts.add(child.name)
                    if child.name not in shown_failed:  # announce a conflict once
                        ctx.post_event(body, sweeps.conflict_event(child))
            decision = sweeps.plan(sweep, children, owned, current, ctx.clock(), conflicts)
        body = _write_status(ctx, body, decision.status)
        for child in created:
            ctx.post_event(body, sweeps.created_event(child))
        st = decision.status
        outcome = f"{st.phase.value}: {st.progress}, {st.active} active"
        return f"{outcome}; created {', '.join(c.name for c in created)}" if created else outcome


def _write_status(ctx: Context, body: dict[str, Any], status: SweepStatus) -> dict[str, Any]:
    """Patch ``.status`` when it changed, and post the transition's Event; returns the sweep
    as last seen."""
    change = sweeps.change(body.get("status") or {}, status)
    meta = body["metadata"]
    if change.patch:
        path = sweep_path(meta["namespace"], meta["name"]) + "/status"
        body = ctx.kube.merge_patch(path, {"status": change.patch})
    if change.event is not None:
        ctx.post_event(body, change.event)
    return body


# ------------------------------------------------------------------------------- resync


def list_sweeps(ctx: Context) -> list[dict[str, Any]]:
    """Sweeps in the watched namespaces: listed per namespace when they are plain names (a
    namespaced install's RBAC suffices), else cluster-wide and filtered."""
    patterns = ctx.settings.namespaces
    if (plain := scope.plain_names(patterns)) is not None:
        return [item for ns in plain for item in ctx.kube.list(sweep_path(ns))]
    everywhere = ctx.kube.list(sweeps.all_sweeps_path())
    return [item for item in everywhere if scope.holds(item, patterns)]


def resync(ctx: Context) -> dict[str, str]:
    """Reconcile every sweep once; returns what happened to each (errors included)."""
    done = {}
    for item in list_sweeps(ctx):
        meta = item["metadata"]
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            done[key] = reconcile(ctx, str(meta["namespace"]), str(meta["name"]), meta.get("uid"))
        except InvalidSpecError as exc:
            done[key] = f"invalid: {exc}"
        except Exception as exc:  # one sweep's trouble must not stop the others
            log.warning("resync of sweep %s failed: %s", key, exc)
            done[key] = f"error: {exc}"
    return done


class SweepResync(Periodic):
    """:func:`resync` every ``interval`` seconds (see :mod:`..runtime.periodic`); Kopf's resume
    handlers reconcile every sweep at start, so the first pass waits."""

    name = "sweep-resync"

    def __init__(self, ctx: Context, interval: float = RESYNC_SECONDS) -> None:
        super().__init__(ctx.acting)
        self.ctx = ctx
        self.seconds = interval

    def interval(self) -> float:
        return self.seconds

    def tick(self) -> None:
        try:
            log.debug("sweep resync: %s", resync(self.ctx))
        except KubeError as exc:
            if exc.status != 404:  # 404: the EvaluationSweep CRD is not installed
                raise
