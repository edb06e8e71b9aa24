"""OpenTelemetry tracing for one evaluation: its own TracerProvider, OTLP/HTTP export, a file.

One provider per evaluation (not the global one) so several evaluations in one process, as
``mlms run`` does, each get their own resource and trace, and nothing leaks between them.
Export follows the standard variables only: spans go over OTLP/HTTP when
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (headers,
timeouts and so on are read by the exporter itself); ``OTEL_TRACES_EXPORTER=none`` or
``OTEL_SDK_DISABLED=true`` turn export or tracing off. Every span is also kept in memory and
written next to the result document (``<result>.trace.json``), so ``mlms trace`` works
without a tracing backend. ``TRACEPARENT`` (W3C) parents the evaluation span under the
operator's reconcile span.

The OpenTelemetry SDK is imported only when tracing is created; without the ``telemetry``
extra tracing is silently off, unless an OTLP endpoint is configured, which is an error that
names the extra to install.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlmodelscope.agent.profilers import LIBRARY_KINDS, ProfiledRun
from mlmodelscope.contract.otel import (
    TELEMETRY_EXTRA_HINT,
    export_disabled,
    redacting,
    sdk_disabled,
)

SERVICE_NAME = "mlmodelscope-agent"
INSTRUMENTATION = "mlmodelscope.agent"
TRACE_FILE_FORMAT = "mlmodelscope.io/trace/v1"
ATTR = "mlmodelscope."
"""Prefix of every attribute this project adds."""
_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class TelemetryMissingError(RuntimeError):
    """Telemetry is configured but its packages are not installed."""


def otlp_endpoint(environ: Mapping[str, str] | None = None) -> str | None:
    """The configured OTLP traces endpoint, or None when export is not configured / off."""
    env = os.environ if environ is None else environ
    if export_disabled(env):
        return None
    for var in _ENDPOINT_VARS:
        value = env.get(var, "").strip()
        if value:
            return value
    return None


def resource_attributes(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """OTel semantic-convention resource attributes of the agent process (k8s from the env)."""
    env = os.environ if environ is None else environ
    attrs = {"service.name": env.get("OTEL_SERVICE_NAME") or SERVICE_NAME}
    from mlmodelscope import __version__

    attrs["service.version"] = __version__
    for var, key in (
        ("MLMS_NAMESPACE", "k8s.namespace.name"),
        ("MLMS_POD_NAME", "k8s.pod.name"),
        ("MLMS_JOB_NAME", "k8s.job.name"),
        ("MLMS_NODE_NAME", "k8s.node.name"),
    ):
        if env.get(var):
            attrs[key] = env[var]
    return attrs


class EvaluationTracer:
    """Spans for one evaluation. ``span`` nests through the OTel context (contextvars), so
    stages, scenarios and queries find their parent without passing it around."""

    def __init__(
        self, provider: Any, memory: Any, exported: bool, parent: Any, exporter: Any = None
    ) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._provider = provider
        self._memory = memory
        self._tracer = provider.get_tracer(INSTRUMENTATION)
        self._parent = parent
        self.exported = exported
        """True when spans also go to an OTLP endpoint."""
        self._exporter = exporter
        self._root: Any = None
        self._token: Any = None

    @classmethod
    def create(
        cls,
        extra_resource: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> EvaluationTracer | None:
        """A tracer, or None when tracing is off (SDK disabled, or SDK missing and no export
        configured). Raises :class:`TelemetryMissingError` when export is configured but the
        SDK or exporter is not installed."""
        env = os.environ if environ is None else environ
        if sdk_disabled(env):
            return None
        endpoint = otlp_endpoint(env)
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
        except ImportError as exc:
            if endpoint is None:
                return None
            raise TelemetryMissingError(
                f"an OTLP endpoint is configured ({endpoint}) but OpenTelemetry is not "
                f"installed; install it with: {TELEMETRY_EXTRA_HINT} ({exc})"
            ) from exc
        attrs: dict[str, Any] = {**resource_attributes(env), **(extra_resource or {})}
        provider = TracerProvider(resource=Resource.create(attrs))
        memory = _keeper()
        provider.add_span_processor(redacting(memory))
        if endpoint is not None:
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
                from opentelemetry.sdk.trace.export import BatchSpanProcessor
            except ImportError as exc:
                raise TelemetryMissingError(
                    f"an OTLP endpoint is configured ({endpoint}) but the OTLP/HTTP exporter "
                    f"is not installed; install it with: {TELEMETRY_EXTRA_HINT} ({exc})"
                ) from exc
            exporter = _recording(OTLPSpanExporter(), endpoint)
            provider.add_span_processor(redacting(BatchSpanProcessor(exporter)))
            return cls(provider, memory, True, _parent(env), exporter)
        return cls(provider, memory, False, _parent(env))

    # ------------------------------------------------------------------------------- spans

    def begin(self, name: str, attributes: Mapping[str, Any]) -> None:
        """Start the root (evaluation) span and make it current until :meth:`end`."""
        from opentelemetry import context

        self._root = self._tracer.start_span(
            name, context=self._parent, attributes=_clean(attributes)
        )
        self._token = context.attach(self._trace.set_span_in_context(self._root))

    @property
    def trace_id(self) -> str | None:
        """32 hex digits, as Jaeger and the W3C traceparent write it."""
        if self._root is None:
            return None
        ctx = self._root.get_span_context()
        return f"{ctx.trace_id:032x}" if ctx.trace_id else None

    @property
    def sampled(self) -> bool:
        """False when the parent's sampling decision (TRACEPARENT flags) drops this trace."""
        return self._root is not None and bool(self._root.is_recording())

    @contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
        """A child of the current span; exceptions mark it failed and propagate."""
        with self._tracer.start_as_current_span(
            name, attributes=_clean(attributes or {}), record_exception=True
        ) as span:
            yield span

    def context_of(self, span: Any) -> Any:
        """A context whose current span is ``span`` (for :meth:`start_span`)."""
        return self._trace.set_span_in_context(span)

    def start_span(
        self, name: str, context: Any, attributes: Mapping[str, Any] | None = None
    ) -> Any:
        """A span under ``context`` that the caller ends; cheaper than :meth:`span` (no context
        switch), for the few spans inside a traced pass's timed region."""
        return self._tracer.start_span(name, context=context, attributes=attributes)

    def set_root_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self._root is not None:
            self._root.set_attributes(_clean(attributes))

    def emit_runs(
        self, runs: Sequence[ProfiledRun], predict_spans: Mapping[int, Any], level: str
    ) -> int:
        """Create the profiled ops of each run under its predict span; returns spans made.

        Offsets are relative to the call's marker; adding the predict span's start (epoch ns)
        converts the profiler's clock. Library ops only appear at library level.
        """
        made = 0
        for run in runs:
            predict = predict_spans.get(run.index)
            # an ended span no longer "is recording"; a sampled one still has its start time
            if predict is None or getattr(predict, "start_time", None) is None:
                continue
            anchor = int(predict.start_time)
            spans: list[Any] = []
            for op in run.ops:
                if op.kind in LIBRARY_KINDS and level != "library":
                    spans.append(None)
                    continue
                parent = predict
                if op.parent is not None and spans[op.parent] is not None:
                    parent = spans[op.parent]
                attrs: dict[str, Any] = {
                    f"{ATTR}span.kind": op.kind,
                    f"{ATTR}trace.level": "library" if op.kind in LIBRARY_KINDS else "framework",
                }
                attrs.update({f"{ATTR}{k}": v for k, v in op.attributes.items()})
                start = anchor + op.start_ns
                span = self._tracer.start_span(
                    op.name,
                    context=self._trace.set_span_in_context(parent),
                    start_time=start,
                    attributes=_clean(attrs),
                )
                span.end(end_time=start + op.duration_ns)
                spans.append(span)
                made += 1
        return made

    # ------------------------------------------------------------------------------ finish

    def end(self, error: BaseException | str | None = None) -> None:
        """End the root span (failed when ``error``) and detach it from the context."""
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        if self._root is None or self._root.end_time is not None:
            return
        if error is not None:
            if isinstance(error, BaseException):
                self._root.record_exception(error)
            self._root.set_status(Status(StatusCode.ERROR, str(error)))
        self._root.end()
        if self._token is not None:
            context.detach(self._token)
            self._token = None

    def spans(self) -> list[dict[str, Any]]:
        """Every finished span of this evaluation as plain records (the trace file's shape)."""
        return [span_record(s) for s in self._memory.spans]

    def resource(self) -> dict[str, Any]:
        return dict(self._provider.resource.attributes)

    def shutdown(self, timeout_s: float = 10.0) -> str | None:
        """Flush the exporter (spans reach the collector before the pod exits) and stop;
        returns why the export failed, or None."""
        flushed = bool(self._provider.force_flush(int(timeout_s * 1000)))
        self._provider.shutdown()
        if self._exporter is not None and self._exporter.error:
            return str(self._exporter.error)
        if not flushed and self.exported:
            return f"flushing spans to the OTLP endpoint did not finish in {timeout_s:.0f}s"
        return None


def _parent(env: Mapping[str, str]) -> Any:
    """The W3C context in TRACEPARENT/TRACESTATE (the operator's span), or None."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not env.get("TRACEPARENT"):
        return None
    carrier = {"traceparent": env["TRACEPARENT"]}
    if env.get("TRACESTATE"):
        carrier["tracestate"] = env["TRACESTATE"]
    return TraceContextTextMapPropagator().extract(carrier)


def _recording(exporter: Any, endpoint: str) -> Any:
    """Wrap an exporter to remember whether any batch failed (reported in the document)."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Recording(SpanExporter):
        def __init__(self) -> None:
            self.error: str | None = None

        def export(self, spans: Any) -> Any:
            result = exporter.export(spans)
            if result != SpanExportResult.SUCCESS:
                self.error = f"exporting spans to {endpoint} failed (see the agent log)"
            return result

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(exporter.force_flush(timeout_millis))

    return Recording()


def _keeper() -> Any:
    """A span processor that only keeps finished spans in a list (for the trace file): an
    exporter behind SimpleSpanProcessor would add a lock and a copy to every span."""
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

    class KeepSpans(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.spans.append(span)

    return KeepSpans()


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Drop None values (OTel rejects them) and stringify what OTel cannot carry."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, str | bool | int | float) else str(value)
    return out


def span_record(span: Any) -> dict[str, Any]:
    """A finished SDK span as a small JSON-ready dict (ids in hex, times in epoch ns)."""
    ctx = span.get_span_context()
    parent = span.parent
    return {
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_span_id": f"{parent.span_id:016x}" if parent is not None else None,
        "name": span.name,
        "start_ns": int(span.start_time),
        "end_ns": int(span.end_time),
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
    }


def write_trace_file(
    path: Path, trace_id: str | None, resource: Mapping[str, Any], spans: list[dict[str, Any]]
) -> None:
    """The trace next to the result document: what ``mlms trace`` reads without Jaeger."""
    from mlmodelscope.agent.runner import write_document

    spans.sort(key=lambda s: (s["start_ns"], -s["end_ns"]))
    write_document(
        {
            "format": TRACE_FILE_FORMAT,
            "trace_id": trace_id,
            "resource": dict(resource),
            "spans": spans,
        },
        path,
    )


def read_trace_file(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("format") != TRACE_FILE_FORMAT:
        raise ValueError(f"{path} is not an mlmodelscope trace file ({TRACE_FILE_FORMAT})")
    return data
