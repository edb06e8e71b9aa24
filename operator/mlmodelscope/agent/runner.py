"""One evaluation, end to end: the agent's main path, shared by `mlms run` and the job image.

:func:`evaluate` runs the stages of :mod:`mlmodelscope.agent.stages` in order. Order matters
for honest numbers: every check that can fail on the spec runs before anything is measured,
and the accuracy pass runs apart from the latency measurement. The result document is written
atomically and only once: a failed run writes a document whose status says Failed, never one
that looks complete.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlmodelscope.agent.cost import NodePrice, cost_per_1000, cost_section
from mlmodelscope.agent.credentials import remember_evaluation_secrets
from mlmodelscope.agent.document import ResultDraft, check_contract, finish, redact, section
from mlmodelscope.agent.hooks import HooksFactory, Reporter, no_hooks
from mlmodelscope.agent.provenance import spec_hash
from mlmodelscope.agent.stages import (
    Bench,
    Data,
    Run,
    check_driver,
    fetch,
    import_agent,
    load_data,
    load_model,
    load_postprocessor,
    measure_accuracy,
    measure_batch,
    plan_batch,
    provenance,
    set_up_bench,
    traced_passes,
)
from mlmodelscope.agent.startup import Timeline
from mlmodelscope.contract.redact import redact_text
from mlmodelscope.contract.result import CostInfo, ResultError
from mlmodelscope.spec import LoadedEvaluation, SpecError, parse_duration
from mlmodelscope.spec.status import BatchResult, IntervalMs, LatencySummary


class EvaluationError(RuntimeError):
    """The evaluation failed; ``document`` is the Failed result document (also on disk)."""

    def __init__(self, message: str, document: dict[str, Any], path: Path | None) -> None:
        super().__init__(message)
        self.document = document
        self.path = path


@dataclass(frozen=True)
class RunOutcome:
    """What one evaluation produced."""

    document: dict[str, Any]
    path: Path | None
    outputs: np.ndarray | None
    """First model output of the accuracy pass, in dataset order (for cross-framework checks)."""


def write_document(document: dict[str, Any], path: Path) -> None:
    """Write JSON atomically: readers see the old file or the complete new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False
    ) as tmp:
        json.dump(document, tmp, indent=1, allow_nan=False)
        tmp.write("\n")
    Path(tmp.name).replace(path)


def p50_interval_ms(spread: dict[str, Any] | None) -> IntervalMs | None:
    """The spread's p50 (seconds) as the row's interval in ms; None without repetitions."""
    if not spread:
        return None
    p50 = spread["p50_s"]

    def ms(value: float | None) -> float | None:
        return None if value is None else value * 1e3

    return IntervalMs(
        estimate=p50["estimate"] * 1e3,
        low=ms(p50.get("low")),
        high=ms(p50.get("high")),
        confidence_level=spread.get("confidence_level"),
        repetitions=spread.get("repetitions"),
    )


def headline(
    measurement: dict[str, Any],
    accuracy: dict[str, Any] | None,
    task: dict[str, Any] | None = None,
    price: NodePrice | None = None,
) -> BatchResult:
    """One batch size's row: what the summary carries and the operator puts in .status. Its
    metric is the task's primary metric, or top-1 for classification; its efficiency the
    reported window's energy per inference and, given a price, the cost per 1,000."""
    pct = measurement["latency"]["percentiles_s"]
    if task is not None:
        metric, value = task["primary"], task["metrics"][task["primary"]]
    else:
        metric, value = "top1", None if accuracy is None else accuracy["top1"]
    energy = measurement.get("energy") or {}
    per_inference = energy.get("joules_per_inference")
    return BatchResult(
        batch_size=measurement["batch_size"],
        scenario=measurement["scenario"],
        latency_ms=LatencySummary(
            p50=pct.get("p50", 0.0) * 1e3,
            p90=pct.get("p90", 0.0) * 1e3,
            p99=pct.get("p99", 0.0) * 1e3,
            mean=measurement["latency"]["mean_s"] * 1e3,
        ),
        p50_interval_ms=p50_interval_ms(measurement.get("spread")),
        throughput=measurement["throughput_samples_per_s"],
        qps=measurement["qps"],
        top1=None if accuracy is None else accuracy["top1"],
        top5=None if accuracy is None else accuracy["top5"],
        metric=metric if value is not None else None,
        metric_value=value,
        valid=measurement["verdict"]["valid"],
        invalid_reasons=measurement["verdict"]["reasons"],
        joules_per_inference=per_inference,
        energy_method=energy.get("method") if per_inference is not None else None,
        cost_per_1000=cost_per_1000(price, measurement["throughput_samples_per_s"]),
    )


@dataclass(frozen=True)
class _Options:
    """How :func:`evaluate` was asked to run, beyond the evaluation itself."""

    output: Path | None
    include_raw: bool
    price: NodePrice | None
    started: float
    """``time.monotonic()`` when the run started."""


def evaluate(
    loaded: LoadedEvaluation,
    *,
    output: Path | None = None,
    reporter: Reporter | None = None,
    include_raw: bool = True,
    cache_dir: Path | None = None,
    hooks: HooksFactory = no_hooks,
    price: NodePrice | None = None,
) -> RunOutcome:
    """Run one evaluation and write its result document to ``output`` (a .json path).

    ``price`` (per node-hour) gives each row its cost per 1,000 inferences.

    ``hooks`` creates the run's telemetry (``mlms run`` and ``mlms agent`` pass
    :meth:`mlmodelscope.telemetry.agent.AgentTelemetry.start`); the default does nothing.
    Raises :class:`EvaluationError` (with a Failed document written) on any failure.
    """
    run = Run(loaded, reporter or Reporter(), no_hooks(loaded.evaluation), Timeline(), cache_dir)
    spec = loaded.evaluation.spec
    remember_evaluation_secrets(spec.model_dump(mode="json", by_alias=True, exclude_none=True))
    options = _Options(output, include_raw, price, time.monotonic())
    draft = ResultDraft.begin(loaded)
    try:
        outputs = _run_stages(run, draft, hooks, options)
    except Exception as exc:
        field = exc.field if isinstance(exc, SpecError) else None
        message = redact_text(str(exc))
        error = ResultError(type=type(exc).__name__, message=message, field=field)
        document = draft.document(error)
        _publish(document, run, options, exc)
        raise EvaluationError(message, document, output) from exc
    finally:
        run.held.close()
    document = draft.document()
    _publish(document, run, options)
    return RunOutcome(document, output, outputs)


def _run_stages(
    run: Run, draft: ResultDraft, hooks: HooksFactory, options: _Options
) -> np.ndarray | None:
    """Every stage in order, each section into ``draft`` as soon as it exists; returns the
    accuracy pass's first output (classification)."""
    run.instrument(hooks)  # telemetry: evaluation span (TRACEPARENT), Pushgateway progress
    import_agent()
    draft.spec_sha256 = spec_hash(run.spec)
    loadgen = check_driver(run)
    model_file = fetch(run)
    draft.model = model_file.section
    data = load_data(run)
    draft.dataset = data.section
    model = load_model(run, model_file)
    draft.backend = model.section
    postprocess = load_postprocessor(run)
    draft.stack = provenance(run, model)
    accuracy = measure_accuracy(run, data, model, postprocess)
    draft.accuracy, draft.task = accuracy.result, accuracy.task
    draft.accuracy_skipped = accuracy.skipped
    deadline = options.started + parse_duration(run.spec.timeout)
    bench = set_up_bench(
        run,
        model,
        postprocess,
        deadline=deadline,
        loadgen=loadgen,
        output=options.output,
        include_raw=options.include_raw,
    )
    draft.measurements = _measure(run, draft, bench, data)
    draft.cost = CostInfo.model_validate(cost_section(options.price))
    accuracy_section, task_section = section(draft.accuracy), section(draft.task)
    draft.results = [
        headline(m, accuracy_section, task_section, options.price) for m in draft.measurements
    ]
    return accuracy.outputs


def _measure(run: Run, draft: ResultDraft, bench: Bench, data: Data) -> list[dict[str, Any]]:
    """Each batch size in turn, under one GPU sampling; ``draft.startup`` from the first
    timed query. The traced passes run after each measurement, never inside it."""
    scenario = run.spec.scenario
    measurements = []
    with run.timed("measure"), run.telemetry.gpu_sampling(bench.device):
        for batch_size in scenario.batch_sizes:
            plan = plan_batch(run, bench, data, batch_size)
            with run.telemetry.scenario(scenario.type.value, batch_size):
                measured = measure_batch(run, bench, plan, with_startup=draft.startup is None)
                if measured.startup is not None:
                    draft.startup = measured.startup
                measurements.append(measured.entry)
                traced_passes(run, bench, data, plan, measured)
    return measurements


def _publish(
    document: dict[str, Any], run: Run, options: _Options, error: BaseException | None = None
) -> None:
    """Complete the document (times, telemetry's sections), redact it, hold it to the
    contract and write it."""
    finish(document, run.timings, options.started)
    run.telemetry.finish(document, options.output, error=error)  # trace, metrics push
    redact(document)
    check_contract(document)
    if options.output is not None:
        write_document(document, options.output)
