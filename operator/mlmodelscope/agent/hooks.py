"""The interfaces the agent's runner calls out through: a UI reporter and run hooks.

The agent owns these and never imports who implements them. Telemetry (tracing, Pushgateway
metrics, NVML sampling, the leveled traced passes) implements :class:`RunHooks` in
:mod:`mlmodelscope.telemetry.agent`; the command line (`mlms run`, `mlms agent`) passes its
factory to :func:`~mlmodelscope.agent.runner.evaluate`. Without one, :class:`NoHooks` does
nothing, so the runner works with no telemetry installed at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mlmodelscope.spec.document import ModelEvaluation

StageHook = Callable[[str], None]
ProgressHook = Callable[[int, int], None]


@dataclass
class Reporter:
    """How the runner tells a UI what it is doing; the defaults say nothing."""

    stage: StageHook = lambda name: None
    progress: ProgressHook = lambda done, total: None


class RunHooks(Protocol):
    """What the runner asks of telemetry during one evaluation, in call order."""

    def wrap(self, reporter: Reporter) -> Reporter:
        """The reporter to use instead (e.g. one that also feeds progress metrics)."""
        ...

    def span(
        self, name: str, attributes: Mapping[str, Any] | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """Around one stage of real work."""
        ...

    def scenario(self, scenario: str, batch_size: int) -> contextlib.AbstractContextManager[Any]:
        """Around one batch size's measurement."""
        ...

    def gpu_sampling(self, device: str) -> contextlib.AbstractContextManager[None]:
        """Around the whole measurement (device as the backend reports it)."""
        ...

    def leveled_passes(
        self,
        backend: Any,
        ring: Any,
        *,
        raw_samples: Any,
        preprocess: Any,
        postprocess: Any,
        scenario: str,
        measured: Mapping[str, Any],
        stage: Callable[[str], None] | None = None,
    ) -> None:
        """After one batch size's untraced measurement, never inside it."""
        ...

    def finish(
        self, document: dict[str, Any], output: Path | None, error: BaseException | None = None
    ) -> None:
        """Before the result document is written: may add ``trace_id``, ``tracing`` and
        ``gpu_metrics``. Must not raise for its own failures."""
        ...


HooksFactory = Callable[[ModelEvaluation], RunHooks]
"""Creates the hooks of one evaluation; may raise (the run then ends Failed, with the
message), e.g. when an OTLP endpoint is configured but OpenTelemetry is not installed."""


class NoHooks:
    """Hooks that do nothing: the runner without telemetry."""

    def wrap(self, reporter: Reporter) -> Reporter:
        return reporter

    def span(
        self, name: str, attributes: Mapping[str, Any] | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def scenario(self, scenario: str, batch_size: int) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def gpu_sampling(self, device: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def leveled_passes(
        self,
        backend: Any,
        ring: Any,
        *,
        raw_samples: Any,
        preprocess: Any,
        postprocess: Any,
        scenario: str,
        measured: Mapping[str, Any],
        stage: Callable[[str], None] | None = None,
    ) -> None:
        return None

    def finish(
        self, document: dict[str, Any], output: Path | None, error: BaseException | None = None
    ) -> None:
        return None


def no_hooks(evaluation: ModelEvaluation) -> RunHooks:
    """The default :data:`HooksFactory`."""
    return NoHooks()
