"""The evaluation resync: every ``MLMS_OPERATOR_RESYNC_SECONDS``, each evaluation whose run has
not ended is reconciled against its Job.

Job events are not redelivered: one the handler could not apply (the API server away for a
while), or one that happened while the operator was down (a Job deleted, or TTL-deleted after
it completed), would otherwise leave the evaluation Pending or Running for good. Level-based,
like the handlers: an existing Job (of this evaluation's UID) is handled as if it had just
changed (which also ends a run whose pod never starts, after the start timeout); a Job that no
longer exists ends the run from the agent's published result, else Failed/JobDeleted; queued
evaluations are offered the free slots. The tick lists the evaluation Jobs once, in pages,
keeping only those the unfinished evaluations (or the ledger) need; it reads the evaluations
from what their watch delivered, listing them only at the first tick and every
:data:`LIST_EVERY`-th; and it rebuilds the admission ledger from the same reads. A plain thread
(:class:`.periodic.Periodic`), not a Kopf timer, so no evaluation carries a finalizer.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from mlmodelscope.contract.kube import KubeError, job_path
from mlmodelscope.controller import memory, names, status
from mlmodelscope.controller.admission import admit
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.handlers import handle_job
from mlmodelscope.controller.runs import Handled
from mlmodelscope.controller.runtime.periodic import Periodic

log = logging.getLogger(__name__)

UNFINISHED = admit.UNFINISHED

LIST_EVERY: Final = 10
"""Every tick reads the evaluations from the watch (``ctx.watched``) but the first and every
tenth, which list them: at the start the watch may not have delivered them all yet, and a
listing shows the deletions a watch missed (:func:`.admission.admit.sync_ledger`)."""


def resync_one(
    ctx: Context, evaluation: dict[str, Any], listed: Mapping[tuple[str, str], Any] | None = None
) -> Handled:
    """Reconcile one listed evaluation against its Job; returns what it did.

    ``listed``: the evaluation Jobs of the same tick by (namespace, name), so a tick reads the
    Jobs once instead of once per evaluation; a Job missing there is read again (it may have
    been created after the listing)."""
    meta = evaluation["metadata"]
    generation = int(meta.get("generation") or 1)
    if meta.get("deletionTimestamp"):
        return Handled.NOTHING_TO_DO
    observed = status.Observed.of(evaluation.get("status"))
    current = observed.typed
    if current.observed_generation != generation:
        return Handled.NOTHING_TO_DO  # its create/update handler owns it
    if status.phase_named(current) not in UNFINISHED or not current.job_name:
        return Handled.NOTHING_TO_DO
    namespace = str(meta["namespace"])
    job_name = current.job_name
    job = (listed or {}).get((namespace, job_name))
    if job is None:
        job = ctx.kube.get_or_none(job_path(namespace, job_name))
    if job is None:
        return handle_job.job_vanished(ctx, evaluation, current)
    if not names.owned_by(job, meta.get("uid")):
        return Handled.NOT_OURS
    return handle_job.job_changed(job, ctx, listed=evaluation, observed=observed)


class EvaluationResync(Periodic):
    """Reconciles unfinished evaluations against their Jobs on a clock (see the module)."""

    name: ClassVar[str] = "evaluation-resync"
    first_tick_at_start: ClassVar[bool] = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx.acting)
        self.ctx = ctx
        self.ticks = 0

    def interval(self) -> float:
        return self.ctx.settings.resync_seconds

    def tick(self) -> None:
        ctx = self.ctx
        listing = admit.sync_ledger(ctx, from_watch=self.ticks % LIST_EVERY != 0)
        self.ticks += 1
        listed = listing.jobs
        # Each copy, and its Job's, is dropped once reconciled: the tick's memory shrinks as
        # it goes instead of holding every unfinished evaluation to its end.
        for _, item in listing.unfinished():
            meta = item["metadata"]
            job_key = (str(meta.get("namespace")), str((item.get("status") or {}).get("jobName")))
            try:
                outcome = resync_one(ctx, item, listed)
            except (KubeError, OSError) as exc:  # the next tick tries again
                log.warning("resync of %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
                continue
            finally:
                listed.discard(job_key)
            if outcome.worth_logging:
                log.info("resync %s/%s: %s", meta.get("namespace"), meta.get("name"), outcome)
        started = admit.admit_queued(ctx)
        if started:
            log.info("resync started %s", ", ".join(started))
        del listing, listed
        memory.trim()  # the listings' pages are free now: give them back (see .memory)
