"""The `mlms` command line. Commands import what they need when they run, so `mlms --help`
stays fast and a missing framework only matters to the command that uses it."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from mlmodelscope import __version__

if TYPE_CHECKING:
    from mlmodelscope.agent.recorder import Recorder, Recording, ResultStore
    from mlmodelscope.agent.runner import RunOutcome
    from mlmodelscope.spec import LoadedEvaluation
    from mlmodelscope.spec.evaluation import Device, FrameworkName

app = typer.Typer(
    name="mlms",
    help="Evaluate and benchmark deep-learning models reproducibly, locally or on Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
LOG_WIDTH = 160
"""Line width when output goes to a file or pipe (CI logs, ``| tee``): Rich would assume 80
columns there and cut the results table into ellipses."""


def _console(stderr: bool = False) -> Console:
    """Fit the terminal when there is one (or $COLUMNS says); otherwise use LOG_WIDTH."""
    probe = Console(stderr=stderr)
    if probe.is_terminal or "COLUMNS" in os.environ:
        return probe
    return Console(stderr=stderr, width=LOG_WIDTH)


console = _console()
errors = _console(stderr=True)


def fail(text: str) -> None:
    """Print an error on stderr verbatim: no Rich markup (``mlmodelscope[torch]`` is not a
    style tag) and no hard wrapping (messages are copied into issues and searched)."""
    errors.print(f"[red]✗[/red] {escape(text)}", soft_wrap=True, highlight=False)


REPO_CRDS = Path("crds")
CHART_CRDS = Path("helm/mlmodelscope/crds")


@app.command()
def version() -> None:
    """Print the mlmodelscope version."""
    console.print(__version__)


MODELS_HELP = (
    "A file or folder of Model manifests that modelRef and basedOn may name (repeatable); "
    "Models in the files given are always available."
)


@app.command()
def validate(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="YAML files (or folders of them) of ModelEvaluations, EvaluationSweeps and Models."
        ),
    ],
    models: Annotated[list[Path] | None, typer.Option("--models", help=MODELS_HELP)] = None,
) -> None:
    """Check ModelEvaluation, EvaluationSweep and Model files against the spec, document by
    document, naming every field at fault (for a sweep, also every child it would create),
    and resolve every modelRef against the Models given."""
    from mlmodelscope.spec.resources import check_files

    checked, unusable = check_files(files, models or [])
    for error in unusable:
        fail(str(error))
    for item in checked:
        if item.error is not None:
            fail(str(item.error))
            continue
        note = f": {item.children} ModelEvaluations" if item.children else ""
        console.print(f"[green]✓[/green] {item.source}{note}", highlight=False)
    failed = bool(unusable) or any(item.error is not None for item in checked)
    raise typer.Exit(1 if failed else 0)


@app.command()
def crd(
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Folder to write the CRD YAML into.")
    ] = REPO_CRDS,
    check: Annotated[
        bool, typer.Option("--check", help="Only check that the generated files are up to date.")
    ] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="Print the CRDs instead.")] = False,
) -> None:
    """Generate the CustomResourceDefinitions from the spec models, and the result document's
    JSON schema from the contract models."""
    from mlmodelscope.contract import schema
    from mlmodelscope.spec.crd import render_crds, stale_crds, write_crds

    if stdout:
        for text in render_crds().values():
            typer.echo(text, nl=False)
        return
    folders = [output_dir]
    if output_dir == REPO_CRDS and CHART_CRDS.is_dir():
        folders.append(CHART_CRDS)  # the chart ships a copy; keep it in step
    if check:
        stale = [str(folder / name) for folder in folders for name in stale_crds(folder)]
        if schema.is_stale():
            stale.append(str(schema.SCHEMA_PATH))
        if stale:
            errors.print(f"out of date: {', '.join(stale)}; run `mlms crd`")
            raise typer.Exit(1)
        shown = " and ".join(str(folder) for folder in folders)
        console.print(f"CRDs in {shown} and {schema.SCHEMA_PATH.name} are up to date")
        return
    for path in [*(p for folder in folders for p in write_crds(folder)), schema.write()]:
        console.print(f"wrote {path}")


@app.command(name="hash")
def hash_model(
    path: Annotated[
        Path, typer.Argument(help="A model file, a directory model (SavedModel) or an archive.")
    ],
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print only the digest the agent records."),
    ] = False,
) -> None:
    """Print the sha256 to pin in spec.model.sha256: the digest the agent verifies."""
    import tempfile
    import zipfile

    from mlmodelscope.agent.sources import (
        directory_sha256,
        extract_archive,
        file_sha256,
        is_archive,
    )
    from mlmodelscope.spec.base import SpecError

    if not path.exists():
        fail(f"{path}: no such file or directory")
        raise typer.Exit(1)
    if path.is_dir():
        digest = directory_sha256(path)
        typer.echo(digest if quiet else f"{digest}  {path.as_posix().rstrip('/')}/")
        if not quiet:
            errors.print(
                "a directory's digest: sha256 over the sorted lines '<file sha256>  <path>' of "
                "its files (docs/spec.md#model)",
                highlight=False,
                soft_wrap=True,
            )
        return
    digest = file_sha256(path)
    if not is_archive(path.name):
        typer.echo(digest if quiet else f"{digest}  {path}")
        return
    # The agent unpacks an archive and records its tree's digest; a pin may name either.
    with tempfile.TemporaryDirectory(prefix="mlms-hash-") as tmp:
        try:
            tree = directory_sha256(extract_archive(path, Path(tmp) / "tree", field=""))
        except (SpecError, OSError, zipfile.BadZipFile) as exc:
            fail(f"{path}: {exc}")
            raise typer.Exit(1) from None
    if quiet:
        typer.echo(tree)
        return
    typer.echo(f"{digest}  {path}")
    typer.echo(f"{tree}  {path} (unpacked)")
    errors.print(
        "first: the archive file (as sha256sum prints it); second: the folder it unpacks to, "
        "which the agent records as the model's sha256. spec.model.sha256 accepts either.",
        highlight=False,
        soft_wrap=True,
    )


class RunRuntime(StrEnum):
    """Where `mlms run` runs an evaluation."""

    LOCAL = "local"
    DOCKER = "docker"


@app.command()
def run(
    spec: Annotated[
        Path,
        typer.Argument(
            help="A ModelEvaluation YAML file (one or more documents; Models in it serve modelRef)."
        ),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for the result documents.")
    ] = Path("results"),
    raw: Annotated[
        bool, typer.Option("--raw/--no-raw", help="Keep every latency sample in the result.")
    ] = True,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Run only these evaluations (by name).")
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="MLMS_STORE_URL",
            help="Results store to record every run in: a SQLAlchemy URL or a SQLite file "
            "(default: runs.db in the user's data directory).",
        ),
    ] = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Do not record the runs in a results store.")
    ] = False,
    models: Annotated[list[Path] | None, typer.Option("--models", help=MODELS_HELP)] = None,
    runtime: Annotated[
        RunRuntime,
        typer.Option(
            "--runtime",
            help="local: in this process; docker: each evaluation in its framework's agent "
            "image (the software stack of a cluster Job), through the Docker engine.",
        ),
    ] = RunRuntime.LOCAL,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="--runtime docker: the image to run every evaluation in (default: "
            "spec.framework.image, else the operator's image for the framework and device).",
        ),
    ] = None,
    price_per_node_hour: Annotated[
        float | None,
        typer.Option(
            "--price-per-node-hour",
            min=0,
            metavar="USD",
            help="What this machine costs per hour: each result row gets its cost per 1,000 "
            "inferences at the measured throughput (without it: not measured).",
        ),
    ] = None,
) -> None:
    """Run evaluations locally with no cluster: the same agent the Kubernetes jobs run, in
    this process or (--runtime docker) in the framework's container image."""
    from mlmodelscope.agent.startup import mark

    mark("cli")  # the start-up timeline's end of Python and CLI start-up
    import json

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from mlmodelscope.agent.cost import NodePrice
    from mlmodelscope.agent.recorder import Recorder
    from mlmodelscope.agent.report import (
        agreement,
        efficiency_table,
        results_table,
        spread_lines,
    )
    from mlmodelscope.agent.runner import EvaluationError, evaluate
    from mlmodelscope.spec import SpecValidationError
    from mlmodelscope.spec.resources import load_runnable
    from mlmodelscope.telemetry.agent import AgentTelemetry

    try:
        loaded = load_runnable(spec, models or [])
    except SpecValidationError as exc:
        fail(str(exc))
        raise typer.Exit(2) from None
    if only:
        loaded = [item for item in loaded if item.evaluation.metadata.name in only]
    outcomes: list[RunOutcome] = []
    failed = 0
    recorder = Recorder(None if no_store else store or "", _open_store)
    price = None
    if price_per_node_hour is not None:
        price = NodePrice(price_per_node_hour, "mlms run --price-per-node-hour")
    if runtime is RunRuntime.DOCKER:
        outcomes, failed = _docker_runs(
            loaded, output, raw=raw, image=image, recorder=recorder, price=price_per_node_hour
        )
        loaded = []  # ran above; the table and the comparison below are shared
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
    ) as bar:
        for item in loaded:
            name = item.evaluation.metadata.name
            task = bar.add_task(name, total=None)
            reporter = _bar_reporter(bar, task, name)
            try:
                outcome = evaluate(
                    item,
                    output=output / f"{name}.json",
                    reporter=reporter,
                    hooks=AgentTelemetry.start,
                    price=price,
                )
                outcomes.append(outcome)
                console.print(f"[green]✓[/green] {name} → {output / f'{name}.json'}")
                _print_recording(recorder.record(name, outcome.document))
            except EvaluationError as exc:
                failed += 1
                fail(f"{name}: {exc}")
                _print_recording(recorder.record(name, exc.document))
            bar.remove_task(task)
    recorder.close()
    if outcomes:
        table, notes = results_table(outcomes)
        console.print(table)
        for note in [*notes, *spread_lines(outcomes)]:
            console.print(note, highlight=False)
        efficiency, reasons = efficiency_table(outcomes)
        console.print(efficiency)
        for reason in reasons:
            console.print(reason, highlight=False, markup=False, soft_wrap=True)
        check = agreement(outcomes)
        if check:
            for row in check["outputs"]:
                console.print(
                    f"outputs of {row['evaluation']} vs {check['reference']}: "
                    f"max |diff| = {row['max_abs_output_diff']:.3g}"
                )
            if check["top1_spread_percentage_points"] is not None:
                spread = check["top1_spread_percentage_points"]
                console.print(f"top-1 spread across evaluations: {spread:.2f} percentage points")
            (output / "comparison.json").write_text(json.dumps(check, indent=1) + "\n")
    raise typer.Exit(1 if failed else 0)


def _docker_runs(
    loaded: list[LoadedEvaluation],
    output: Path,
    *,
    raw: bool,
    image: str | None,
    recorder: Recorder,
    price: float | None = None,
) -> tuple[list[RunOutcome], int]:
    """``mlms run --runtime docker``: each run of
    :func:`~mlmodelscope.agent.container_runs.run_in_images` printed, its document recorded.
    Returns the outcomes and how many evaluations failed."""
    from mlmodelscope.agent.container import ContainerRuntimeError
    from mlmodelscope.agent.container_runs import run_in_images

    runs = run_in_images(
        loaded,
        output,
        image=image,
        default_image=_default_image,
        raw=raw,
        price=price,
        starting=lambda name, ref: errors.print(
            f"{name}: running in {ref}", highlight=False, soft_wrap=True
        ),
        log=lambda line: errors.print(f"  │ {escape(line)}", highlight=False),
    )
    outcomes: list[RunOutcome] = []
    failed = 0
    try:
        for done in runs:
            if done.document is not None:
                _print_recording(recorder.record(done.name, done.document))
            if done.outcome is not None:
                outcomes.append(done.outcome)
                path = done.outcome.path
                console.print(f"[green]✓[/green] {done.name} → {path} (in {escape(done.image)})")
            else:
                failed += 1
                fail(f"{done.name}: {done.error}")
    except ContainerRuntimeError as exc:
        fail(str(exc))
        raise typer.Exit(2) from None
    return outcomes, failed


def _default_image(framework: FrameworkName, device: Device) -> str | None:
    """The operator's image for a framework and device; None where this install has no
    operator (an agent image), so it names no images."""
    try:
        from mlmodelscope.controller.settings import default_image
    except ModuleNotFoundError:
        return None
    return default_image(framework, device)


def _open_store(url: str | None) -> ResultStore:
    """The results store at ``url``, imported only when a run is recorded (SQLAlchemy)."""
    from mlmodelscope.store import open_store

    return open_store(url)


def _print_recording(recording: Recording) -> None:
    """One line on what became of a run's document in the results store."""
    if recording.warning is not None:
        errors.print(
            f"[yellow]![/yellow] {escape(recording.warning)}", soft_wrap=True, highlight=False
        )
    elif recording.summary is not None:
        console.print(f"  {recording.summary}", highlight=False, soft_wrap=True)


@app.command()
def runs(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="MLMS_STORE_URL",
            help="Results store: a SQLAlchemy URL or a SQLite file (default: runs.db in the "
            "user's data directory).",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Only this model name.")] = None,
    framework: Annotated[
        str | None, typer.Option("--framework", help="Only this framework.")
    ] = None,
    device: Annotated[str | None, typer.Option("--device", help="Only this device.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Only this GPU product.")] = None,
    evaluation: Annotated[
        str | None, typer.Option("--evaluation", help="Only this evaluation name.")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option("--metric", help="Only runs whose primary metric is this (top1, miou, ...)."),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="Only runs of this dataset: its name and sample count, as the API and the "
            "dashboard show it (e.g. 'digits/test (360 samples)').",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many runs.")] = 20,
) -> None:
    """List the runs recorded in the results store, newest first, each with its dataset (name
    and sample count) and its task's primary metric by name (top1, miou, accuracy)."""
    from rich.table import Table

    from mlmodelscope.contract.metric import format_metric
    from mlmodelscope.store import StoreError, open_store

    try:
        with open_store(store) as opened:
            found = opened.list_runs(
                model=model,
                framework=framework,
                device=device,
                gpu=gpu,
                evaluation=evaluation,
                metric=metric,
                dataset=dataset,
                limit=limit,
            )
            where = opened.url
    except StoreError as exc:
        fail(str(exc))
        raise typer.Exit(1) from None
    # in a 160-column log the text columns wrap; the run id, numbers and status never do
    table = Table(title=f"runs in {where}", title_justify="left")
    table.add_column("run", no_wrap=True)
    for column in ("started (UTC)", "evaluation", "model", "dataset", "framework", "device"):
        table.add_column(column)
    for column in ("batch", "p50 ms", "samples/s", "metric"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for summary in found:
        first = summary.results[0] if summary.results else None
        verdict = {True: "VALID", False: "INVALID", None: ""}[summary.valid]
        table.add_row(
            summary.run_id[:8],
            summary.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            summary.evaluation or "",
            summary.model_name or "",
            summary.dataset or "",
            " ".join(filter(None, (summary.framework, summary.framework_version))),
            summary.gpu_product or summary.device or "",
            ", ".join(str(r.batch_size) for r in summary.results),
            "" if first is None or first.latency_ms.p50 is None else f"{first.latency_ms.p50:.3f}",
            "" if first is None or first.throughput is None else f"{first.throughput:.0f}",
            ""
            if summary.metric_value is None
            else format_metric(summary.metric, summary.metric_value),
            f"{summary.status} {verdict}".strip(),
        )
    console.print(table)
    if not found:
        filtered = any((model, framework, device, gpu, evaluation, metric, dataset))
        console.print("no recorded run matches these filters" if filtered else "no runs recorded")


def _bar_reporter(bar: Any, task: Any, name: str) -> Any:
    """A runner Reporter that drives one line of a Rich progress display."""
    from mlmodelscope.agent.hooks import Reporter

    def stage(text: str) -> None:
        bar.update(task, description=f"{name}: {text}", completed=0, total=None)

    def progress(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return Reporter(stage=stage, progress=progress)


@app.command()
def trace(
    source: Annotated[
        str, typer.Argument(help="A result document (or its .trace.json), or a trace id.")
    ],
    jaeger: Annotated[
        str | None,
        typer.Option("--jaeger", help="Jaeger query URL: fetch the trace by id from there."),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Rows per table.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Break a run's trace down: top layers and kernels by time, share of predict time."""
    import json

    from mlmodelscope.telemetry.breakdown import breakdown, load_spans, render

    try:
        trace_id, spans = load_spans(source, jaeger)
    except (OSError, LookupError, ValueError) as exc:
        fail(str(exc))
        raise typer.Exit(1) from None
    groups = breakdown(spans, top=top)
    if as_json:
        typer.echo(json.dumps({"trace_id": trace_id, "passes": groups}, indent=1))
        return
    render(console, trace_id, groups)


LookupStore = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="MLMS_STORE_URL",
        help="Results store to look run ids up in: a SQLAlchemy URL or a SQLite file "
        "(default: the store `mlms run` records in).",
    ),
]
LookupServer = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="MLMS_SERVER",
        help="Look run ids up on this `mlms serve` (http://host:8080) instead of the local "
        "store; its token from $MLMS_TOKEN.",
    ),
]


ComparedSources = Annotated[
    list[str] | None,
    typer.Argument(
        help="Result documents (JSON files), folders of them, or run ids in the store. "
        "The first run is the reference.",
        show_default=False,
    ),
]
"""The runs `mlms compare` and `mlms report` take: none when ``--sweep`` selects them."""
SelectedSweep = Annotated[
    str | None,
    typer.Option(
        "--sweep",
        metavar="NAME",
        help="Also compare the runs in the results store (or the --server) labelled "
        "mlmodelscope.io/sweep=NAME (an EvaluationSweep's children), oldest first, after any "
        "SOURCES given.",
    ),
]


@app.command()
def compare(
    sources: ComparedSources = None,
    store: LookupStore = None,
    server: LookupServer = None,
    sweep: SelectedSweep = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Compare runs side by side: headline numbers against the first run, whether each
    difference is significant (faster, slower, better, worse, no significant difference),
    where runs of the same dataset disagree sample by sample (numerical agreement), and the
    differences in their HW/SW stack and spec."""
    import json

    from mlmodelscope.report.compare import SIGNIFICANCE_RUNS, CompareError
    from mlmodelscope.report.compare import compare as compare_runs
    from mlmodelscope.report.render import render as render_comparison

    sources = list(sources or [])
    try:
        if not sources and sweep is None:
            raise CompareError("nothing to compare: give result files, run ids, or --sweep NAME")
        from mlmodelscope.report.sources import load_compared

        loaded = load_compared(sources, store, server, sweep)
        if len(loaded) < 2:
            what = " ".join(sources) or f"sweep {sweep}"
            raise CompareError(f"{what}: one run; compare needs at least two")
        comparison = compare_runs(loaded, significance=len(loaded) <= SIGNIFICANCE_RUNS)
    except CompareError as exc:
        fail(str(exc))
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(comparison.to_json_dict(), indent=1))
        return
    render_comparison(console, comparison)


@app.command()
def gate(
    candidate: Annotated[
        str | None, typer.Argument(help="The run to judge: a result document or a run id.")
    ] = None,
    baselines: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="BASELINE",
            help="The run it must not regress against (same forms); or 3 or more runs of the "
            "same spec, to judge latency and throughput against their run-to-run spread.",
            show_default=False,
        ),
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            "--sweep",
            help="Gate every cell of this EvaluationSweep (from the store or --server) against "
            "the --baseline-sweep's runs of the same matrix cell and dataset, instead of runs; "
            "a cell's repeats are pooled into one decision.",
        ),
    ] = None,
    baseline_sweep: Annotated[
        str | None,
        typer.Option("--baseline-sweep", help="The sweep --sweep must not regress against."),
    ] = None,
    store: LookupStore = None,
    server: LookupServer = None,
    max_latency_increase: Annotated[
        float, typer.Option(help="Percent the p50 and the p99 latency may grow.", min=0)
    ] = 10.0,
    max_throughput_decrease: Annotated[
        float, typer.Option(help="Percent the throughput may fall.", min=0)
    ] = 10.0,
    max_accuracy_drop: Annotated[
        float, typer.Option(help="Percentage points top-1 accuracy may fall.", min=0)
    ] = 1.0,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write JUnit XML here.", dir_okay=False)
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", help="Also write a Markdown summary here.", dir_okay=False),
    ] = None,
) -> None:
    """Fail a pipeline on a real regression: exit 0 when the candidate passes, 1 when a
    metric is worse than its threshold and significantly so (against 3 or more baseline
    runs: outside their run-to-run spread), 2 when the runs are not comparable (model,
    dataset or its sample count, scenario, batch sizes or framework differ) or cannot be
    loaded."""
    from mlmodelscope.report import gate as gating
    from mlmodelscope.report.compare import CompareError, run_labels
    from mlmodelscope.report.render import gate_table

    thresholds = gating.Thresholds(max_latency_increase, max_throughput_decrease, max_accuracy_drop)
    if sweep is not None or baseline_sweep is not None:
        if sweep is None or baseline_sweep is None or candidate is not None:
            fail("--sweep and --baseline-sweep go together, without runs to gate")
            raise typer.Exit(gating.GateStatus.NOT_COMPARABLE)
        _gate_sweep(sweep, baseline_sweep, thresholds, store, server, junit, markdown)
    if candidate is None or not baselines:
        fail(
            "give the candidate run and at least one baseline run, or --sweep and --baseline-sweep"
        )
        raise typer.Exit(gating.GateStatus.NOT_COMPARABLE)
    sources = [candidate, *baselines]
    try:
        from mlmodelscope.report.sources import load_compared

        loaded = [load_compared([source], store, server) for source in sources]
        for source, runs in zip(sources, loaded, strict=True):
            if len(runs) != 1:
                raise CompareError(f"{source}: {len(runs)} runs; the gate takes one run each")
    except CompareError as exc:
        fail(str(exc))
        raise typer.Exit(gating.GateStatus.NOT_COMPARABLE) from None
    runs = [found[0] for found in loaded]
    labels = run_labels(runs)
    result = gating.gate_runs(
        runs[0].document, [run.document for run in runs[1:]], thresholds, labels=labels
    )
    if result.checks:
        console.print(gate_table(result))
    for note in result.notes:
        console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    console.print(gating.summary(result), highlight=False, markup=False, soft_wrap=True)
    for path, text in ((junit, gating.junit_xml), (markdown, gating.markdown)):
        if path is not None:
            try:
                path.write_text(text(result), encoding="utf-8")
            except OSError as exc:
                fail(f"{path}: cannot write it: {exc.strerror or exc}")
                raise typer.Exit(gating.GateStatus.NOT_COMPARABLE) from None
    raise typer.Exit(result.status)


def _gate_sweep(
    sweep: str,
    baseline_sweep: str,
    thresholds: Any,
    store: str | None,
    server: str | None,
    junit: Path | None,
    markdown: Path | None,
) -> NoReturn:
    """`mlms gate --sweep`: every cell of ``sweep`` against ``baseline_sweep``'s; exits with
    the sweep's answer."""
    from mlmodelscope.report import sweep_gate
    from mlmodelscope.report.compare import CompareError, run_labels
    from mlmodelscope.report.gate import GateStatus
    from mlmodelscope.report.render import gate_table

    try:
        from mlmodelscope.report.sources import load_compared

        found = {name: load_compared([], store, server, name) for name in (sweep, baseline_sweep)}
    except CompareError as exc:
        fail(str(exc))
        raise typer.Exit(GateStatus.NOT_COMPARABLE) from None
    labels = run_labels([*found[sweep], *found[baseline_sweep]])
    runs = [
        sweep_gate.LabelledRun(label, run.document)
        for label, run in zip(labels, [*found[sweep], *found[baseline_sweep]], strict=True)
    ]
    count = len(found[sweep])
    result = sweep_gate.gate_sweep(sweep, baseline_sweep, runs[:count], runs[count:], thresholds)
    for cell, gated in result.cells:
        console.print(f"{sweep_gate.describe(cell)}:", highlight=False, markup=False)
        if gated.checks:
            console.print(gate_table(gated))
        for note in gated.notes:
            console.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    for line in sweep_gate.cell_lines(result):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(sweep_gate.sweep_summary(result), highlight=False, markup=False, soft_wrap=True)
    for path, text in ((junit, sweep_gate.sweep_junit_xml), (markdown, sweep_gate.sweep_markdown)):
        if path is not None:
            try:
                path.write_text(text(result), encoding="utf-8")
            except OSError as exc:
                fail(f"{path}: cannot write it: {exc.strerror or exc}")
                raise typer.Exit(GateStatus.NOT_COMPARABLE) from None
    raise typer.Exit(result.status)


@app.command()
def report(
    sources: ComparedSources = None,
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="The HTML file to write.", dir_okay=False),
    ] = Path("report.html"),
    store: LookupStore = None,
    server: LookupServer = None,
    sweep: SelectedSweep = None,
) -> None:
    """Write a self-contained HTML report of runs: the comparison, numerical agreement, the
    HW/SW stack and spec differences, and plots (latency CDF, throughput against batch size,
    accuracy against latency)."""
    from mlmodelscope.report.compare import CompareError
    from mlmodelscope.report.html import render_html

    sources = list(sources or [])
    try:
        if not sources and sweep is None:
            raise CompareError("nothing to report: give result files, run ids, or --sweep NAME")
        from mlmodelscope.report.sources import load_compared

        loaded = load_compared(sources, store, server, sweep)
        page = render_html(loaded)
    except CompareError as exc:
        fail(str(exc))
        raise typer.Exit(1) from None
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        fail(f"{output}: cannot write it: {exc.strerror or exc}")
        raise typer.Exit(1) from None
    console.print(f"wrote {escape(str(output))} ({len(loaded)} runs)", highlight=False)


@app.command()
def analyze(
    sources: ComparedSources = None,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Folder for analysis.html, analysis.json and the PNGs.",
            file_okay=False,
        ),
    ] = Path("analysis"),
    store: LookupStore = None,
    server: LookupServer = None,
    sweep: SelectedSweep = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Rows of the top-N tables.")] = 10,
    plots: Annotated[
        bool, typer.Option("--plots/--no-plots", help="Draw the PNGs (needs matplotlib).")
    ] = True,
) -> None:
    """XSP's analysis of runs traced at framework level: top layers and operators by
    corrected time, time by layer type, layer latency against FLOPs and bytes moved (ONNX
    Runtime models on this machine), and the same layer across frameworks; written as
    analysis.html (self-contained), analysis.json and PNG plots."""
    from mlmodelscope.analysis.pipeline import AnalysisInputError, label_runs
    from mlmodelscope.analysis.pipeline import analyze as analyze_runs
    from mlmodelscope.analysis.plots import AnalysisExtraMissingError, write
    from mlmodelscope.report.compare import CompareError

    sources = list(sources or [])
    try:
        if not sources and sweep is None:
            raise CompareError("nothing to analyze: give result files, run ids, or --sweep NAME")
        from mlmodelscope.report.sources import load_compared

        loaded = load_compared(sources, store, server, sweep)
        runs = label_runs([(run.source, run.document.to_json_dict()) for run in loaded])
        analysis = analyze_runs(runs, top=top)
        written = write(analysis, out, plots=plots)
    except (CompareError, AnalysisInputError, AnalysisExtraMissingError) as exc:
        fail(str(exc))
        raise typer.Exit(1) from None
    except OSError as exc:
        fail(f"{out}: cannot write the analysis: {exc.strerror or exc}")
        raise typer.Exit(1) from None
    console.print(
        f"wrote {escape(str(written['html']))} and {escape(str(written['json']))} "
        f"({len(runs)} runs)",
        highlight=False,
    )


SERVE_READ_TOKEN_ENV = "MLMS_SERVE_READ_TOKEN"
SERVE_WRITE_TOKEN_ENV = "MLMS_SERVE_WRITE_TOKEN"


@app.command()
def serve(
    host: Annotated[
        str,
        typer.Option("--host", help="Address to listen on; any but loopback needs a read token."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port.")] = 8080,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="MLMS_STORE_URL",
            help="Results store to serve: a SQLAlchemy URL or a SQLite file (default: the "
            "store `mlms run` records in).",
        ),
    ] = None,
    read_token_file: Annotated[
        Path | None,
        typer.Option(
            "--read-token-file",
            dir_okay=False,
            help=f"File holding the bearer token for reads (else ${SERVE_READ_TOKEN_ENV}); "
            "without one, reads are open, which only a loopback --host allows.",
        ),
    ] = None,
    write_token_file: Annotated[
        Path | None,
        typer.Option(
            "--write-token-file",
            dir_okay=False,
            help=f"File holding the bearer token for POST /api/v1/runs (else "
            f"${SERVE_WRITE_TOKEN_ENV}); without one, writes are refused.",
        ),
    ] = None,
    jaeger_url: Annotated[
        str | None,
        typer.Option("--jaeger-url", help="Jaeger UI to link traces to, e.g. http://jaeger:16686."),
    ] = None,
    catalog: Annotated[
        list[Path] | None,
        typer.Option(
            "--catalog",
            help="A file or folder of Model manifests that launches may name (repeatable), "
            "e.g. examples/catalog/.",
        ),
    ] = None,
    launch_workers: Annotated[
        int,
        typer.Option(
            "--launch-workers",
            min=0,
            max=64,
            help="Launches run at once, each in its own `mlms run` process; 0: queue only.",
        ),
    ] = 1,
    launch_namespace: Annotated[
        str | None,
        typer.Option(
            "--launch-namespace",
            help="Create launches as ModelEvaluations in this namespace through the Kubernetes "
            "API (the pod's ServiceAccount, else $KUBECONFIG), for the operator to run, "
            "instead of running them here (--launch-workers is then 0).",
        ),
    ] = None,
) -> None:
    """Serve the results store over HTTP: the JSON API (/api/v1, OpenAPI at /openapi.json)
    and the web dashboard (/), and run the evaluations launched there."""
    try:
        import uvicorn

        from mlmodelscope.server.app import ServeSettings, create_app
        from mlmodelscope.store import StoreError, open_store
    except ModuleNotFoundError as exc:
        fail(
            f"`mlms serve` needs {exc.name}, which is not installed; install it with: "
            "pip install 'mlmodelscope[serve]'"
        )
        raise typer.Exit(2) from None
    problems: list[str] = []
    read_token = _serve_token(read_token_file, SERVE_READ_TOKEN_ENV, problems)
    write_token = _serve_token(write_token_file, SERVE_WRITE_TOKEN_ENV, problems)
    if read_token is not None and read_token == write_token:
        problems.append("the read token and the write token must differ")
    if read_token is None and not _is_loopback(host):
        problems.append(
            f"--host {host} is not a loopback address and no read token is set: anyone who "
            f"reaches it could read every run; give one with --read-token-file FILE (or "
            f"${SERVE_READ_TOKEN_ENV}), or listen on --host 127.0.0.1"
        )
    if jaeger_url is not None and not jaeger_url.startswith(("http://", "https://")):
        problems.append(f"--jaeger-url {jaeger_url}: not an http(s) URL")
    problems += [
        f"--catalog {path}: no such file or folder" for path in catalog or [] if not path.exists()
    ]
    for problem in problems:
        fail(problem)
    if problems:
        raise typer.Exit(2)
    try:
        opened = open_store(store)
    except StoreError as exc:
        fail(str(exc))
        raise typer.Exit(1) from None
    settings = ServeSettings(
        store_url=opened.url,
        read_token=read_token,
        write_token=write_token,
        jaeger_url=jaeger_url,
        catalog=tuple(str(path.resolve()) for path in catalog or []),
        launch_workers=launch_workers,
        launch_namespace=launch_namespace,
    )
    reads = "bearer token" if read_token else "open (loopback only)"
    writes = "bearer token" if write_token else "disabled"
    errors.print(
        f"serving {opened.url}: reads {reads}, writes {writes}", highlight=False, soft_wrap=True
    )
    try:
        uvicorn.run(create_app(settings, opened), host=host, port=port)
    finally:
        opened.close()


def _serve_token(path: Path | None, env: str, problems: list[str]) -> str | None:
    """The token in ``path`` (surrounding whitespace stripped), else in ``$env``, else None;
    an unreadable or empty file is a problem."""
    if path is None:
        return os.environ.get(env) or None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: cannot read the token: {getattr(exc, 'strerror', None) or exc}")
        return None
    if not token:
        problems.append(f"{path}: the token file is empty")
        return None
    return token


def _is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (127.0.0.0/8, ::1)."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


zoo_app = typer.Typer(
    help="The model zoo for timing: architectures built in code with random weights, cached.",
    no_args_is_help=True,
)
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("list")
def zoo_list() -> None:
    """List the zoo's models, their parameters and the formats they export to."""
    from mlmodelscope.zoo import ENTRIES

    for name, item in ENTRIES.items():
        formats = "onnx torchscript torch-export" + (" savedmodel" if item.keras else "")
        params = " ".join(f"{k}={v}" for k, v in item.params.items())
        console.print(f"{name:16} {item.description}\n{'':16} {params}; formats: {formats}")


@zoo_app.command("build")
def zoo_build(
    name: Annotated[str, typer.Argument(help="A zoo model (see `mlms zoo list`).")],
    fmt: Annotated[
        str, typer.Option("--format", help="onnx, torchscript, torch-export or savedmodel.")
    ] = "onnx",
    batch: Annotated[int, typer.Option("--batch", help="Batch size of the card's FLOPs.")] = 1,
    small: Annotated[
        bool, typer.Option("--small", help="The test size (low resolution, narrow).")
    ] = False,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="Override one parameter, KEY=VALUE (repeatable)."),
    ] = None,
) -> None:
    """Build (or reuse) a zoo model in the cache and print its path, sha256 and card."""
    import json

    from mlmodelscope.zoo import ensure_zoo_model

    overrides: dict[str, Any] = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--param: expected KEY=VALUE, got {item!r}")
            raise typer.Exit(2)
        overrides[key] = json.loads(value) if value.replace(".", "", 1).isdigit() else value
    try:
        artifact = ensure_zoo_model(name, fmt, batch, overrides, small)
    except ValueError as exc:
        fail(str(exc))
        raise typer.Exit(2) from None
    card = artifact.card
    console.print(f"{artifact.path}", soft_wrap=True, highlight=False)
    console.print(f"sha256 {artifact.sha256}", highlight=False)
    console.print(
        f"parameters {card['parameters']:,}  FLOPs/batch {card['flops']:,}  "
        f"inputs {json.dumps(card['inputs'])}",
        soft_wrap=True,
        highlight=False,
    )


@app.command()
def dlbricks(
    models: Annotated[list[Path], typer.Argument(help="ONNX models to estimate.")],
    threads: Annotated[int, typer.Option("--threads", help="ORT intra-op threads.")] = 1,
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per brick and model.")] = 20,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed runs first.")] = 3,
    graph: Annotated[
        str, typer.Option("--graph", help="optimized (ORT's own graph) or raw (as exported).")
    ] = "optimized",
    out: Annotated[Path | None, typer.Option("--out", help="Write the report as JSON.")] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="MLMS_STORE_URL",
            help="Results store to reuse brick timings from and record new ones in: a "
            "SQLAlchemy URL or a SQLite file (default: the store `mlms run` records in).",
        ),
    ] = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Measure every brick; store nothing.")
    ] = False,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="Write the unique bricks as a folder of runnable models (suite.json, "
            "bricks/<key>.onnx) for `mlms dlbricks-jobs`, and measure nothing.",
        ),
    ] = None,
) -> None:
    """DLBricks: benchmark each unique layer once, sum a latency estimate per model, and
    compare it with the model measured end to end under the same protocol. Bricks already
    measured on this system and stack are reused from the results store."""
    import json

    from mlmodelscope.analysis.dlbricks import BenchConfig, estimate

    for path in models:
        if not path.is_file():
            fail(f"models: no ONNX file at {path}")
            raise typer.Exit(2)
    try:
        config = BenchConfig(threads=threads, warmup=warmup, runs=runs, graph=graph)
    except ValueError as exc:
        fail(str(exc))
        raise typer.Exit(2) from None
    if export is not None:
        from mlmodelscope.analysis.bricksuite import export_suite

        suite = export_suite(models, [p.stem for p in models], config, export)
        console.print(
            f"{len(suite.bricks)} unique bricks of {len(suite.models)} models in {export}",
            highlight=False,
            soft_wrap=True,
        )
        return
    opened = None if no_store else _brick_store(store)
    try:
        report = estimate(models, config, store=opened)
    finally:
        if opened is not None:
            opened.close()
    for m in report.models:
        console.print(
            f"{m.model}: estimate {m.estimate_ms:.3f} ms, measured {m.measured_ms:.3f} ms, "
            f"error {m.error_pct:+.1f}% ({m.layers} layers, {m.bricks} bricks)",
            highlight=False,
        )
    console.print(
        f"{report.unique_bricks} unique bricks: {report.bricks_measured} measured in "
        f"{report.brick_bench_s:.2f} s, {report.bricks_reused} reused from the store "
        f"(saved {report.reuse_saved_s:.2f} s); models end to end "
        f"{report.end_to_end_bench_s:.2f} s",
        highlight=False,
    )
    if opened is not None:
        console.print(f"  brick timings in {opened.url}", highlight=False, soft_wrap=True)
    if out is not None:
        out.write_text(json.dumps(report.to_dict(), indent=2) + "\n")


@app.command(name="dlbricks-jobs")
def dlbricks_jobs(
    suite: Annotated[
        str, typer.Argument(help="pvc://CLAIM/PATH: a folder `mlms dlbricks --export` wrote.")
    ],
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of the Jobs and the claim.")
    ] = "default",
    jobs: Annotated[int, typer.Option("--jobs", help="Measuring Jobs at most.")] = 1,
    image: Annotated[
        str | None,
        typer.Option("--image", help="The worker's image (default: the onnxruntime CPU agent)."),
    ] = None,
    node_selector: Annotated[
        list[str] | None,
        typer.Option("--node-selector", help="key=value the nodes must carry (repeat)."),
    ] = None,
    toleration: Annotated[
        list[str] | None,
        typer.Option("--toleration", help="key[=value]:Effect of a taint to tolerate (repeat)."),
    ] = None,
    threads: Annotated[int, typer.Option("--threads", help="ORT intra-op threads.")] = 1,
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per brick.")] = 20,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed runs first.")] = 3,
    timeout: Annotated[
        int, typer.Option("--timeout", help="Seconds each Job may run (its deadline).")
    ] = 1800,
    out: Annotated[Path | None, typer.Option("--out", help="Write the report as JSON.")] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="MLMS_STORE_URL",
            help="Results store to reuse brick timings from and record new ones in.",
        ),
    ] = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Measure every brick; store nothing.")
    ] = False,
) -> None:
    """DLBricks on a node pool: measure an exported brick suite with Kubernetes Jobs (a plan
    Job reads the node's stack, then up to --jobs Jobs measure the bricks the store lacks for
    it) and record the timings under the node's stack."""
    import json
    import secrets

    from mlmodelscope.analysis import brick_jobs
    from mlmodelscope.contract.kube import Kube
    from mlmodelscope.controller.settings import default_image
    from mlmodelscope.spec.evaluation import Device, FrameworkName
    from mlmodelscope.spec.uris import parse_pvc_uri

    try:
        where = parse_pvc_uri(suite, "suite")
        config = brick_jobs.JobsConfig(
            namespace=namespace,
            image=image or default_image(FrameworkName.ONNXRUNTIME, Device.CPU),
            claim=where.claim,
            folder=str(where.path),
            jobs=jobs,
            threads=threads,
            warmup=warmup,
            runs=runs,
            timeout_s=timeout,
            node_selector=brick_jobs.node_selector(node_selector or []),
            tolerations=tuple(brick_jobs.toleration(t) for t in toleration or []),
        )
    except ValueError as exc:  # SpecError included
        fail(str(exc))
        raise typer.Exit(2) from None

    def say(line: str) -> None:
        console.print(line, highlight=False, soft_wrap=True)

    opened = None if no_store else _brick_store(store)
    try:
        report = brick_jobs.run_suite(
            Kube.from_environment(), config, secrets.token_hex(3), opened, say
        )
    except brick_jobs.BrickJobError as exc:
        fail(str(exc))
        raise typer.Exit(1) from None
    finally:
        if opened is not None:
            opened.close()
    for m in report.models:
        estimate = "no estimate" if m.estimate_ms is None else f"estimate {m.estimate_ms:.3f} ms"
        say(f"{m.model}: {estimate} ({m.layers} layers, {m.bricks} bricks)")
    say(
        f"{report.unique_bricks} unique bricks: {report.bricks_measured} measured in "
        f"{len(report.jobs)} Jobs ({report.brick_bench_s:.2f} s measuring), "
        f"{report.bricks_reused} reused from the store (saved {report.reuse_saved_s:.2f} s); "
        f"{report.wall_s:.0f} s in all"
    )
    stack = report.stack
    say(f"  stack {report.stack_key[:12]}: {stack.get('cpu')}, {stack.get('cpus')} CPUs")
    if opened is not None:
        say(f"  brick timings in {opened.url}")
    if out is not None:
        out.write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    for problem in report.problems:
        fail(problem)
    if report.problems:
        raise typer.Exit(1)


@app.command()
def bound(
    model: Annotated[Path, typer.Argument(help="An ONNX model.")],
    device: Annotated[
        str, typer.Option("--device", help="cpu (measured now) or a GPU product label.")
    ] = "cpu",
    threads: Annotated[int, typer.Option("--threads", help="ORT intra-op threads.")] = 1,
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per layer (cpu).")] = 20,
    out: Annotated[Path | None, typer.Option("--out", help="Write the report as JSON.")] = None,
) -> None:
    """The roofline: per layer max(FLOPs / peak, bytes / bandwidth) on a device, summed, and
    on cpu the measured layers' gaps to it: the optimization opportunities. Benanza's bound
    as the paper defines it (the best measured implementation per layer) is `mlms benanza`."""
    import json

    from mlmodelscope.analysis.benanza import bound as lower_bound
    from mlmodelscope.analysis.devices import device as lookup

    if not model.is_file():
        fail(f"model: no ONNX file at {model}")
        raise typer.Exit(2)
    try:
        dev = lookup(device, threads)
    except ValueError as exc:
        fail(str(exc))
        raise typer.Exit(2) from None
    layers = measured = None
    if device == "cpu":
        from mlmodelscope.analysis.dlbricks import BenchConfig, estimate

        run = estimate([model], BenchConfig(threads=threads, runs=runs, graph="raw")).models[0]
        layers, measured = run.per_layer_ms, run.measured_ms
    report = lower_bound(model, dev, measured_layers=layers, measured_ms=measured)
    console.print(
        f"{report.model} on {dev.name}: roofline {report.sequential_bound_ms:.3f} ms "
        f"(critical path {report.critical_path_bound_ms:.3f} ms)"
        + (f", measured {measured:.3f} ms" if measured is not None else ""),
        highlight=False,
    )
    for item in report.opportunities:
        console.print(f"  {item.kind}: {item.detail}", soft_wrap=True, highlight=False)
    if out is not None:
        out.write_text(json.dumps(report.to_dict(), indent=2, default=str) + "\n")


@app.command()
def benanza(
    models: Annotated[list[str], typer.Argument(help="ONNX files or zoo model names.")],
    small: Annotated[bool, typer.Option("--small", help="Zoo models at their test size.")] = False,
    framework: Annotated[
        list[str] | None,
        typer.Option(
            "--framework", help="onnxruntime, pytorch, tensorflow (repeat; default: all three)."
        ),
    ] = None,
    threads: Annotated[
        int, typer.Option("--threads", help="Intra-op threads in every framework.")
    ] = 1,
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per layer and model.")] = 20,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed runs first.")] = 3,
    device: Annotated[
        str, typer.Option("--device", help="The roofline's device: cpu (measured now) or a GPU.")
    ] = "cpu",
    no_roofline: Annotated[
        bool, typer.Option("--no-roofline", help="Skip the roofline column.")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write the reports as JSON.")] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            envvar="MLMS_STORE_URL",
            help="Results store to reuse brick timings from and record new ones in.",
        ),
    ] = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Measure every brick; store nothing.")
    ] = False,
) -> None:
    """Benanza's bound, measured: each layer timed alone in ONNX Runtime (three optimization
    levels), PyTorch and TensorFlow; the bound is the sum of each layer's best. Prints, per
    model and implementation, end to end, the sum of its layers, the bound, the gap and the
    roofline, and the three layers farthest from their best implementation."""
    import json

    from mlmodelscope.analysis.implementations import FRAMEWORKS, BoundConfig, measure
    from mlmodelscope.analysis.measuredbound import table

    try:
        config = BoundConfig(threads, warmup, runs, frameworks=tuple(framework or FRAMEWORKS))
    except ValueError as exc:
        fail(str(exc))
        raise typer.Exit(2) from None
    named: list[tuple[str, Path]] = []
    for model in models:
        if Path(model).is_file():
            named.append((Path(model).stem, Path(model)))
            continue
        from mlmodelscope.zoo import ENTRIES, ensure_zoo_model

        if model not in ENTRIES:
            fail(f"models: {model} is neither an ONNX file nor a zoo model ({sorted(ENTRIES)})")
            raise typer.Exit(2)
        named.append((model, ensure_zoo_model(model, small=small).path))
    roof = None
    if not no_roofline:
        from mlmodelscope.analysis.devices import device as lookup

        try:
            roof = lookup(device, threads)
        except ValueError as exc:
            fail(str(exc))
            raise typer.Exit(2) from None
    opened = None if no_store else _brick_store(store)
    try:
        results = [measure(path, config, name, store=opened, roofline=roof) for name, path in named]
    finally:
        if opened is not None:
            opened.close()
    for line in table(results):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    threads_used = results[0].conditions["threads"] if results else {}
    console.print(
        f"median of {runs} runs after {warmup} warm-up; threads (intra, inter) "
        + ", ".join(
            f"{name} {t['intra_op_threads']}/{t['inter_op_threads']}"
            for name, t in threads_used.items()
        )
        + (f"; roofline on {roof.name}" if roof is not None else ""),
        soft_wrap=True,
        highlight=False,
    )
    if out is not None:
        out.write_text(json.dumps([r.to_dict() for r in results], indent=2, default=str) + "\n")


def _brick_store(url: str | None) -> Any:
    """The results store brick timings are reused from and recorded in; None (with a warning)
    where the `store` extra is missing. A store that cannot be opened is an error."""
    try:
        from mlmodelscope.store import StoreError, open_store
    except ImportError as exc:
        errors.print(
            f"[yellow]![/yellow] {escape(str(exc))}: bricks not reused; install "
            "mlmodelscope[store], or pass --no-store",
            soft_wrap=True,
            highlight=False,
        )
        return None
    try:
        return open_store(url)
    except StoreError as exc:
        fail(f"{exc} (or pass --no-store)")
        raise typer.Exit(1) from None


def _mount_subcommands() -> None:
    """Attach sub-apps that live in optional modules."""
    try:
        from mlmodelscope.devcluster.cli import app as devcluster_app
    except ImportError:  # pragma: no cover - the module ships with the package
        return
    app.add_typer(devcluster_app, name="dev-cluster")


_mount_subcommands()


def main() -> None:
    """Console-script entry point. Log lines never repeat a URI's credentials, whichever
    command (or library) writes them."""
    from mlmodelscope.contract.redact import install_log_redaction

    install_log_redaction()
    app()


@app.command()
def agent(
    spec: Annotated[
        str, typer.Option("--spec", help="The ModelEvaluation YAML mounted from its ConfigMap.")
    ],
    output: Annotated[str, typer.Option("--output", help="Where to write the result JSON.")],
    results_configmap: Annotated[
        str | None,
        typer.Option("--results-configmap", help="ConfigMap (in this namespace) to publish to."),
    ] = None,
    termination_log: Annotated[
        str, typer.Option("--termination-log", help="Where the kubelet reads the summary.")
    ] = "/dev/termination-log",
) -> None:
    """Run one evaluation inside its Kubernetes Job and publish the results (the pod command)."""
    from mlmodelscope.agent.startup import mark

    mark("cli")  # the start-up timeline's end of Python and CLI start-up
    import logging

    from mlmodelscope.agent.pod import run_agent
    from mlmodelscope.telemetry.agent import AgentTelemetry

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    code = run_agent(spec, output, results_configmap, termination_log, hooks=AgentTelemetry.start)
    raise typer.Exit(code)


@app.command()
def operator(
    standalone: Annotated[
        bool, typer.Option("--standalone", help="No peering/leader election (one replica, dev).")
    ] = False,
    liveness: Annotated[
        str | None,
        typer.Option("--liveness", help="Serve health probes, e.g. http://0.0.0.0:8080/healthz."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Run the Kubernetes operator (settings: MLMS_OPERATOR_* variables, docs/operator.md)."""
    try:
        from mlmodelscope.controller.instrument import StartupError
        from mlmodelscope.controller.main import run_operator
        from mlmodelscope.controller.settings import OperatorSettings, SettingsError
    except ModuleNotFoundError as exc:
        _operator_missing(exc)
    try:
        settings = OperatorSettings.from_env(os.environ)
        run_operator(settings, standalone=standalone, liveness=liveness, verbose=verbose)
    except (SettingsError, StartupError) as exc:
        fail(str(exc))
        raise typer.Exit(2) from None


OPERATOR_IMAGE = "ghcr.io/mlmodelscope/operator"
"""The operator image's repository (images/docker-bake.json, the chart's ``image.repository``)."""


def _operator_missing(exc: ModuleNotFoundError) -> NoReturn:
    """One line instead of a traceback where the operator is not installed: an agent image
    carries no ``mlmodelscope.controller``; elsewhere the ``operator`` extra may be missing."""
    if (exc.name or "").startswith("mlmodelscope."):
        fail(
            f"`mlms operator` is not part of this installation ({exc.name} is missing: agent "
            f"images carry only the evaluation agent); run the operator image, "
            f"{OPERATOR_IMAGE}:{__version__}"
        )
    else:
        fail(
            f"`mlms operator` needs {exc.name}, which is not installed; install it with: "
            "pip install 'mlmodelscope[operator]'"
        )
    raise typer.Exit(2)
