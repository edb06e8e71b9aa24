"""The operator's traces: one span per reconcile, exported over OTLP/HTTP.

Each run of an evaluation (one ``metadata.generation``) is one trace. Its ids are derived from
the evaluation's uid and generation (:func:`run_ids`), so they are known before anything has
happened: the operator writes the trace id into ``.status.traceID`` when it admits the run, and
the Job's ``TRACEPARENT`` names the span id. The reconcile that creates the Job is exported with
exactly that span id, so the agent's evaluation span is its child; every other reconcile of the
run (a queue decision, the Job's progress, collecting the results) is a root span of the same
trace. Jaeger thus shows one trace per run: admission, the agent's spans, the results.

A reconcile's span is recorded when its handler returns, with the start time taken when it was
called: only then is it known whether it created the Job, which decides the span's id. The
handlers make no spans of their own, so nothing needs a current span while they run.

Export goes to ``MLMS_OPERATOR_OTLP_ENDPOINT`` (the endpoint the agents get) over OTLP/HTTP;
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` overrides the URL, the exporter reads the other standard
variables (headers, timeout, certificate) itself, and ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` turn the operator's spans off. Every span is sampled: the
``TRACEPARENT`` the Job carries says "sampled", so its parent must be exported.

OpenTelemetry is imported only when tracing is configured (the ``telemetry`` extra).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from mlmodelscope import __version__
from mlmodelscope.contract.otel import TELEMETRY_EXTRA_HINT, export_disabled, redacting
from mlmodelscope.controller import names
from mlmodelscope.spec.document import KIND

SERVICE_NAME: Final = "mlmodelscope-operator"
INSTRUMENTATION: Final = "mlmodelscope.operator"
ATTR: Final = "mlmodelscope."
"""Prefix of every attribute this project adds."""

AttributeValue = str | bool | int | float


def run_ids(uid: str, generation: int) -> tuple[str, str]:
    """(trace id, span id) of one evaluation run, in hex: the trace of the run and the span of
    the reconcile that admits it. Derived from uid and generation, so a retried handler builds
    the same Job and the trace id is known before the agent starts."""
    digest = hashlib.sha256(f"{uid}/{generation}".encode()).hexdigest()
    return digest[:32], digest[32:48]


def traceparent(trace_id: str, span_id: str) -> str:
    """The W3C ``traceparent`` header value (version 00, sampled)."""
    return f"00-{trace_id}-{span_id}-01"


@dataclass(frozen=True)
class Run:
    """One run of an evaluation (a generation): the trace a reconcile belongs to."""

    namespace: str
    name: str
    uid: str
    generation: int

    @property
    def trace_id(self) -> str:
        return run_ids(self.uid, self.generation)[0]

    @property
    def span_id(self) -> str:
        """The admitting reconcile's span: the parent the Job's TRACEPARENT names."""
        return run_ids(self.uid, self.generation)[1]

    def attributes(self) -> dict[str, AttributeValue]:
        return {
            "k8s.namespace.name": self.namespace,
            f"{ATTR}evaluation": self.name,
            f"{ATTR}generation": self.generation,
        }

    @classmethod
    def of_evaluation(cls, body: Mapping[str, Any]) -> Run | None:
        """The run a ModelEvaluation (Kopf body) is at: its current generation."""
        meta = body.get("metadata") or {}
        if not meta.get("uid") or not meta.get("name"):
            return None
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta["name"]),
            uid=str(meta["uid"]),
            generation=int(meta.get("generation") or 1),
        )

    @classmethod
    def of_job(cls, body: Mapping[str, Any]) -> Run | None:
        """The run an evaluation Job belongs to: its owner's uid and its generation label."""
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        owner = next(
            (
                ref
                for ref in meta.get("ownerReferences") or []
                if ref.get("controller") and ref.get("kind") == KIND and ref.get("uid")
            ),
            None,
        )
        generation = str(labels.get(names.LABEL_GENERATION, ""))
        if owner is None or not generation.isdigit():
            return None
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(labels.get(names.LABEL_EVALUATION) or owner.get("name", "")),
            uid=str(owner["uid"]),
            generation=int(generation),
        )


@dataclass
class Reconcile:
    """One handler invocation, as its span will record it."""

    handler: str
    run: Run | None
    start_ns: int
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    admitted: list[tuple[Run, str, int]] = field(default_factory=list)
    """Runs whose Job this reconcile created: (run, Job name, when in epoch ns)."""


_CHOSEN: ContextVar[tuple[int | None, int | None]] = ContextVar(
    "mlmodelscope_operator_span_ids", default=(None, None)
)
"""(trace id, span id) the next span gets instead of random ones (None: random)."""


def _id_generator() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class ChosenIds(RandomIdGenerator):
        """Random ids, except where the span being started was given its own."""

        def generate_trace_id(self) -> int:
            return _CHOSEN.get()[0] or int(super().generate_trace_id())

        def generate_span_id(self) -> int:
            return _CHOSEN.get()[1] or int(super().generate_span_id())

    return ChosenIds()


def resource_attributes(environ: Mapping[str, str]) -> dict[str, str]:
    """service.name (``OTEL_SERVICE_NAME`` or mlmodelscope-operator) and version, and the pod
    the chart's downward API names (``POD_NAMESPACE``, ``POD_ID``)."""
    attrs = {
        "service.name": environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME,
        "service.version": __version__,
    }
    for var, key in (("POD_NAMESPACE", "k8s.namespace.name"), ("POD_ID", "k8s.pod.name")):
        if environ.get(var):
            attrs[key] = environ[var]
    return attrs


class TracingMissingError(RuntimeError):
    """An OTLP endpoint is configured but OpenTelemetry is not installed."""


class OperatorTracer:
    """The operator's TracerProvider (its own, not the global one) and how reconciles become
    spans."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer(INSTRUMENTATION, __version__)

    @classmethod
    def create(
        cls, endpoint: str | None, environ: Mapping[str, str] | None = None
    ) -> OperatorTracer | None:
        """A tracer exporting to ``endpoint`` (``MLMS_OPERATOR_OTLP_ENDPOINT``), or None when
        none is configured or the standard variables turn tracing off. Raises
        :class:`TracingMissingError` when OpenTelemetry is not installed."""
        env = os.environ if environ is None else environ
        if not endpoint or export_disabled(env):
            return None
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise TracingMissingError(
                f"MLMS_OPERATOR_OTLP_ENDPOINT is set ({endpoint}) but OpenTelemetry is not "
                f"installed; install it with: {TELEMETRY_EXTRA_HINT} ({exc})"
            ) from exc
        url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        exporter = OTLPSpanExporter(endpoint=url or f"{endpoint.rstrip('/')}/v1/traces")
        return cls.with_processor(BatchSpanProcessor(exporter), env)

    @classmethod
    def with_processor(cls, processor: Any, environ: Mapping[str, str]) -> OperatorTracer:
        """A tracer whose spans go to ``processor`` (an SDK SpanProcessor)."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        provider = TracerProvider(
            resource=Resource.create(resource_attributes(environ)),
            sampler=ALWAYS_ON,
            id_generator=_id_generator(),
        )
        provider.add_span_processor(redacting(processor))
        return cls(provider)

    def record(
        self, reconcile: Reconcile, end_ns: int, outcome: str, error: BaseException | None
    ) -> None:
        """The reconcile's span, and an ``admit`` span for each other run whose Job it created
        (a slot freed by one Job admits a queued evaluation) in that run's trace."""
        from opentelemetry.trace import Link, Status, StatusCode

        own = reconcile.run
        attributes: dict[str, AttributeValue] = {
            **(own.attributes() if own is not None else {}),
            f"{ATTR}reconcile.handler": reconcile.handler,
            f"{ATTR}reconcile.outcome": outcome,
            **reconcile.attributes,
        }
        admits_own = [job for run, job, _ in reconcile.admitted if run == own]
        if admits_own:
            attributes[f"{ATTR}job.created"] = admits_own[0]
        span = self._start(
            f"reconcile {reconcile.handler}", own, bool(admits_own), reconcile.start_ns, attributes
        )
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end(end_time=end_ns)
        for run, job, at_ns in reconcile.admitted:
            if run == own:
                continue
            admit = self._start(
                "admit",
                run,
                True,
                reconcile.start_ns,
                {**run.attributes(), f"{ATTR}job.created": job},
                links=[Link(span.get_span_context())],
            )
            admit.end(end_time=at_ns)

    def _start(
        self,
        name: str,
        run: Run | None,
        admitting: bool,
        start_ns: int,
        attributes: Mapping[str, AttributeValue],
        links: list[Any] | None = None,
    ) -> Any:
        """A root span: in ``run``'s trace, with the run's admission span id if ``admitting``."""
        from opentelemetry.context import Context

        chosen: tuple[int | None, int | None] = (None, None)
        if run is not None:
            chosen = (int(run.trace_id, 16), int(run.span_id, 16) if admitting else None)
        token = _CHOSEN.set(chosen)
        try:
            return self._tracer.start_span(
                name, context=Context(), attributes=attributes, links=links, start_time=start_ns
            )
        finally:
            _CHOSEN.reset(token)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Flush what is queued (spans reach the collector before the operator exits)."""
        self._provider.force_flush(int(timeout_s * 1000))
        self._provider.shutdown()
