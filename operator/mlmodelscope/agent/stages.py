"""The stages of one evaluation, each a function of what the earlier ones returned.

:func:`~mlmodelscope.agent.runner.evaluate` runs them in order. Each returns a small record:
what later stages need (the model file, the samples, the loaded backend) and its section of
the result document, typed as the contract types it. Every check that can fail on the spec
(sources, dataset, shapes, framework version) runs before anything is measured; samples are
preprocessed into memory before timing (MLPerf's sample library), and the accuracy pass runs
apart from the latency measurement.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlmodelscope.agent.accuracy import accuracy_pass, task_accuracy
from mlmodelscope.agent.backends import Backend, create_backend
from mlmodelscope.agent.hooks import HooksFactory, Reporter, RunHooks
from mlmodelscope.agent.startup import Timeline
from mlmodelscope.contract.redact import redact_uri
from mlmodelscope.contract.result import (
    AccuracyResult,
    BackendInfo,
    DatasetInfo,
    ModelInfo,
    StartupInfo,
    TaskResult,
)
from mlmodelscope.spec import LoadedEvaluation, SpecError
from mlmodelscope.spec.evaluation import (
    DatasetType,
    EvaluationSpec,
    RepetitionProcess,
    ScenarioDriver,
    TaskType,
)

if TYPE_CHECKING:
    from mlmodelscope.agent.datasets import Samples
    from mlmodelscope.agent.energy import EnergyMeter
    from mlmodelscope.agent.processing import Postprocessor, Preprocessor
    from mlmodelscope.agent.scenarios import BackendSUT, BatchRing, Measurement

AGENT_MODULES = ("datasets", "energy", "processing", "scenarios", "sources", "stats")
"""The agent modules the stages import when the run starts (see :func:`import_agent`)."""


@dataclass
class Run:
    """What every stage of one evaluation shares: the evaluation, the UI reporter, telemetry,
    the start-up timeline, each stage's duration and what the run holds until it ends."""

    loaded: LoadedEvaluation
    report: Reporter
    telemetry: RunHooks
    startup: Timeline
    cache_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    """Released when the run ends, succeeded or not (the backend, a frozen heap)."""

    @property
    def spec(self) -> EvaluationSpec:
        return self.loaded.evaluation.spec

    def instrument(self, hooks: HooksFactory) -> None:
        """Start the run's telemetry (evaluation span, progress metrics) and report through it."""
        self.telemetry = hooks(self.loaded.evaluation)
        self.report = self.telemetry.wrap(self.report)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """One stage of real work: shown to the user, one telemetry span, and its duration in
        the document's ``stage_durations_s``."""
        self.report.stage(name)
        t0 = time.perf_counter_ns()
        try:
            with self.telemetry.span(name):
                yield
        finally:
            self.timings[name] = (time.perf_counter_ns() - t0) / 1e9


def import_agent() -> None:
    """Import the agent's modules now, not when this module is imported: their cost is the
    start-up timeline's ``agent_imports`` phase, and a failed import a Failed document."""
    for name in AGENT_MODULES:
        importlib.import_module(f"mlmodelscope.agent.{name}")


def check_driver(run: Run) -> bool:
    """Whether the scenario runs under MLPerf LoadGen, whose package is imported now: before
    anything is fetched, as a missing package is the spec's to fix. Ends ``agent_imports``."""
    loadgen = run.spec.scenario.driver == ScenarioDriver.LOADGEN
    if loadgen:
        from mlmodelscope.agent.loadgen_driver import import_loadgen

        import_loadgen()
    run.startup.mark("agent_imports")
    return loadgen


@dataclass(frozen=True)
class ModelFile:
    """The model, fetched to local disk and its digest checked."""

    path: Path
    section: ModelInfo


def fetch(run: Run) -> ModelFile:
    """Fetch ``spec.model`` (verifying a pinned sha256) and describe exactly which bytes."""
    from mlmodelscope.agent.sources import fetch_model

    model = run.spec.model
    with run.timed("fetch model"):
        fetched = fetch_model(model, base_dir=run.loaded.base_dir, cache_dir=run.cache_dir)
    run.startup.mark("fetch_model")
    return ModelFile(
        fetched.path,
        ModelInfo(
            name=model.name,
            version=model.version,
            format=model.format.value,
            uri=redact_uri(model.uri),
            sha256=fetched.sha256,
            sha256_verified=model.sha256 is not None,
            source=fetched.source,
            cached=fetched.cached,
        ),
    )


@dataclass(frozen=True)
class Inputs:
    """Every sample as the model takes it, prepared before any timing."""

    feeds: list[np.ndarray]
    """One array per model input, samples along the first axis."""
    latencies_ns: np.ndarray
    """Each sample's preprocessing (text: tokenizing) time."""
    truncated: int | None = None
    """Text datasets: how many texts were cut to ``dataset.maxLength``."""
    preprocessor: Preprocessor | None = None
    """Image datasets: the steps, which the traced passes run again."""


@dataclass(frozen=True)
class Data:
    """The dataset, loaded and preprocessed into memory."""

    samples: Samples
    inputs: Inputs
    section: DatasetInfo


def load_data(run: Run) -> Data:
    """Load ``spec.dataset`` in its deterministic order and prepare every sample's inputs."""
    from mlmodelscope.agent.datasets import load_dataset
    from mlmodelscope.agent.stats import summarize_latencies

    spec = run.spec
    with run.timed("load dataset"):
        samples = load_dataset(spec.dataset, seed=spec.scenario.seed, base_dir=run.loaded.base_dir)
    with run.timed("preprocess"):
        if spec.dataset.type == DatasetType.TEXT:
            inputs = _tokenized(spec, samples, run.loaded.base_dir)
        else:
            inputs = _preprocessed(spec, samples)
    extra: dict[str, Any] = {"skipped": samples.skipped} if samples.skipped else {}
    if inputs.truncated is not None:
        extra["truncated"] = inputs.truncated
    section = DatasetInfo(
        name=samples.name,
        type=spec.dataset.type.value,
        samples=len(samples),
        labelled=samples.has_labels,
        preprocessing=summarize_latencies(inputs.latencies_ns, (50.0, 90.0, 99.0)).to_dict(),
        **extra,
    )
    run.startup.mark("dataset")
    return Data(samples, inputs, section)


def _preprocessed(spec: EvaluationSpec, samples: Samples) -> Inputs:
    """An image dataset through ``spec.preprocessing``, checked against the model's input."""
    from mlmodelscope.agent.processing import Preprocessor, preprocess_all

    pre = Preprocessor(spec.preprocessing, layout=spec.dataset.layout)
    raw_shape = samples.x.shape[1:] if isinstance(samples.x, np.ndarray) else None
    raw_dtype = samples.x.dtype.name if isinstance(samples.x, np.ndarray) else None
    pre.check_model_input(spec.model.inputs[0], raw_shape, raw_dtype)
    if len(spec.model.inputs) > 1:
        raise SpecError(
            "spec.model.inputs",
            "an image dataset feeds one model input; a model with several inputs "
            "needs a dataset with several fields (dataset.type: text)",
        )
    inputs, pre_ns = preprocess_all(pre, samples)
    return Inputs([inputs], pre_ns, preprocessor=pre)


def _tokenized(spec: EvaluationSpec, samples: Samples, base_dir: Path | None) -> Inputs:
    """A text dataset through its tokenizer: the model's inputs from the token fields, each
    text's tokenizing time (its preprocessing) and how many texts were truncated."""
    from mlmodelscope.agent.tasks.feeds import model_feeds
    from mlmodelscope.agent.tasks.tokens import dataset_tokenizer, tokenize

    tokenizer = dataset_tokenizer(spec.dataset, base_dir)
    texts = [str(x) for x in samples.x]
    tokens = tokenize(tokenizer, texts, spec.dataset.max_length)
    feeds = model_feeds(spec.model.inputs, tokens.fields)
    return Inputs(feeds, tokens.latencies_ns, truncated=tokens.truncated)


@dataclass(frozen=True)
class LoadedModel:
    """The model loaded in its framework, which has passed the spec's version constraint."""

    backend: Backend
    section: BackendInfo
    path: Path
    """The file it was loaded from (a fresh process per repetition loads it again)."""


def load_model(run: Run, model: ModelFile) -> LoadedModel:
    """Import the framework and load the model; the backend is held until the run ends."""
    spec = run.spec
    backend = create_backend(spec.framework.name)
    run.held.callback(backend.close)
    with run.timed("import framework"):
        backend.import_framework()
    run.startup.mark("framework_import")
    with run.timed("load model"):
        backend.load(model.path, spec)
    info = backend.info()
    check_framework_version(spec, info.framework_version)
    section = BackendInfo(
        framework=info.framework,
        framework_version=info.framework_version,
        device=info.device,
        details=dict(info.details),
    )
    return LoadedModel(backend, section, model.path)


def check_framework_version(spec: EvaluationSpec, installed: str) -> None:
    """SpecError unless the installed framework satisfies ``spec.framework.version``."""
    if not spec.framework.version:
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    try:
        wanted = SpecifierSet(spec.framework.version)
    except InvalidSpecifier:
        raise SpecError(
            "spec.framework.version",
            f"{spec.framework.version!r} is not a version constraint; write e.g. '>=2.4,<3'",
        ) from None
    local = Version(installed.split("+")[0])
    if local not in wanted:
        raise SpecError(
            "spec.framework.version",
            f"installed {spec.framework.name.value} {installed} does not satisfy "
            f"{spec.framework.version!r}; use an image with a matching version or relax it",
        )


def load_postprocessor(run: Run) -> Postprocessor:
    """``spec.postprocessing``, its files read now. Ends the ``model_load`` phase."""
    from mlmodelscope.agent.processing import Postprocessor

    postprocess = Postprocessor(run.spec.postprocessing, base_dir=run.loaded.base_dir)
    run.startup.mark("model_load")
    return postprocess


def provenance(run: Run, model: LoadedModel) -> dict[str, Any]:
    """The software stack this run measures on (host, CPU, libraries, GPU, backend)."""
    from mlmodelscope.agent.provenance import collect_stack

    stack = collect_stack(backend_info=model.section.model_dump(exclude_unset=True))
    run.startup.mark("provenance")
    return stack


@dataclass(frozen=True)
class Accuracy:
    """What the accuracy pass found, or why there was none."""

    result: AccuracyResult | None = None
    task: TaskResult | None = None
    """A task other than classification: its metrics."""
    skipped: str | None = None
    """Why a pass the spec asked for did not run."""
    outputs: np.ndarray | None = None
    """Classification: the first model output of every sample, in dataset order."""


def measure_accuracy(
    run: Run, data: Data, model: LoadedModel, postprocess: Postprocessor
) -> Accuracy:
    """Every sample once, in dataset order, before and apart from the latency measurement."""
    spec = run.spec
    if not spec.scenario.accuracy:
        return Accuracy()
    if not data.samples.has_labels:
        return Accuracy(skipped=f"dataset {data.samples.name} has no labels")
    feeds, progress = data.inputs.feeds, run.report.progress
    with run.timed("accuracy pass"), model.backend.measuring():
        if spec.task.type == TaskType.CLASSIFICATION:
            result, outputs = accuracy_pass(
                model.backend,
                feeds,
                data.samples.y,
                postprocess,
                max(spec.scenario.batch_sizes),
                progress,
            )
            found = Accuracy(result, outputs=outputs)
        else:
            result, task = task_accuracy(spec, model.backend, feeds, data.samples, progress)
            found = Accuracy(result, task=task)
    run.startup.mark("accuracy_pass")
    return found


@dataclass(frozen=True)
class Bench:
    """What every batch size's measurement uses, set up once after the accuracy pass."""

    backend: Backend
    device: str
    """Where the model runs, as the backend reports it (``cpu``, ``cuda:0``)."""
    sut: BackendSUT
    postprocess: Callable[[Any], Any] | None
    """The measured postprocessing (None when the spec declares none)."""
    meter: EnergyMeter
    deadline: float
    """``time.monotonic()`` by which the run must end (``spec.timeout``)."""
    loadgen: bool
    output: Path | None
    include_raw: bool
    model_path: Path


def set_up_bench(
    run: Run,
    model: LoadedModel,
    postprocess: Postprocessor,
    *,
    deadline: float,
    loadgen: bool,
    output: Path | None,
    include_raw: bool,
) -> Bench:
    """The system under test and the energy meter. The heap alive now (the framework, the
    model, the samples) lives until the run ends: frozen, the garbage collections before
    each measurement skip it (docs/benchmarks.md, Start-up)."""
    from mlmodelscope.agent.energy import open_meter
    from mlmodelscope.agent.scenarios import BackendSUT

    timed_post = postprocess.timed if run.spec.postprocessing else None
    sut = BackendSUT(model.backend, timed_post)
    gc.freeze()
    run.held.callback(gc.unfreeze)  # collectable again once the run lets go of it
    meter = open_meter(model.section.device)
    return Bench(
        model.backend,
        model.section.device,
        sut,
        timed_post,
        meter,
        deadline,
        loadgen,
        output,
        include_raw,
        model.path,
    )


@dataclass(frozen=True)
class BatchPlan:
    """One batch size's queries, built before timing, and the time left for them."""

    batch_size: int
    ring: BatchRing
    time_left_s: float


def plan_batch(run: Run, bench: Bench, data: Data, batch_size: int) -> BatchPlan:
    """Build ``batch_size``'s queries from the preprocessed samples."""
    from mlmodelscope.agent.scenarios import BatchRing

    scenario = run.spec.scenario
    run.report.stage(f"measure {scenario.type.value} batch {batch_size}")
    ring = BatchRing.for_scenario(scenario, data.inputs.feeds, batch_size)
    return BatchPlan(batch_size, ring, max(bench.deadline - time.monotonic(), 1.0))


@dataclass(frozen=True)
class BatchMeasurement:
    """One batch size's measurement, and the run's start-up up to its first timed query."""

    entry: dict[str, Any]
    """The document's ``measurements`` entry, as the driver reports it."""
    startup: StartupInfo | None = None
    """Only when asked for and the builtin driver timed a query."""


def measure_batch(
    run: Run, bench: Bench, plan: BatchPlan, *, with_startup: bool
) -> BatchMeasurement:
    """Time ``plan``'s queries under the spec's scenario, warm-up excluded, untraced. With
    ``repetitionProcess: fresh`` each repetition runs in its own process, and no query is
    timed in this one: the document has no ``startup`` then."""
    if bench.loadgen:
        return BatchMeasurement(_loadgen_measurement(run, bench, plan))
    from mlmodelscope.agent.scenarios import measure_harness_overhead, run_scenario

    scenario = run.spec.scenario
    fresh = scenario.repetition_process == RepetitionProcess.FRESH
    overhead = measure_harness_overhead(scenario.type, plan.ring)
    setup_done = time.perf_counter_ns()
    if fresh:
        measurement = _fresh_measurement(run, bench, plan)
    else:
        with bench.backend.measuring():
            measurement = run_scenario(
                scenario,
                bench.sut,
                plan.ring,
                progress=run.report.progress,
                time_limit_s=plan.time_left_s,
                meter=bench.meter,
            )
    startup = None
    if with_startup and not fresh and measurement.first_window_start_ns:
        startup = StartupInfo.model_validate(
            run.startup.document(
                warmup_ns=setup_done,
                first_query_ns=measurement.first_window_start_ns,
                first_latency_ns=measurement.first_query_latency_ns or 0,
                warmup_queries=measurement.warmup_queries,
            )
        )
    entry: dict[str, Any] = {
        "driver": "builtin",
        "repetition_process": (RepetitionProcess.FRESH if fresh else RepetitionProcess.SAME).value,
    }
    entry.update(measurement.to_dict(include_raw=bench.include_raw))
    entry["harness_overhead"] = overhead.to_dict()
    return BatchMeasurement(entry, startup)


def _fresh_measurement(run: Run, bench: Bench, plan: BatchPlan) -> Measurement:
    """``plan``'s repetitions, each in a fresh process that loads the model again."""
    from mlmodelscope.agent.fresh_repetitions import RepetitionJob, measure_fresh

    job = RepetitionJob(
        spec=run.spec,
        model_path=bench.model_path,
        base_dir=run.loaded.base_dir,
        ring=plan.ring,
        deadline=bench.deadline,
    )
    return measure_fresh(job, progress=run.report.progress)


def _loadgen_measurement(run: Run, bench: Bench, plan: BatchPlan) -> dict[str, Any]:
    """``plan`` measured by MLPerf LoadGen, its logs kept beside the result document."""
    from mlmodelscope.agent.loadgen_driver import run_loadgen

    log_dir, base = loadgen_logs(bench.output, plan.batch_size)
    with bench.backend.measuring():
        return run_loadgen(
            run.spec.scenario,
            bench.sut,
            plan.ring,
            log_dir,
            relative_to=base,
            time_limit_s=plan.time_left_s,
            include_raw=bench.include_raw,
            thread_context=bench.backend.measuring,
            meter=bench.meter,
        )


def loadgen_logs(output: Path | None, batch_size: int) -> tuple[Path, Path | None]:
    """Where LoadGen writes one batch size's logs, and the folder the document names them
    relative to: ``<name>.loadgen/batch-<b>`` beside the result document (emptied first, so
    no file of an earlier run is mistaken for this one's), else a fresh temporary folder."""
    if output is None:
        return Path(tempfile.mkdtemp(prefix="mlms-loadgen-")), None
    folder = output.parent / f"{output.stem}.loadgen" / f"batch-{batch_size}"
    if folder.is_dir():
        shutil.rmtree(folder)
    return folder, output.parent


def traced_passes(
    run: Run, bench: Bench, data: Data, plan: BatchPlan, measured: BatchMeasurement
) -> None:
    """Telemetry's traced passes per level: after, never inside, the measurement, so the
    latency it reported is untraced (XSP leveling)."""
    run.telemetry.leveled_passes(
        bench.backend,
        plan.ring,
        stage=run.report.stage,
        raw_samples=data.samples.x,
        preprocess=data.inputs.preprocessor,
        postprocess=bench.postprocess,
        scenario=run.spec.scenario.type.value,
        measured=measured.entry,
    )
