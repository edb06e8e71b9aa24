"""The kit's steps, each run in its own process by the driver: facts, evaluations, tracing.

A step writes its record to ``<work>/<step>.json`` after every stage, so a step the driver
stops at its timeout still leaves what it measured. With ``gpu=False`` the GPU steps run a
tiny CPU variant (the zoo's test sizes, short windows) and end as skipped ("no GPU"): the
code path is the GPU one, the figures mean nothing.

An evaluation is ``mlms run`` itself (the CLI's ``run`` command on a spec written here, no
results store) between two windows of the bare loop (:mod:`.bare`) on the same TorchScript
file and batches. TensorFlow is made unimportable first, as it is on the GPU machine.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlmodelscope.devtools.gpukit.bare import bare_rows, energy_estimate, merge_bare, overhead
from mlmodelscope.devtools.gpukit.environment import environment, packages, tools
from mlmodelscope.devtools.gpukit.plans import (
    CPU_PLANS,
    CPU_THREADS,
    GPU_PLANS,
    TRACE_QUERIES,
    Plan,
)
from mlmodelscope.devtools.gpukit.record import NO_GPU, StepRecord

BLOCKED = ("tensorflow", "keras")


class Writer:
    """A step's record, rewritten to ``<work>/<name>.json`` on every ``save``."""

    def __init__(self, work: Path, name: str, gpu: bool) -> None:
        self.path = work / f"{name}.json"
        self.started = time.monotonic()
        self.record = StepRecord(name, "ok" if gpu else "skipped", environment=environment())
        if not gpu:
            self.record.reason = NO_GPU
            self.record.data["variant"] = "cpu-tiny"

    def save(self, **data: Any) -> None:
        self.record.data.update(data)
        self.record.seconds = round(time.monotonic() - self.started, 2)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record.to_dict(), indent=1, default=str) + "\n")
        tmp.replace(self.path)


def block_frameworks() -> None:
    """Make TensorFlow unimportable, as on the GPU machine (``import tensorflow`` fails)."""
    for name in BLOCKED:
        sys.modules[name] = None  # type: ignore[assignment]


# ------------------------------------------------------------------------------- facts


def facts(work: Path, gpu: bool) -> None:
    """Environment, packages, tools, and that the package imports without TensorFlow."""
    writer = Writer(work, "facts", True)
    writer.save(packages=packages(), tools=tools(), argv=sys.argv, executable=sys.executable)
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
    plan: Plan, model: Path, meta: dict[str, Any], scenario: str, gpu: bool, level: str = "none"
) -> dict[str, Any]:
    """A ModelEvaluation of the TorchScript file on synthetic data."""
    batches = plan.single_stream if scenario == "SingleStream" else plan.offline
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": f"gpukit-{plan.zoo.replace('_', '-')}-{scenario.lower()}"},
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
    """``mlms run`` of one zoo model in both scenarios against the bare loop."""
    plan = (GPU_PLANS if gpu else CPU_PLANS)[zoo]
    writer = Writer(work, f"eval-{zoo}", gpu)
    block_frameworks()
    t0 = time.perf_counter()
    model, meta = build_torchscript(plan, work)
    writer.save(plan=plan.__dict__, model=meta, build_s=round(time.perf_counter() - t0, 2))
    before = bare_rows(plan, model, meta, gpu)
    writer.save(bare_before=before)
    agent: list[dict[str, Any]] = []
    gpu_metrics: dict[str, Any] = {}
    energy: dict[str, Any] = {}
    startup: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for scenario in ("SingleStream", "Offline"):
        spec = evaluation_spec(plan, model, meta, scenario, gpu)
        try:
            document = mlms_run(spec, work / "runs")
        except Exception as exc:  # recorded; the bare loop and the other scenario still run
            errors[scenario] = f"{type(exc).__name__}: {exc}"
            writer.save(errors=errors)
            continue
        agent += agent_rows(document)
        gpu_metrics[scenario] = document.get("gpu_metrics")
        energy[scenario] = energy_estimate(document)
        startup[scenario] = document.get("startup")
        writer.save(
            backend=document.get("backend"),
            agent=agent,
            gpu_metrics=gpu_metrics,
            agent_energy=energy,
            startup=startup,
        )
    bare = merge_bare(before, bare_rows(plan, model, meta, gpu))
    tensorflow = {name: sys.modules.get(name, "absent") is None for name in BLOCKED}
    writer.save(bare=bare, overhead=overhead(agent, bare), frameworks_blocked=tensorflow)
    fail_if(errors)


def fail_if(errors: dict[str, str]) -> None:
    """End the step with a non-zero exit naming the first error (its data is saved)."""
    if errors:
        key, message = next(iter(errors.items()))
        raise SystemExit(f"{key}: {message}"[:500])


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
        plan = Plan(zoo, (1,), (), base.small, base.min_duration, base.min_queries, base.samples, 0)
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
            artifacts.append(packed.name)
        models[zoo] = entry
        writer.save(models=models, artifacts=artifacts)
    fail_if(errors)


def eval_resnet50(work: Path, gpu: bool) -> None:
    evaluate(work, gpu, "resnet50")


def eval_bert_base(work: Path, gpu: bool) -> None:
    evaluate(work, gpu, "bert_base")


STEPS: dict[str, Callable[[Path, bool], None]] = {
    "facts": facts,
    "eval-resnet50": eval_resnet50,
    "eval-bert_base": eval_bert_base,
    "trace": trace,
}
