"""Telemetry: operator and agent metrics, traces at model/framework/library level, and the
tools (Jaeger) the tests run against. Every module imports its third-party packages lazily or
is imported lazily, so ``mlms run`` works without the ``telemetry`` extra."""

TELEMETRY_EXTRA_HINT = "pip install 'mlmodelscope[telemetry]'"
"""What to install when a telemetry feature is configured but its packages are missing."""
