"""What the operator reports about its own work: Prometheus metrics and reconcile spans.

Three ways in, so the handlers stay plain:

* :meth:`Instruments.handler` wraps every Kopf handler where ``main.py`` registers it. Each
  invocation is a reconcile: its duration goes into the histogram by handler and outcome and,
  for handlers that work on one evaluation run, into a span of that run's trace
  (:mod:`mlmodelscope.controller.tracing`).
* :meth:`Instruments.evaluation_seen` gets every ModelEvaluation event of the watch, from which
  the phase, queue-depth and result gauges are rendered (:mod:`mlmodelscope.controller.metrics`).
* :func:`job_created` and :func:`results_collected` are called by the handlers at the one spot
  where that happens. They find the running reconcile through a context variable (Kopf runs a
  synchronous handler in a copy of the caller's context), and do nothing outside a reconcile
  (a unit test calling a handler function directly).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from mlmodelscope.controller.builders import generation_of
from mlmodelscope.controller.metrics import MetricsServer, OperatorMetrics
from mlmodelscope.controller.names import job_name
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.tracing import OperatorTracer, Reconcile, Run, TracingMissingError
from mlmodelscope.spec import ModelEvaluation

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
RunOf = Callable[[Mapping[str, Any]], Run | None]


@dataclass
class _Active:
    instruments: Instruments
    reconcile: Reconcile


_ACTIVE: ContextVar[_Active | None] = ContextVar("mlmodelscope_reconcile", default=None)


def outcome_of(error: BaseException | None) -> str:
    """success, temporary_error, permanent_error (Kopf's classification) or error."""
    if error is None:
        return "success"
    import kopf

    if isinstance(error, kopf.TemporaryError):
        return "temporary_error"
    if isinstance(error, kopf.PermanentError):
        return "permanent_error"
    return "error"


class StartupError(RuntimeError):
    """The operator cannot start as configured; the message names the setting to change."""


class Instruments:
    """The operator's metrics (None: ``MLMS_OPERATOR_METRICS_PORT=0``) and tracer (None: no
    OTLP endpoint)."""

    def __init__(
        self,
        metrics: OperatorMetrics | None = None,
        tracer: OperatorTracer | None = None,
        server: MetricsServer | None = None,
    ) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self.server = server

    @classmethod
    def start(
        cls, settings: OperatorSettings, environ: Mapping[str, str] | None = None
    ) -> Instruments:
        """Serve /metrics on ``settings.metrics_port`` and set up span export; raises when the
        port is taken or a configured part is not installed."""
        try:
            tracer = OperatorTracer.create(settings.otlp_endpoint, environ)
        except TracingMissingError as exc:
            raise StartupError(str(exc)) from exc
        metrics = server = None
        if settings.metrics_port:
            metrics = OperatorMetrics(process_metrics=True)
            try:
                server = metrics.serve(settings.metrics_port)
            except OSError as exc:
                raise StartupError(
                    f"cannot serve metrics on port {settings.metrics_port}: {exc.strerror or exc}; "
                    "set MLMS_OPERATOR_METRICS_PORT to a free port, or 0 to turn metrics off"
                ) from exc
            log.info("serving Prometheus metrics on :%d/metrics", server.port)
        if tracer is not None:
            log.info("exporting reconcile spans to %s", settings.otlp_endpoint)
        return cls(metrics, tracer, server)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.tracer is not None:
            self.tracer.shutdown()

    def handler(self, name: str, run_of: RunOf | None = None) -> Callable[[F], F]:
        """Wrap a Kopf handler (called with keywords, ``body`` among them) registered as
        ``name``; with ``run_of``, each call is also a span in the trace of the run it returns
        for the body."""

        def wrap(fn: F) -> F:
            @functools.wraps(fn)
            def reconcile(*args: Any, **kwargs: Any) -> Any:
                body = kwargs.get("body") or {}
                run = run_of(body) if run_of is not None and self.tracer is not None else None
                record = Reconcile(name, run, time.time_ns())
                if run is not None and body.get("kind") == "Job":
                    record.attributes["k8s.job.name"] = str(body["metadata"]["name"])
                token = _ACTIVE.set(_Active(self, record))
                started = time.perf_counter()
                error: BaseException | None = None
                try:
                    return fn(*args, **kwargs)
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    _ACTIVE.reset(token)
                    self._finish(record, time.perf_counter() - started, outcome_of(error), error)

            return cast(F, reconcile)

        return wrap

    def _finish(
        self, record: Reconcile, seconds: float, outcome: str, error: BaseException | None
    ) -> None:
        if self.metrics is not None:
            self.metrics.observe_reconcile(record.handler, seconds, outcome)
        if self.tracer is not None and record.run is not None:
            try:
                self.tracer.record(record, time.time_ns(), outcome, error)
            except Exception:  # telemetry must never fail a reconcile
                log.exception("recording the span of reconcile %s failed", record.handler)

    def evaluation_seen(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A ModelEvaluation event of the watch (the initial listing included)."""
        if self.metrics is None:
            return
        meta = body.get("metadata") or {}
        if deleted:
            self.metrics.forget(str(meta.get("namespace") or "default"), str(meta.get("name")))
        else:
            self.metrics.observe(body)


def job_created(evaluation: ModelEvaluation) -> None:
    """The running reconcile created the evaluation's Job for its current generation."""
    active = _ACTIVE.get()
    if active is None:
        return
    meta = evaluation.metadata
    namespace = meta.namespace or "default"
    generation = generation_of(evaluation)
    if active.instruments.metrics is not None:
        active.instruments.metrics.job_created(namespace)
    run = Run(namespace, meta.name, meta.uid or "", generation)
    active.reconcile.admitted.append((run, job_name(meta.name, generation), time.time_ns()))


def results_collected(namespace: str) -> None:
    """The running reconcile wrote a finished run's results into the evaluation's status."""
    active = _ACTIVE.get()
    if active is None:
        return
    if active.instruments.metrics is not None:
        active.instruments.metrics.result_collected(namespace)
    active.reconcile.attributes["mlmodelscope.results.collected"] = True
