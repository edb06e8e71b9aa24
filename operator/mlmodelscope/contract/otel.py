"""The OpenTelemetry conventions the operator and the agent both honour.

The operator exports its reconcile spans and hands the agent a ``TRACEPARENT``; the agent
exports the evaluation's spans under it. Both read the same standard variables, so one
setting turns tracing off on both sides alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

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
