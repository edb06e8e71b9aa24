"""``scenario.repetitionProcess: fresh``: each repetition of a batch size in a new process.

The agent's own process has loaded the model and run the accuracy pass; the repetitions then
run one after another, each in a fresh process (:mod:`mlmodelscope.agent.fresh_process`).
Each imports the framework, loads the model from the file the agent fetched and checked,
builds the same system under test (predict plus the spec's postprocessing) and energy meter,
runs the scenario's warm-up (Server 'auto': its own peak search too, as a separate run
would) and measures its one repetition on the batches the agent built. Its whole
:class:`~mlmodelscope.agent.scenarios.Measurement` (latencies included) comes back with the
process's id and load times, which precede every timed window, and the agent summarizes the
repetitions as it does those of one process. A repetition that fails fails the run, naming
it: a batch size never reports fewer repetitions than the spec asks for.
"""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from mlmodelscope.agent.backends import create_backend
from mlmodelscope.agent.energy import open_meter
from mlmodelscope.agent.fresh_process import (
    FreshProcessError,
    Progress,
    describe_failure,
    run_in_fresh_process,
)
from mlmodelscope.agent.processing import Postprocessor
from mlmodelscope.agent.scenarios import (
    BackendSUT,
    BatchRing,
    Measurement,
    ProcessInfo,
    run_scenario,
    summarize_repetitions,
)
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import EvaluationSpec

MIN_TIME_LIMIT_S = 1.0
"""A repetition always gets at least this long, as a batch size's measurement does."""


@dataclass(frozen=True)
class RepetitionJob:
    """What a fresh process needs to measure one repetition of one batch size."""

    spec: EvaluationSpec
    model_path: Path
    """The model file the agent fetched (its digest checked); each process loads it anew."""
    base_dir: Path | None
    """Where the spec's relative paths (a labels file) resolve."""
    ring: BatchRing
    """The batch size's queries, built once by the agent: every repetition issues them."""
    deadline: float
    """``time.monotonic()`` by which the run must end (one clock for all processes)."""
    repetition: int = 0


class RepetitionError(RuntimeError):
    """A repetition's fresh process failed, so the run fails."""


class RepetitionSpecError(RepetitionError, SpecError):
    """A repetition's fresh process failed on a spec field (e.g. a model it cannot load)."""

    def __init__(self, field: str, message: str) -> None:
        SpecError.__init__(self, field, message)


def repetition_error(job: RepetitionJob, failed: FreshProcessError) -> RepetitionError:
    """The run's error for ``job``'s failed process: which repetition of which batch size,
    the process and its error; a spec field the error named stays named."""
    count = job.spec.scenario.repetitions
    text = (
        f"repetition {job.repetition + 1} of {count} (batch size {job.ring.batch_size}) "
        f"failed in its fresh process {failed.pid}: "
        f"{describe_failure(failed.exitcode, failed.failure)}"
    )
    field = failed.failure.field if failed.failure is not None else None
    return RepetitionSpecError(field, text) if field else RepetitionError(text)


def measure_fresh(job: RepetitionJob, progress: Progress | None = None) -> Measurement:
    """Every repetition the scenario asks for, each in its own fresh process, one after
    another, summarized (median, spread) as repetitions in one process are."""
    scenario = job.spec.scenario
    reps: list[Measurement] = []
    for r in range(scenario.repetitions):
        one = replace(job, repetition=r)
        try:
            measured = run_in_fresh_process(measure_repetition, one, progress=progress)
        except FreshProcessError as exc:
            raise repetition_error(one, exc) from exc
        reps.append(measured)
    return summarize_repetitions(scenario, reps)


def measure_repetition(job: RepetitionJob, progress: Progress) -> Measurement:
    """In the fresh process: import the framework, load the model, set up the system under
    test as the agent does, then warm up and measure repetition ``job.repetition``."""
    spec = job.spec
    backend = create_backend(spec.framework.name)
    try:
        started = time.perf_counter_ns()
        backend.import_framework()
        imported = time.perf_counter_ns()
        backend.load(job.model_path, spec)
        process = ProcessInfo(
            pid=os.getpid(),
            framework_import_s=(imported - started) / 1e9,
            model_load_s=(time.perf_counter_ns() - imported) / 1e9,
        )
        postprocess = Postprocessor(spec.postprocessing, base_dir=job.base_dir)
        sut = BackendSUT(backend, postprocess.timed if spec.postprocessing else None)
        meter = open_meter(backend.info().device)
        gc.freeze()  # as the agent's process does: collections skip the loaded model
        with backend.measuring():
            measured = run_scenario(
                spec.scenario,
                sut,
                job.ring,
                progress=progress,
                time_limit_s=max(job.deadline - time.monotonic(), MIN_TIME_LIMIT_S),
                meter=meter,
                repetition=job.repetition,
            )
    finally:
        backend.close()
    return replace(measured.repetitions[0], process=process)
