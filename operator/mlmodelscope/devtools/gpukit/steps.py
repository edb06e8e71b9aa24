"""The kit's steps, each run in its own process by the driver: facts, evaluations, tracing,
Nsight Compute metrics.

A step writes its record to ``<work>/<step>.json`` after every stage, so a step the driver
stops at its timeout still leaves what it measured. With ``gpu=False`` the GPU steps run a
tiny CPU variant (the zoo's test sizes, short windows) and end as skipped ("no GPU"): the
code path is the GPU one, the figures mean nothing.

An evaluation is ``mlms run`` itself (the CLI's ``run`` command on a spec written here, no
results store) between two windows of the bare loop (:mod:`.bare`) on the same TorchScript
file and batches, NVML's energy counter read around every timed window on both sides
(:mod:`.energy`); then SingleStream batch 1 again in interleaved rounds, one ``mlms run`` and
one bare window each. TensorFlow is made unimportable first, as it is on the GPU machine.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from mlmodelscope.devtools.gpukit import ncu, ncu_layers_target, ncu_target, rooflines
from mlmodelscope.devtools.gpukit.bare import (
    BareLoop,
    energy_rows,
    interleaved_summary,
    merge_bare,
    overhead,
    round_order,
    suspect_rounds,
)
from mlmodelscope.devtools.gpukit.energy import agent_energy, metered_windows
from mlmodelscope.devtools.gpukit.environment import packages, profiling, tools
from mlmodelscope.devtools.gpukit.layersteps import benanza_gpu, dlbricks_gpu
from mlmodelscope.devtools.gpukit.plans import (
    CPU_PLANS,
    CPU_THREADS,
    GPU_PLANS,
    NCU_LAYERS_PLAN,
    NCU_PLAN,
    ROUNDS,
    TRACE_QUERIES,
    Plan,
)
from mlmodelscope.devtools.gpukit.record import NO_GPU
from mlmodelscope.devtools.gpukit.writer import BLOCKED, Writer, block_frameworks, fail_if

# ------------------------------------------------------------------------------- facts


def facts(work: Path, gpu: bool) -> None:
    """Environment, packages, tools, and that the package imports without TensorFlow."""
    writer = Writer(work, "facts", True)
    writer.save(
        packages=packages(),
        tools=tools(),
        profiling=profiling(),
        argv=sys.argv,
        executable=sys.executable,
    )
    block_frameworks()
    t0 = time.perf_counter()
    import mlmodelscope.cli  # noqa: F401 - the CLI imports without TensorFlow or a GPU

    writer.save(cli_import_s=round(time.perf_counter() - t0, 3), cli_imports=True)


# -------------------------------------------------------------------------- the model


def build_torchscript(plan: Plan, work: Path) -> tuple[Path, dict[str, Any]]:
    """The zoo model, seeded random weights, traced on the CPU to ``<work>/<key>.pt`` (once);
    returns the file and its input (name, shape without batch, dtype)."""
    from mlmodelscope.zoo import entry
    from mlmodelscope.zoo.build import SEED

    zoo = entry(plan.zoo)
    params = zoo.resolve(small=plan.small)
    (spec,) = zoo.inputs(params)
    dims = [int(d) for d in spec.shape[1:]]
    meta = {"name": spec.name, "dims": dims, "dtype": spec.dtype, "params": params}
    path = work / f"{plan.key}.pt"
    if path.is_file():
        return path, meta
    import torch

    from mlmodelscope.zoo.architectures import randomize
    from mlmodelscope.zoo.registry import torch_factory

    torch.manual_seed(SEED)
    model = randomize(torch_factory(plan.zoo)(params), SEED)
    example = torch.zeros([2, *dims], dtype=getattr(torch, spec.dtype))
    with torch.no_grad():
        traced = torch.jit.trace(model, (example,), check_trace=False)  # type: ignore[no-untyped-call]
    tmp = path.with_suffix(".tmp")
    traced.save(str(tmp))
    tmp.replace(path)
    return path, meta


def evaluation_spec(
    plan: Plan,
    model: Path,
    meta: dict[str, Any],
    scenario: str,
    gpu: bool,
    level: str = "none",
    batches: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """A ModelEvaluation of the TorchScript file on synthetic data (the plan's batch sizes of
    the scenario unless ``batches`` names others)."""
    if batches is None:
        batches = plan.single_stream if scenario == "SingleStream" else plan.offline
    name = f"gpukit-{plan.zoo.replace('_', '-')}-{scenario.lower()}"
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": name},
        "spec": {
            "model": {
                "name": plan.zoo,
                "uri": str(model),
                "format": "torchscript",
                "inputs": [
                    {"name": meta["name"], "shape": [-1, *meta["dims"]], "dtype": meta["dtype"]}
                ],
            },
            # on the CPU one thread: a dry run on a busy 2-core CI machine stays steady
            "framework": {"name": "pytorch", **({} if gpu else CPU_THREADS)},
            "dataset": {
                "type": "synthetic",
                "shape": meta["dims"],
                "dtype": meta["dtype"],
                "size": plan.samples,
            },
            "scenario": {
                "type": scenario,
                "batchSizes": list(batches),
                "minDuration": plan.min_duration,
                "minQueryCount": plan.min_queries,
                "accuracy": False,
            },
            "hardware": {"device": "gpu" if gpu else "cpu"},
            "tracing": {"level": level},
        },
    }


def mlms_run(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``mlms run SPEC --no-store --no-raw -o FOLDER`` in this process; the result document."""
    import typer

    from mlmodelscope.cli import app

    folder.mkdir(parents=True, exist_ok=True)
    name = spec["metadata"]["name"]
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(spec, indent=1))  # JSON is YAML
    args = ["run", str(path), "--no-store", "--no-raw", "-o", str(folder)]
    code = typer.main.get_command(app).main(args, standalone_mode=False)
    document: dict[str, Any] = json.loads((folder / f"{name}.json").read_text())
    if code not in (0, None) or document.get("status") != "Succeeded":
        raise RuntimeError(f"mlms run {name}: exit {code}, {document.get('error')}")
    return document


def agent_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Per batch size: the agent's p50 / p99, throughput and its own null-harness p50."""
    rows = []
    for m in document.get("measurements", []):
        latency = m.get("latency", {}).get("percentiles_s", {})
        overhead = m.get("harness_overhead", {}).get("percentiles_s", {})
        rows.append(
            {
                "scenario": m.get("scenario"),
                "batch_size": m.get("batch_size"),
                "queries": m.get("queries"),
                "samples": m.get("samples"),
                "duration_s": m.get("duration_s"),
                "p50_s": latency.get("p50"),
                "p99_s": latency.get("p99"),
                "throughput_samples_per_s": m.get("throughput_samples_per_s"),
                "null_harness_p50_s": overhead.get("p50"),
                "valid": m.get("valid", m.get("verdict")),
            }
        )
    return rows


# --------------------------------------------------------------------------- bare loop


def evaluate(work: Path, gpu: bool, zoo: str) -> None:
    """``mlms run`` of one zoo model in both scenarios against the bare loop, energy per
    sample of every window on both sides, then SingleStream batch 1 in interleaved rounds."""
    plan = (GPU_PLANS if gpu else CPU_PLANS)[zoo]
    writer = Writer(work, f"eval-{zoo}", gpu)
    block_frameworks()
    t0 = time.perf_counter()
    model, meta = build_torchscript(plan, work)
    writer.save(plan=asdict(plan), model=meta, build_s=round(time.perf_counter() - t0, 2))
    loop = BareLoop(plan, model, meta, gpu)
    before = loop.rows()
    writer.save(bare_before=before)
    agent: list[dict[str, Any]] = []
    gpu_metrics: dict[str, Any] = {}
    windows: list[dict[str, Any]] = []
    startup: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for scenario in ("SingleStream", "Offline"):
        spec = evaluation_spec(plan, model, meta, scenario, gpu)
        try:
            with metered_windows(loop.energy) as seen:
                document = mlms_run(spec, work / "runs")
        except Exception as exc:  # recorded; the bare loop and the other scenario still run
            errors[scenario] = f"{type(exc).__name__}: {exc}"
            writer.save(errors=errors)
            continue
        agent += agent_rows(document)
        gpu_metrics[scenario] = document.get("gpu_metrics")
        windows += agent_energy(document.get("measurements", []), seen)
        startup[scenario] = document.get("startup")
        writer.save(
            backend=document.get("backend"),
            agent=agent,
            gpu_metrics=gpu_metrics,
            agent_energy=windows,
            startup=startup,
        )
    bare = merge_bare(before, loop.rows())
    tensorflow = {name: sys.modules.get(name, "absent") is None for name in BLOCKED}
    writer.save(
        bare=bare,
        overhead=overhead(agent, bare),
        energy=energy_rows(windows, bare),
        frameworks_blocked=tensorflow,
    )
    if plan.rounds:
        try:
            writer.save(interleaved=interleaved(plan, model, meta, gpu, loop, work, writer))
        except Exception as exc:  # recorded; what ran before stands
            errors["interleaved"] = f"{type(exc).__name__}: {exc}"
            writer.save(errors=errors)
        try:
            writer.save(suspects=suspect_rounds(loop, plan.rounds, nvml_sampler()))
        except Exception as exc:  # recorded; what ran before stands
            errors["suspects"] = f"{type(exc).__name__}: {exc}"
            writer.save(errors=errors)
    fail_if(errors)


def rounds(work: Path, gpu: bool) -> None:
    """Only SingleStream batch 1 in :data:`ROUNDS` interleaved rounds (agent, bare loop
    alternating), ResNet-50 then BERT-base: enough rounds for an interval on the median
    difference, which three rounds per evaluation step cannot give."""
    writer = Writer(work, "rounds", gpu)
    block_frameworks()
    models: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for zoo in ("resnet50", "bert_base"):
        base = (GPU_PLANS if gpu else CPU_PLANS)[zoo]
        plan = replace(base, single_stream=(1,), offline=(), rounds=ROUNDS[gpu])
        try:
            model, meta = build_torchscript(plan, work)
            loop = BareLoop(plan, model, meta, gpu)
            loop.host_window(1)  # the bare side's first window: cuDNN's choices, clocks
            models[zoo] = interleaved(plan, model, meta, gpu, loop, work, writer)
        except Exception as exc:  # recorded; the next model still runs
            errors[zoo] = f"{type(exc).__name__}: {exc}"
        writer.save(models=models, errors=errors)
    fail_if(errors)


def nvml_sampler() -> Callable[[], Any] | None:
    """The agent's own NVML sampler (10 Hz) as a factory of started samplers; None: no NVML."""
    from mlmodelscope.telemetry.nvml import GpuSampler, nvml_source

    source = nvml_source()
    return None if source is None else (lambda: GpuSampler(source))


def interleaved(
    plan: Plan,
    model: Path,
    meta: dict[str, Any],
    gpu: bool,
    loop: BareLoop,
    work: Path,
    writer: Writer,
) -> dict[str, Any]:
    """SingleStream batch 1 in ``plan.rounds`` rounds, A B, B A, A B, ...: A one ``mlms run``
    at batch 1 alone, B one bare host window; each round's agent p50 - bare p50, and their
    median (benchmarks/harness_overhead.py's method, on the GPU)."""
    spec = evaluation_spec(plan, model, meta, "SingleStream", gpu, batches=(1,))
    spec["metadata"]["name"] += "-round"
    rounds: list[dict[str, Any]] = []
    for order in round_order(plan.rounds):
        started = time.monotonic()
        p50: dict[str, float] = {}
        for side in order:
            if side == "agent":
                measured = mlms_run(spec, work / "rounds")["measurements"][0]
                p50[side] = measured["latency"]["percentiles_s"]["p50"]
            else:
                p50[side] = statistics.median(loop.host_window(1).ns) / 1e9
        rounds.append(
            {
                "order": list(order),
                "agent_p50_us": p50["agent"] * 1e6,
                "bare_p50_us": p50["bare"] * 1e6,
                "seconds": round(time.monotonic() - started, 2),
            }
        )
        writer.save(interleaved={"partial": True, "rounds": rounds})
    return {"scenario": "SingleStream", "batch_size": 1, **interleaved_summary(rounds)}


# ----------------------------------------------------------------------------- tracing


def top_spans(trace: dict[str, Any], kind: str, count: int = 10) -> list[dict[str, Any]]:
    """The spans of one kind ("kernel", "layer") with the most total time, by name."""
    totals: dict[str, list[int]] = {}
    for span in trace.get("spans", []):
        attributes = span.get("attributes") or {}
        if attributes.get("mlmodelscope.span.kind") != kind:
            continue
        totals.setdefault(span["name"], []).append(int(span["end_ns"]) - int(span["start_ns"]))
    ranked = sorted(totals.items(), key=lambda kv: -sum(kv[1]))[:count]
    return [
        {"name": n, "calls": len(d), "total_s": sum(d) / 1e9, "mean_s": sum(d) / len(d) / 1e9}
        for n, d in ranked
    ]


def trace(work: Path, gpu: bool) -> None:
    """Library-level tracing (framework ops, CUPTI kernels and copies under them) with the
    XSP leveled correction, through ``mlms run``; ResNet-50 first, then BERT."""
    writer = Writer(work, "trace", gpu)
    block_frameworks()
    os.environ["MLMS_TRACE_QUERIES"] = str(TRACE_QUERIES[gpu])
    artifacts: list[str] = []
    models: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for zoo in ("resnet50", "bert_base"):
        base = (GPU_PLANS if gpu else CPU_PLANS)[zoo]
        plan = replace(base, single_stream=(1,), offline=(), bare_s=0, rounds=0)
        folder = work / "traces"
        try:
            model, meta = build_torchscript(plan, work)
            spec = evaluation_spec(plan, model, meta, "SingleStream", gpu, level="library")
            document = mlms_run(spec, folder)
        except Exception as exc:  # recorded; the next model still runs
            errors[zoo] = f"{type(exc).__name__}: {exc}"
            writer.save(errors=errors)
            continue
        tracing = document.get("tracing") or {}
        entry: dict[str, Any] = {"tracing": tracing, "measured": agent_rows(document)}
        if tracing.get("trace_file"):
            path = folder / str(tracing["trace_file"])
            spans = json.loads(path.read_text())
            entry["top_kernels"] = top_spans(spans, "kernel")
            entry["top_layers"] = top_spans(spans, "layer")
            packed = work / f"trace-{zoo}.trace.json.gz"
            packed.write_bytes(gzip.compress(path.read_bytes()))
            if zoo == FIXTURE_MODEL:  # the rest stay here: 8 files come back at most
                entry["fixture"] = write_fixture(work, zoo, document, spans)
                artifacts += [entry["fixture"]["document"], entry["fixture"]["trace"]]
        models[zoo] = entry
        writer.save(models=models, artifacts=artifacts)
    fail_if(errors)


FIXTURE_MODEL = "resnet50"
FIXTURE_QUERIES = 2
"""The trace step's fixture: this model's result document and its trace, each traced pass
cut to its first queries, small enough to commit."""


def trimmed(trace: dict[str, Any], queries: int) -> dict[str, Any]:
    """``trace`` with each traced pass's first ``queries`` query spans (by start) and every
    span under them; every other span kept as it is."""
    spans = trace.get("spans", [])
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        children.setdefault(span.get("parent_span_id"), []).append(span)
    dropped: set[str] = set()
    for span in spans:
        if not span["name"].startswith("traced pass"):
            continue
        later = sorted(children.get(span["span_id"], []), key=lambda q: q["start_ns"])[queries:]
        while later:
            gone = later.pop()
            dropped.add(gone["span_id"])
            later += children.get(gone["span_id"], [])
    return {**trace, "spans": [s for s in spans if s["span_id"] not in dropped]}


def write_fixture(
    work: Path, zoo: str, document: dict[str, Any], trace: dict[str, Any]
) -> dict[str, Any]:
    """``gpu-<zoo>.json`` (the result document, its ``trace_file`` naming the cut trace) and
    ``gpu-<zoo>.trace.json`` (:func:`trimmed`) in ``work``; what was cut."""
    cut = trimmed(trace, FIXTURE_QUERIES)
    name = f"gpu-{zoo}"
    fixture = {**document, "tracing": {**document["tracing"], "trace_file": f"{name}.trace.json"}}
    (work / f"{name}.trace.json").write_text(json.dumps(cut, separators=(",", ":")) + "\n")
    (work / f"{name}.json").write_text(json.dumps(fixture, indent=1) + "\n")
    return {
        "document": f"{name}.json",
        "trace": f"{name}.trace.json",
        "queries_per_pass": FIXTURE_QUERIES,
        "spans": len(cut["spans"]),
        "spans_whole": len(trace.get("spans", [])),
    }


# ------------------------------------------------------------------------ Nsight Compute


def ncu_metrics(work: Path, gpu: bool) -> None:
    """Nsight Compute on one forward of ResNet-50 at batch 1 (:data:`NCU_PLAN`): the trace
    step's top kernels by name, per launch duration, FLOPs, DRAM bytes and occupancy
    (:mod:`.ncu`). Without ``ncu`` or a GPU: skipped, the profiled program run on the CPU and
    a sample CSV through the same parser. No permission for the counters: skipped, so said."""
    writer = Writer(work, "ncu-metrics", gpu)
    deadline = time.monotonic() + NCU_PLAN.step_s
    base = (GPU_PLANS if gpu else CPU_PLANS)[NCU_PLAN.zoo]
    plan = replace(base, single_stream=(NCU_PLAN.batch_size,), offline=(), rounds=0)
    model, meta = build_torchscript(plan, work)
    kernels = [k["name"] for k in trace_top_kernels(work, NCU_PLAN.zoo)]
    regex = ncu.kernel_filter(kernels, NCU_PLAN.top_kernels)
    target = Path(ncu_target.__file__)
    dims = ",".join(str(d) for d in meta["dims"])
    program = [sys.executable, str(target), str(model), dims, meta["dtype"]]
    program += [str(NCU_PLAN.batch_size), str(NCU_PLAN.warmup if gpu else 1)]
    tool = shutil.which("ncu")
    writer.save(plan=asdict(NCU_PLAN), model=meta, top_kernels=kernels, kernel_filter=regex)
    if tool is None or not gpu:
        writer.record.status, writer.record.reason = "skipped", "no ncu" if tool is None else NO_GPU
        t0 = time.perf_counter()
        exit_code = ncu_target.main([*program[2:], "cpu"])  # in this process: one torch import
        sample = [ncu.kernel_record(launch) for launch in ncu.parse_csv(ncu.SAMPLE_CSV)]
        writer.save(
            target={"returncode": exit_code, "seconds": round(time.perf_counter() - t0, 2)},
            source="sample CSV (the parser's dry run; made-up figures)",
            kernels=sample,
            by_kernel=ncu.by_kernel(sample),
        )
        return
    _, version, _ = run_bounded([tool, "--version"], work, 15)
    _, query, _ = run_bounded([tool, "--query-metrics"], work, 20)
    metrics, left_out = ncu.choose_metrics(query)
    writer.save(ncu_version=version.strip()[-200:], metrics=metrics, metrics_left_out=left_out)
    attempts: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    reason: str | None = None
    for name_regex in dict.fromkeys([regex, None]):  # all kernels if the filter matched none
        left = deadline - time.monotonic()
        if left < 20 or (attempts and (records or reason)):
            break
        log = work / "ncu.csv"
        log.unlink(missing_ok=True)
        line = ncu.command(tool, log, metrics, NCU_PLAN.launch_count, name_regex, program)
        code, output, seconds = run_bounded(line, work, min(NCU_PLAN.timeout_s, left))
        text = log.read_text(errors="replace") if log.is_file() else ""
        if not ncu.parse_csv(text) and ncu.parse_csv(output):  # the CSV went to stdout
            text = output
            log.write_text(output)
        records = [ncu.kernel_record(launch) for launch in ncu.parse_csv(text)]
        reason = ncu.problem(output + "\n" + text)
        if code is None:
            reason = f"ncu stopped after {seconds:.0f} s"
        elif code != 0 and reason is None:
            reason = f"ncu exit {code}"
        attempts.append(
            {
                "command": line,
                "returncode": code,
                "seconds": seconds,
                "launches": len(records),
                "reason": reason,
                "output": output[-1500:],
            }
        )
        writer.save(attempts=attempts, kernels=records, by_kernel=ncu.by_kernel(records))
    if records:
        raw = work / f"ncu-{NCU_PLAN.zoo}.csv"
        raw.write_text((work / "ncu.csv").read_text(errors="replace"))
        writer.save(source="ncu", artifacts=[raw.name])
        return
    if reason and ncu.PERMISSION in reason:
        writer.record.status, writer.record.reason = "skipped", reason
    else:
        writer.record.status = "failed"
        writer.record.reason = reason or "ncu profiled no kernel"
    writer.save(source=None)


def ncu_layers(work: Path, gpu: bool) -> None:
    """Nsight Compute on every kernel of one eager forward of ResNet-50 at batch 1, each
    kernel placed under its layer by the layer's NVTX range (:mod:`.ncu_layers_target`):
    per layer the kernels' time, FLOPs and DRAM bytes, whose ratio places it on the roofline.
    Without ``ncu`` or a GPU: skipped, the program run on the CPU and the sample CSV's
    launches put under made-up layers through the same grouping."""
    writer = Writer(work, "ncu-layers", gpu)
    plan = NCU_LAYERS_PLAN
    deadline = time.monotonic() + plan.step_s
    layers_file = work / "ncu-layers-layers.json"
    target = Path(ncu_layers_target.__file__)
    program = [sys.executable, str(target), plan.zoo, str(plan.batch_size)]
    program += [str(plan.warmup if gpu else 1), str(layers_file)]
    tool = shutil.which("ncu")
    writer.save(plan=asdict(plan))
    if tool is None or not gpu:
        writer.record.status, writer.record.reason = "skipped", "no ncu" if tool is None else NO_GPU
        exit_code = ncu_layers_target.main([*program[2:], "cpu"])
        layers = json.loads(layers_file.read_text())
        sample = [ncu.kernel_record(launch) for launch in ncu.parse_csv(ncu.SAMPLE_CSV)]
        for i, record in enumerate(sample):
            record["layer"] = i % len(layers)
        device = rooflines.gpu("NVIDIA H100 80GB HBM3")  # the sample's roofs: any datasheet row
        assert device is not None
        placed = [rooflines.place(row, device) for row in ncu.by_layer(sample, layers)]
        writer.save(
            target={"returncode": exit_code},
            source="sample CSV (the parser's dry run; made-up figures and layers)",
            layers=len(layers),
            by_layer=placed,
            rooflines=rooflines.summary(placed),
        )
        return
    _, query, _ = run_bounded([tool, "--query-metrics"], work, 20)
    metrics, left_out = ncu.choose_metrics(query)
    log = work / "ncu-layers.csv"
    log.unlink(missing_ok=True)
    line = ncu.command(tool, log, metrics, plan.launch_count, None, program, nvtx=True)
    left = deadline - time.monotonic()
    code, output, seconds = run_bounded(line, work, min(plan.timeout_s, left))
    text = log.read_text(errors="replace") if log.is_file() else ""
    if not ncu.parse_csv(text) and ncu.parse_csv(output):
        text = output
        log.write_text(output)
    records = [ncu.kernel_record(launch) for launch in ncu.parse_csv(text)]
    layers = json.loads(layers_file.read_text()) if layers_file.is_file() else []
    reason = ncu.problem(output + "\n" + text)
    attempt = {"command": line, "returncode": code, "seconds": seconds, "output": output[-1500:]}
    raw = work / f"ncu-{plan.zoo}-layers.csv"
    if text:
        raw.write_text(text)
    writer.save(
        metrics=metrics,
        metrics_left_out=left_out,
        attempt=attempt,
        layers=len(layers),
        launches=len(records),
        launches_without_layer=sum(1 for r in records if r.get("layer") is None),
        by_layer=ncu.by_layer(records, layers),
        artifacts=[raw.name] if text else [],
        source="ncu",
    )
    device = rooflines.gpu(writer.record.environment.get("device"))
    if device is not None:
        placed = [rooflines.place(row, device) for row in writer.record.data["by_layer"]]
        writer.save(
            device_peaks=asdict(device), by_layer=placed, rooflines=rooflines.summary(placed)
        )
    if not records:
        writer.record.status = "failed"
        writer.record.reason = reason or (
            f"ncu stopped after {seconds:.0f} s" if code is None else "ncu profiled no kernel"
        )
        writer.save()


def trace_top_kernels(work: Path, zoo: str) -> list[dict[str, Any]]:
    """The trace step's top kernels of ``zoo`` from its saved record ([] without)."""
    saved = work / "trace.json"
    if not saved.is_file():
        return []
    data = json.loads(saved.read_text()).get("data", {})
    kernels: list[dict[str, Any]] = (data.get("models", {}).get(zoo) or {}).get("top_kernels") or []
    return kernels


def run_bounded(line: list[str], cwd: Path, timeout_s: float) -> tuple[int | None, str, float]:
    """A command with its output (stdout and stderr), killed with every process it started
    after ``timeout_s`` (exit None). It stays in this step's process group, so the driver's
    limit stops it too."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            line,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        return -1, f"{type(exc).__name__}: {exc}", 0.0
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        for pid in [*descendants(proc.pid), proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        output, _ = proc.communicate()
        code = None
    return code, output or "", round(time.monotonic() - started, 2)


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid`` (from /proc), children first."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = [c for c, p in parents.items() if p in frontier]
        found += children
        frontier = children
    return found


def eval_resnet50(work: Path, gpu: bool) -> None:
    evaluate(work, gpu, "resnet50")


def eval_bert_base(work: Path, gpu: bool) -> None:
    evaluate(work, gpu, "bert_base")


STEPS: dict[str, Callable[[Path, bool], None]] = {
    "facts": facts,
    "eval-resnet50": eval_resnet50,
    "eval-bert_base": eval_bert_base,
    "trace": trace,
    "ncu-metrics": ncu_metrics,
    "ncu-layers": ncu_layers,
    "benanza-gpu": benanza_gpu,
    "dlbricks-gpu": dlbricks_gpu,
    "rounds": rounds,
}
