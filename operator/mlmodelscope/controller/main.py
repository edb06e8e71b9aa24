"""The Kopf wiring: thin decorators that call the plain handlers, and `mlms operator`.

Each decorator says what it reacts to and how errors are classified; what happens is in
``handlers/handle_*.py``. Handlers are synchronous (the API client is), so Kopf runs them in
its thread pool. They are registered into a registry built per operator instance and bound to
its :class:`Context`, so tests can run one in-process. Kopf runs the EvaluationSweeps'
handlers. Evaluations, Jobs and pods are watched by the operator's own threads
(:mod:`.object_watches`), which triage each event: a ModelEvaluation is reconciled in the
threads of a work queue its events feed (:mod:`.workqueue`), so an evaluation waiting for its
turn costs a key, not a body; Job and pod handlers run in the threads of
:mod:`.object_events`, so a Job or pod waiting for its turn costs one packed slim copy.
There are no timers or daemons: Kopf
would put a finalizer on every evaluation for them, and a stopped operator would then block
deletions. Queued evaluations are admitted when a Job ends; work on a clock runs in plain
threads (:mod:`.runtime.periodic`) that the startup and cleanup handlers start and stop: results the
store could not take are retried (:class:`.recording.RecordRetrier`), EvaluationSweeps are
resynced (:class:`.handle_sweep.SweepResync`), Kueue's reason for a Job it holds back is read
from its Workload (:class:`.kueue.KueueWatch`, fed by the Job handler), and unfinished
evaluations are reconciled against their Jobs (:class:`.resync.EvaluationResync`), as lost Job
events are never redelivered. Every handler is registered through one wrapper,
``Instruments.handler`` (:mod:`.instrument`), which measures it and records its span; the
handlers themselves know nothing of metrics or traces.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final, cast

import kopf
import urllib3

from mlmodelscope import API_GROUP, API_VERSION
from mlmodelscope.contract.kube import Kube, KubeError, ServiceAccount
from mlmodelscope.contract.redact import install_log_redaction
from mlmodelscope.controller import (
    builders,
    kueue,
    memory,
    object_watches,
    peering,
    recording,
    resync,
    run_store,
    runs,
    status,
    workqueue,
)
from mlmodelscope.controller.context import Context, EventPoster
from mlmodelscope.controller.handlers import (
    handle_delete,
    handle_evaluation,
    handle_job,
    handle_pod,
    handle_startup,
    handle_sweep,
)
from mlmodelscope.controller.instrument import Instruments, StartupError
from mlmodelscope.controller.object_events import ObjectEvents
from mlmodelscope.controller.settings import DEFAULT_PEERING_NAME, OperatorSettings
from mlmodelscope.controller.slim import decompress
from mlmodelscope.controller.tracing import Run
from mlmodelscope.spec.document import PLURAL
from mlmodelscope.spec.sweep import LABEL_SWEEP, SWEEP_PLURAL

RESOURCE: Final = (API_GROUP, API_VERSION, PLURAL)
SWEEPS: Final = (API_GROUP, API_VERSION, SWEEP_PLURAL)
TRANSIENT_DELAY: Final = 5.0

log = logging.getLogger(__name__)


def kopf_event(evaluation: Mapping[str, Any], event: status.Event) -> None:
    """Post a transition as a Kubernetes Event on the evaluation (through Kopf's poster)."""
    body = kopf.Body(cast(kopf.RawBody, dict(evaluation)))
    kopf.event(body, type=event.type, reason=event.reason, message=event.message)


def api_event_poster(kube: Kube) -> EventPoster:
    """Post a transition as an Event straight through the API: for the threads that run
    outside Kopf's per-object tasks (the queues', the record retry's, the resync's;
    ``kopf.event`` needs those tasks' event queue)."""
    instance = os.environ.get("HOSTNAME", "local")

    def post(evaluation: Mapping[str, Any], event: status.Event) -> None:
        meta = evaluation.get("metadata") or {}
        body = builders.build_event(
            evaluation, event.type, event.reason, event.message, status.now(), instance
        )
        try:
            kube.create(f"/api/v1/namespaces/{meta.get('namespace')}/events", body)
        except (KubeError, OSError, urllib3.exceptions.HTTPError) as exc:
            log.warning("posting event %s on %s failed: %s", event.reason, meta.get("name"), exc)

    return post


def _classified(
    action: Callable[[], str], logger: logging.Logger | logging.LoggerAdapter[Any]
) -> str:
    """Run a handler and classify its failure for Kopf: waiting on the world (API errors that
    heal, connection problems) is retried with a delay; an invalid spec or a request the API
    server rejects is permanent, so a broken object never spins in a retry loop."""
    try:
        outcome = action()
    except runs.PolicyDeniedError as exc:
        raise kopf.PermanentError(str(exc)) from None
    except runs.InvalidSpecError as exc:
        raise kopf.PermanentError(f"invalid spec: {exc}") from None
    except runs.ForeignChildError as exc:  # wait for the garbage collector
        raise kopf.TemporaryError(str(exc), delay=TRANSIENT_DELAY) from None
    except KubeError as exc:
        if exc.status in (409, 429) or exc.status >= 500:
            raise kopf.TemporaryError(str(exc), delay=TRANSIENT_DELAY) from exc
        raise kopf.PermanentError(str(exc)) from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        message = f"cannot reach the API server: {exc}"
        raise kopf.TemporaryError(message, delay=TRANSIENT_DELAY) from exc
    logger.debug("handled: %s", outcome)
    return outcome


def service_account_login() -> kopf.ConnectionInfo | None:
    """Kopf's own service-account login, but reading the token where the pod has it mounted
    (the same files ``Kube.from_environment`` uses). The token is read on each login, so a
    rotated projected token is picked up when the API server answers 401."""
    account = ServiceAccount.of_pod()
    if account is None:
        return None
    return kopf.ConnectionInfo(
        server=account.server,
        ca_path=str(account.ca) if account.ca.is_file() else None,
        token=account.token.read_text().strip(),
        default_namespace=account.namespace,
        scheme="Bearer",
    )


def evaluation_reconciler(ctx: Context, measured: Instruments) -> workqueue.Reconcile:
    """What the work queue runs for an evaluation it took: the level-based reconcile, measured
    and traced under its reason (``created``, ``spec-changed``, ``resumed``), with Kopf's
    classification of failures mapped onto retried and not retried. A retried failure is also
    a Warning Event (``ReconcileRetrying``), as Kopf posts one, so `kubectl describe` says why
    an evaluation waits."""

    def reconcile(body: Mapping[str, Any], **_: Any) -> str:
        return _classified(lambda: handle_evaluation.evaluation_changed(body, ctx), log)

    measured_by_reason = {
        reason: measured.handler(reason, Run.of_evaluation)(reconcile)
        for reason in ("created", "spec-changed", "resumed")
    }

    def run(entry: workqueue.Entry) -> str:
        queued = decompress(entry.body) if entry.body else {
            "metadata": {"namespace": entry.namespace, "name": entry.name,
                         "uid": entry.uid, "generation": entry.generation}}  # fmt: skip
        try:
            return str(measured_by_reason[entry.reason](body=queued))
        except kopf.PermanentError as exc:
            raise workqueue.PermanentError(str(exc)) from exc
        except kopf.TemporaryError as exc:
            message = f"{exc}; retrying in {TRANSIENT_DELAY:.0f} s"
            ctx.post_event(queued, status.Event("Warning", "ReconcileRetrying", message))
            raise workqueue.TransientError(str(exc)) from exc

    return run


def _deleted(event: kopf.RawEvent, **_: Any) -> bool:
    return event["type"] == "DELETED"


def build_registry(ctx: Context, instruments: Instruments | None = None) -> kopf.OperatorRegistry:
    """Every handler of the operator, bound to ``ctx``; each is registered through
    ``instruments.handler`` (reconcile duration by handler and outcome, and for those that work
    on one evaluation run a span in its trace)."""
    registry = kopf.OperatorRegistry()
    measured = instruments or Instruments()
    # A replica that acts again after standing by lists the evaluations again (its queue
    # skipped them meanwhile), as Kopf's resumed watches would.
    relist: list[Callable[[], None]] = []

    def list_again() -> None:
        for watcher_relist in relist:
            watcher_relist()

    ctx = replace(ctx, acting=peering.resuming(ctx.acting, list_again))
    # The operator's own threads (retries, resyncs, the queues) run outside Kopf's per-object
    # tasks, so they post Events through the API; they share ctx's locks, ledger and memos.
    threads_ctx = replace(ctx, post_event=api_event_poster(ctx.kube))
    retrier = recording.RecordRetrier(threads_ctx)
    sweep_resync = handle_sweep.SweepResync(threads_ctx)
    kueue_watch = kueue.KueueWatch(threads_ctx)
    evaluation_resync = resync.EvaluationResync(threads_ctx)
    reconciles = workqueue.WorkQueue(
        evaluation_reconciler(threads_ctx, measured),
        workers=ctx.settings.reconcile_workers,
        retry_delay=TRANSIENT_DELAY,
        acting=ctx.acting,
    )

    @measured.handler("job", Run.of_job)
    def job_progressed(body: Mapping[str, Any], deleted: bool = False, **_: Any) -> str:
        kueue_watch.observe(body, deleted=deleted)  # Jobs waiting for Kueue: read their Workload
        return handle_job.job_progressed(body, threads_ctx, deleted=deleted)

    @measured.handler("pod")
    def pod_scheduling(body: Mapping[str, Any], deleted: bool = False, **_: Any) -> str:
        return handle_pod.pod_changed(body, threads_ctx, deleted=deleted)

    object_events = ObjectEvents(job_progressed, pod_scheduling, acting=ctx.acting)

    # Job and pod events are decided on their watch's thread (no API call): most need nothing;
    # the others queue the object's newest slim state for the threads of object_events, which
    # run the handlers above. A pod seen running or finished marks its Job started
    # (ctx.started_jobs: no start-failure check lists its pods).
    def job_observed(body: dict[str, Any], deleted: bool) -> None:
        if deleted:
            ctx.started_jobs.forget(object_watches.uid_of(body))
        object_events.offer_job(body, deleted=deleted)

    def pod_observed(body: dict[str, Any], deleted: bool) -> None:
        ctx.started_jobs.observe_pod(body)
        shown = handle_pod.repeats_what_is_shown(body, ctx.pod_memo)
        object_events.offer_pod(body, deleted=deleted, shown=shown)

    @measured.handler("deleted")
    def evaluation_deleted(body: Mapping[str, Any], **_: Any) -> str:
        return handle_delete.evaluation_deleted(body, ctx)

    # Every event of every evaluation (the initial listing too) feeds the phase and result
    # gauges, the admission ledger and the watched copies, and queues the evaluation for a
    # reconcile when its generation has not been taken yet (created, spec changed, or found at
    # start): the reconcile itself runs in the work queue's threads, which hold a key per
    # waiting evaluation instead of its body (.workqueue). No API call: it runs on the
    # watch's thread.
    def evaluation_observed(body: dict[str, Any], deleted: bool) -> None:
        ctx.ledger.observe_evaluation(body, deleted=deleted)
        ctx.watched.observe(body, deleted=deleted)
        measured.evaluation_seen(body, deleted=deleted)
        reconciles.offer(body, deleted=deleted)
        if deleted:
            evaluation_deleted(body=body)

    patterns = ctx.settings.namespaces
    evaluation_watches = object_watches.evaluation_watches(ctx.kube, patterns, evaluation_observed)
    relist.extend(watcher.relist for watcher in evaluation_watches)
    watches = [
        *evaluation_watches,
        *object_watches.job_and_pod_watches(ctx.kube, patterns, job_observed, pod_observed),
    ]

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        handle_startup.configure(settings)
        retrier.start()
        sweep_resync.start()
        kueue_watch.start()
        evaluation_resync.start()
        reconciles.start()
        object_events.start()
        for watcher in watches:
            watcher.start()

    @kopf.on.cleanup(registry=registry)
    def stop_retrying(**_: Any) -> None:
        for watcher in watches:
            watcher.stop()
        reconciles.stop()
        object_events.stop()
        retrier.stop()
        sweep_resync.stop()
        kueue_watch.stop()
        evaluation_resync.stop()
        ctx.retries.stop()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return service_account_login() or kopf.login_with_kubeconfig(**kwargs)

    # EvaluationSweeps: every trigger runs the same level-based reconcile of the sweep
    # (handle_sweep.reconcile): its spec created, changed or found at start, and every event of
    # a child ModelEvaluation (those with the sweep label; the owner found through
    # the child's ownerReference). An invalid sweep ends Failed/InvalidSpec, not retried.
    @kopf.on.create(*SWEEPS, id="sweep-created", registry=registry, backoff=TRANSIENT_DELAY)
    @measured.handler("sweep-created")
    def sweep_created(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
        _classified(lambda: handle_sweep.sweep_changed(body, ctx), logger)

    @kopf.on.update(
        *SWEEPS, id="sweep-changed", field="spec", registry=registry, backoff=TRANSIENT_DELAY
    )
    @measured.handler("sweep-changed")
    def sweep_spec_changed(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
        _classified(lambda: handle_sweep.sweep_changed(body, ctx), logger)

    @kopf.on.resume(*SWEEPS, id="sweep-resumed", registry=registry, backoff=TRANSIENT_DELAY)
    @measured.handler("sweep-resumed")
    def sweep_resumed(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
        _classified(lambda: handle_sweep.sweep_changed(body, ctx), logger)

    @kopf.on.event(*SWEEPS, id="sweep-deleted", registry=registry, when=_deleted)
    @measured.handler("sweep-deleted")
    def sweep_deleted(body: kopf.Body, **_: Any) -> None:
        handle_sweep.sweep_deleted(body, ctx)

    child_of_a_sweep = {LABEL_SWEEP: kopf.PRESENT}

    @kopf.on.event(*RESOURCE, id="sweep-child", labels=child_of_a_sweep, registry=registry)
    @measured.handler("sweep-child")
    def sweep_child_changed(body: kopf.Body, logger: kopf.Logger, **_: Any) -> None:
        try:
            _classified(lambda: handle_sweep.child_changed(body, ctx), logger)
        except (kopf.TemporaryError, kopf.PermanentError) as exc:
            # Event handlers are not retried; the next child event or the resync heals it.
            logger.warning("reconciling the sweep of %s: %s", body["metadata"]["name"], exc)

    return registry


def _peering(settings: OperatorSettings, kube: Kube) -> peering.Peering:
    """This replica's place in the peering object: its own priority (from its start time
    unless MLMS_OPERATOR_PEERING_PRIORITY sets one), so two replicas never both pause."""
    priority = settings.peering_priority
    return peering.Peering(
        kube=kube,
        name=settings.peering or DEFAULT_PEERING_NAME,
        identity=peering.own_identity(),
        priority=peering.start_priority() if priority is None else priority,
        namespaces=settings.namespaces,
    )


def run_operator(
    settings: OperatorSettings,
    *,
    standalone: bool = False,
    liveness: str | None = None,
    verbose: bool = False,
    stop_flag: Any = None,
    ready_flag: Any = None,
) -> None:
    """Run until SIGTERM/SIGINT (or ``stop_flag``): Kopf finishes the running handlers, then
    exits. With peering configured and not ``standalone``, only the highest-priority live
    operator of the peering object ``settings.peering`` acts (leader election through Kopf
    peering, :mod:`.peering`); the others are hot standbys."""
    memory.limit_arenas()  # before any thread allocates (see the module)
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat.PLAIN)
    install_log_redaction()  # before Kopf's per-object loggers turn log lines into Events
    try:
        kube = Kube.from_environment()
    except Exception as exc:  # kubernetes.config.ConfigException and file errors
        raise StartupError(
            f"no Kubernetes API credentials ({exc}); set KUBECONFIG, or run in a pod with a "
            "service account"
        ) from exc
    recorder = run_store.Recorder.from_settings(settings)  # the `store` extra, or an error
    instruments = Instruments.start(settings)
    if instruments.metrics is not None:
        kube.observer = instruments.metrics.api_request
    if recorder is not None:
        recorder.metrics = instruments.metrics
    alone = standalone or settings.peering is None
    peers = None if alone else _peering(settings, kube)
    ctx = Context(settings=settings, kube=kube, post_event=kopf_event, recorder=recorder)
    if peers is not None:
        ctx.acting = peers.acting
    registry = build_registry(ctx, instruments)
    log.info(
        "mlmodelscope operator: %s, %s",
        f"namespaces {', '.join(settings.namespaces)}" if settings.namespaces else "cluster-wide",
        "standalone"
        if peers is None
        else f"peering {peers.name} as {peers.identity}, priority {peers.priority}",
    )
    kopf_settings = kopf.OperatorSettings()
    kopf_settings.peering.lifetime = settings.peering_lifetime_seconds
    try:
        kopf.run(
            registry=registry,
            settings=kopf_settings,
            standalone=alone,
            # Naming a peering makes Kopf wait for its CRD, even when standalone.
            peering_name=None if peers is None else peers.name,
            # The identity the gate excludes from its rivals (Kopf's type is a NewType of str).
            identity=None if peers is None else cast(Any, peers.identity),
            priority=None if peers is None else peers.priority,
            clusterwide=not settings.namespaces,
            namespaces=settings.namespaces,
            liveness_endpoint=liveness,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        instruments.stop()
        if recorder is not None:
            recorder.close()
