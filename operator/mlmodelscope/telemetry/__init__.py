"""Telemetry of the agent: metrics and traces at model/framework/library level. The operator's
own metrics and traces live in :mod:`mlmodelscope.controller` (``metrics``, ``tracing``), the
servers the tests run against in :mod:`mlmodelscope.devtools`. Every module imports its
third-party packages lazily or is imported lazily, so ``mlms run`` works without the
``telemetry`` extra."""
