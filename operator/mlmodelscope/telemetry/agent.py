"""Telemetry's implementation of the agent's :class:`~mlmodelscope.agent.hooks.RunHooks`.

The runner stays readable: it asks for a span per stage and per scenario, a GPU sampler around
the measurement, the leveled traced passes after each batch size, and ``finish`` before it
writes the result document. Everything here is optional: with tracing level ``none``, no
OpenTelemetry SDK, no ``MLMS_PUSHGATEWAY_URL`` and no GPU, each call does nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlmodelscope.agent.hooks import Reporter
    from mlmodelscope.spec.document import ModelEvaluation
    from mlmodelscope.telemetry.agent_metrics import AgentMetrics
    from mlmodelscope.telemetry.nvml import GpuSampler
    from mlmodelscope.telemetry.tracing import EvaluationTracer

log = logging.getLogger(__name__)

TRACE_SUFFIX = ".trace.json"


def trace_path(result: Path) -> Path:
    """``results/eval.json`` -> ``results/eval.trace.json``."""
    return result.with_name(result.stem + TRACE_SUFFIX)


@dataclass
class _Settings:
    level: str = "none"
    sampling: float = 1.0
    queries: int = 50


class AgentTelemetry:
    """Tracing, Pushgateway metrics and GPU sampling for one evaluation run."""

    def __init__(
        self,
        settings: _Settings | None = None,
        tracer: EvaluationTracer | None = None,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self.settings = settings or _Settings()
        self.tracer = tracer
        self.metrics = metrics
        self.gpu_metrics: dict[str, Any] | None = None
        self.by_batch_size: list[dict[str, Any]] = []
        self._sampler: GpuSampler | None = None
        self._finished = False

    @classmethod
    def off(cls) -> AgentTelemetry:
        """Does nothing (until :meth:`start` replaces it)."""
        return cls()

    @classmethod
    def start(
        cls, evaluation: ModelEvaluation, environ: Mapping[str, str] | None = None
    ) -> AgentTelemetry:
        """Create tracing (root span started) and the Pushgateway pusher from the spec and the
        environment. Raises TelemetryMissingError when telemetry is configured but its packages
        are missing (the message names the extra)."""
        env = os.environ if environ is None else environ
        spec = evaluation.spec
        name = evaluation.metadata.name
        namespace = evaluation.metadata.namespace or env.get("MLMS_NAMESPACE")
        settings = _Settings(
            level=spec.tracing.level.value,
            sampling=spec.tracing.sampling,
            queries=_env_int(env, "MLMS_TRACE_QUERIES", 50),
        )
        attrs = {
            "mlmodelscope.evaluation": name,
            "mlmodelscope.model": spec.model.name,
            "mlmodelscope.framework": spec.framework.name.value,
        }
        tracer = None
        if settings.level != "none":
            from mlmodelscope.telemetry.tracing import EvaluationTracer

            tracer = EvaluationTracer.create(
                {**attrs, **({"k8s.namespace.name": namespace} if namespace else {})}, env
            )
            if tracer is not None:
                tracer.begin(
                    f"evaluation {name}",
                    {
                        **attrs,
                        "mlmodelscope.model.version": spec.model.version,
                        "mlmodelscope.device": spec.hardware.device.value,
                        "mlmodelscope.scenario": spec.scenario.type.value,
                        "mlmodelscope.trace.level": settings.level,
                    },
                )
        metrics = None
        if env.get("MLMS_PUSHGATEWAY_URL", "").strip():
            from mlmodelscope.telemetry.agent_metrics import AgentMetrics

            metrics = AgentMetrics.from_env(namespace, name, env)
        return cls(settings, tracer, metrics)

    # ---------------------------------------------------------------------------- during

    def wrap(self, reporter: Reporter) -> Reporter:
        """The runner's reporter, also feeding stage changes and progress to the pusher."""
        if self.metrics is None:
            return reporter
        metrics = self.metrics

        def stage(name: str) -> None:
            metrics.stage(name)
            reporter.stage(name)

        def progress(done: int, total: int) -> None:
            metrics.progress(done, total)
            reporter.progress(done, total)

        return replace(reporter, stage=stage, progress=progress)

    def span(
        self, name: str, attributes: Mapping[str, Any] | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """A span for one stage of real work (a no-op without tracing)."""
        if self.tracer is None:
            return contextlib.nullcontext()
        return self.tracer.span(name, attributes)

    def scenario(self, scenario: str, batch_size: int) -> contextlib.AbstractContextManager[Any]:
        return self.span(
            f"scenario {scenario} batch {batch_size}",
            {"mlmodelscope.scenario": scenario, "mlmodelscope.batch_size": batch_size},
        )

    @contextlib.contextmanager
    def gpu_sampling(self, device: str) -> Iterator[None]:
        """Sample NVML at 10 Hz around the measurement when the model runs on a GPU."""
        if not device.startswith(("cuda", "gpu")):
            yield
            return
        from mlmodelscope.telemetry.nvml import GpuSampler, nvml_source

        source = nvml_source()
        if source is None:
            yield
            return
        sampler = GpuSampler(source)
        sampler.start()
        self._sampler = sampler
        try:
            yield
        finally:
            self._sampler = None
            self.gpu_metrics = sampler.stop()
            source.close()

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
        """After one batch size's untraced measurement: the baseline and traced passes (GPU
        sampling paused, so ``gpu_metrics`` describe the measurement alone)."""
        if self.tracer is None or self.settings.level == "none":
            return
        from mlmodelscope.telemetry.leveled import LeveledPasses, run_levels

        batch_size = int(ring.batch_size)
        if stage is not None:
            stage(f"trace {scenario} batch {batch_size}")
        passes = LeveledPasses(
            self.tracer,
            backend,
            ring.queries,
            ring.sample_indices,
            raw_samples=raw_samples,
            preprocess=preprocess,
            postprocess=postprocess,
            count=self.settings.queries,
            sampling=self.settings.sampling,
            attributes={"mlmodelscope.batch_size": batch_size, "mlmodelscope.scenario": scenario},
        )
        if self._sampler is not None:
            self._sampler.pause()
        # the passes run in the backend's measuring state, as the measurement did: PyTorch
        # outside inference mode took milliseconds per call for its first ~20 calls here
        measuring = getattr(backend, "measuring", contextlib.nullcontext)
        try:
            with measuring():
                result = run_levels(passes, self.settings.level)
        finally:
            if self._sampler is not None:
                self._sampler.resume()
        percentiles = measured.get("latency", {}).get("percentiles_s", {})
        self.by_batch_size.append(
            {"batch_size": batch_size, "measured_p50_s": percentiles.get("p50"), **result}
        )

    # ---------------------------------------------------------------------------- finish

    def finish(
        self,
        document: dict[str, Any],
        output: Path | None,
        error: BaseException | None = None,
    ) -> None:
        """End the trace, write the trace file, add ``trace_id``/``tracing``/``gpu_metrics`` to
        the document and push the final metrics. Telemetry failures never fail the run."""
        if self._finished:
            return
        self._finished = True
        if self.gpu_metrics is not None:
            document["gpu_metrics"] = self.gpu_metrics
        if self.tracer is not None:
            self._finish_tracing(document, output, error)
        elif self.settings.level != "none":
            document["tracing"] = {
                "level": self.settings.level,
                "enabled": False,
                "reason": "OpenTelemetry SDK not installed or OTEL_SDK_DISABLED is set",
            }
        if self.metrics is not None:
            pushed = self.metrics.finish(document)
            if not pushed and self.metrics.errors:
                log.warning("agent metrics not pushed: %s", self.metrics.errors[-1])

    def _finish_tracing(
        self, document: dict[str, Any], output: Path | None, error: BaseException | None
    ) -> None:
        from mlmodelscope.telemetry.tracing import write_trace_file

        tracer = self.tracer
        assert tracer is not None
        tracing: dict[str, Any] = {
            "level": self.settings.level,
            "enabled": True,
            "sampling": self.settings.sampling,
            "queries_per_level": self.settings.queries,
            "exported": tracer.exported,
            "sampled": tracer.sampled,
        }
        tracing.update(summarize_levels(self.by_batch_size))
        trace_id = tracer.trace_id
        tracer.set_root_attributes({"mlmodelscope.status": document.get("status")})
        tracer.end(error)
        if output is not None:
            path = trace_path(output)
            try:
                write_trace_file(path, trace_id, tracer.resource(), tracer.spans())
                tracing["trace_file"] = path.name
            except OSError as exc:
                tracing["trace_file_error"] = str(exc)
        try:
            problem = tracer.shutdown(timeout_s=5.0)
        except Exception as exc:  # a broken collector must not fail the evaluation
            problem = str(exc)
        if problem:
            tracing["export_error"] = problem
        if trace_id is not None:
            document["trace_id"] = trace_id
        document["tracing"] = tracing


def summarize_levels(by_batch_size: list[dict[str, Any]]) -> dict[str, Any]:
    """The document's ``tracing.levels`` (first batch size, the headline) plus every batch."""
    if not by_batch_size:
        return {"levels": {}, "by_batch_size": []}
    first = by_batch_size[0]
    levels: dict[str, Any] = {}
    for level, result in first["levels"].items():
        levels[level] = {"batch_size": first["batch_size"], **result}
    return {
        "untraced_p50_s": first["untraced"]["p50_s"],
        "levels": levels,
        "by_batch_size": by_batch_size,
    }


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        return max(int(value), 1)
    except ValueError:
        log.warning("%s=%r is not an integer; using %d", name, value, default)
        return default
