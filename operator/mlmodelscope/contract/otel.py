"""The OpenTelemetry conventions the operator and the agent both honour.

The operator exports its reconcile spans and hands the agent a ``TRACEPARENT``; the agent
exports the evaluation's spans under it. Both read the same standard variables, so one
setting turns tracing off on both sides alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mlmodelscope.contract.redact import redact_text, redact_tree

TELEMETRY_EXTRA_HINT: Final = "pip install 'mlmodelscope[telemetry]'"
"""What to install when tracing or metrics are configured but their packages are missing."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def sdk_disabled(environ: Mapping[str, str]) -> bool:
    """``OTEL_SDK_DISABLED=true``: no spans are made at all."""
    return _truthy(environ.get("OTEL_SDK_DISABLED"))


def export_disabled(environ: Mapping[str, str]) -> bool:
    """No span leaves the process: the SDK is disabled or ``OTEL_TRACES_EXPORTER=none``."""
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return sdk_disabled(environ) or exporter == "none"


# ------------------------------------------------------------------------------- redaction


def _redacted_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return redact_tree(dict(attributes or {}))


def redacted_span(span: Any) -> Any:
    """``span`` (a finished SDK span) with every string of its name, attributes, events
    (``record_exception`` quotes the exception) and status redacted; the span itself when
    nothing changed."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Status

    name = redact_text(span.name)
    attributes = _redacted_attributes(span.attributes)
    events = [
        Event(event.name, _redacted_attributes(event.attributes), event.timestamp)
        for event in span.events
    ]
    description = span.status.description
    clean_description = redact_text(description) if description else description
    if (
        name == span.name
        and attributes == dict(span.attributes or {})
        and all(
            e.attributes == dict(o.attributes or {})
            for e, o in zip(events, span.events, strict=True)
        )
        and clean_description == description
    ):
        return span
    return ReadableSpan(
        name=name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=events,
        links=span.links,
        kind=span.kind,
        status=Status(span.status.status_code, clean_description),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def redacting(processor: Any) -> Any:
    """An SDK span processor that hands ``processor`` each finished span redacted
    (:func:`redacted_span`): every span the process exports or keeps goes through it."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Redacting(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            processor.on_start(span, parent_context=parent_context)

        def on_end(self, span: Any) -> None:
            processor.on_end(redacted_span(span))

        def shutdown(self) -> None:
            processor.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(processor.force_flush(timeout_millis))

    return Redacting()
