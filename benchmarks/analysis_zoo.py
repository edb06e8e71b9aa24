"""DLBricks estimate vs measured, and the per-layer roofline, across the zoo in ONNX Runtime.

    python benchmarks/analysis_zoo.py --quick --out analysis.json --markdown analysis.md

Builds (or reuses) the full-size zoo models as ONNX, then on this CPU at ``--threads``:
1. DLBricks on ORT's optimized graph: each unique brick benchmarked once across the zoo, each
   model's estimate, its end-to-end p50 under the same protocol, error and benchmarking time;
2. The roofline: this CPU's roofs measured (``devices.measure_cpu``), the raw graph's per-layer
   bricks as measured layer times, the sequential and critical-path bounds per model, and the
   top opportunities for two models. ``--quick`` (10 runs, 2 warm-up) fits in ~6 minutes here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from mlmodelscope.analysis.benanza import bound
from mlmodelscope.analysis.devices import measure_cpu
from mlmodelscope.analysis.dlbricks import BenchConfig, estimate
from mlmodelscope.zoo import ensure_zoo_model

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vgg16", "bert_base")
DETAIL = ("resnet50", "bert_base")
"""The two models whose top optimization opportunities the markdown lists."""


def run(models: list[str], threads: int, runs: int, warmup: int) -> dict[str, Any]:
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    paths = [ensure_zoo_model(m).path for m in models]
    build_s = time.perf_counter() - t0
    optimized = estimate(paths, BenchConfig(threads, warmup, runs, graph="optimized"), models)
    raw = estimate(paths, BenchConfig(threads, warmup, runs, graph="raw"), models)
    cpu = measure_cpu(threads)
    bounds = {}
    for name, path, layers in zip(models, paths, raw.models, strict=True):
        measured = next(m.measured_ms for m in optimized.models if m.model == name)
        bounds[name] = bound(path, cpu, measured_layers=layers.per_layer_ms, measured_ms=measured)
    return {
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "loadavgBefore": [round(x, 2) for x in load_before],
            "loadavgAfter": [round(x, 2) for x in os.getloadavg()],
            "started": started,
        },
        "buildSeconds": round(build_s, 1),
        "dlbricks": optimized.to_dict(),
        "dlbricksRaw": raw.to_dict(),
        "cpu": {"peak_flops": cpu.peak_flops, "bandwidth": cpu.bandwidth, **cpu.conditions},
        "bounds": {n: b.to_dict() for n, b in bounds.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    d, r = result["dlbricks"], result["dlbricksRaw"]
    cfg = d["config"]
    lines = [
        f"Measured {m['started']} on {m['processor']} ({m['cpus']} CPUs), load average "
        f"{m['loadavgBefore']} before and {m['loadavgAfter']} after; ONNX Runtime CPU, "
        f"{cfg['threads']} intra-op thread(s), batch {cfg['batch_size']}, p50 of {cfg['runs']} "
        f"runs after {cfg['warmup']} warm-up.",
        "",
        "DLBricks (bricks cut from ORT's optimized graph; raw = cut from the exported graph, "
        "a second run with its own end-to-end measurement):",
        "",
        "| model | layers | bricks | estimate ms | measured ms | error | raw graph: estimate / "
        "measured ms (error) |",
        "|---|---|---|---|---|---|---|",
    ]
    for opt, raw in zip(d["models"], r["models"], strict=True):
        lines.append(
            f"| {opt['model']} | {opt['layers']} | {opt['bricks']} | {opt['estimate_ms']:.2f} | "
            f"{opt['measured_ms']:.2f} | {opt['error_pct']:+.1f}% | "
            f"{raw['estimate_ms']:.2f} / {raw['measured_ms']:.2f} ({raw['error_pct']:+.1f}%) |"
        )
    lines += [
        "",
        error_sentence(d["models"], "optimized"),
        error_sentence(r["models"], "raw"),
        "",
        benchmarking_sentence(d),
        "",
        f"Roofline on this CPU (roofs measured: {result['cpu']['peak_flops'] / 1e9:.1f} "
        f"GFLOP/s, {result['cpu']['bandwidth'] / 1e9:.1f} GB/s; raised per model to the fastest "
        "measured layer where that is higher):",
        "",
        "| model | GFLOPs | roof GFLOP/s | roofline ms | critical path ms "
        "| layers measured ms | measured ms | measured / bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, b in result["bounds"].items():
        lines.append(
            f"| {name} | {b['flops'] / 1e9:.2f} | {b['device']['peak_flops'] / 1e9:.0f} | "
            f"{b['sequential_bound_ms']:.2f} | {b['critical_path_bound_ms']:.2f} | "
            f"{b['layers_measured_ms']:.2f} | {b['measured_ms']:.2f} | "
            f"{b['measured_ms'] / b['sequential_bound_ms']:.2f} |"
        )
    lines += ["", bound_sentence(result["bounds"])]
    for name in DETAIL:
        if name not in result["bounds"]:
            continue
        lines += ["", f"Top opportunities, {name}:", ""]
        seen: dict[str, int] = {}
        for item in result["bounds"][name]["opportunities"]:
            if seen.get(item["kind"], 0) >= 4:
                continue
            seen[item["kind"]] = seen.get(item["kind"], 0) + 1
            saving = f" (up to {item['saving_ms']:.3f} ms)" if item["saving_ms"] else ""
            lines.append(f"- {item['kind']}: `{item['layers'][0]}`: {item['detail']}{saving}")
    return "\n".join(lines) + "\n"


def error_sentence(models: list[dict[str, Any]], graph: str) -> str:
    """Whether the estimate reads low or high against the measurement, for how many models
    and by how much (``models``: the report's per-model entries, ``error_pct`` signed)."""
    low = sorted((m for m in models if m["error_pct"] < 0), key=lambda m: m["error_pct"])
    high = sorted((m for m in models if m["error_pct"] >= 0), key=lambda m: -m["error_pct"])
    start = f"On the {graph} graph the DLBricks estimate reads"
    if not high or not low:
        side, group = ("low", low) if low else ("high", high)
        sizes = sorted(abs(m["error_pct"]) for m in group)
        return (
            f"{start} {side} for all {len(group)} models, by {sizes[0]:.1f} % to {sizes[-1]:.1f} %."
        )
    return (
        f"{start} low for {len(low)} of {len(models)} models (by up to "
        f"{-low[0]['error_pct']:.1f} %, {low[0]['model']}) and high for the other {len(high)} "
        f"(by up to {high[0]['error_pct']:.1f} %, {high[0]['model']})."
    )


def benchmarking_sentence(d: dict[str, Any]) -> str:
    """What benchmarking bricks cost against benchmarking the models, and where the saving
    comes from: repetition inside a model, or layer shapes shared across models."""
    models = d["models"]
    per_model = sum(m["bricks"] for m in models)
    repeated = max(models, key=lambda m: m["layers"] / max(m["bricks"], 1))
    bricks, end_to_end = d["brick_bench_s"], d["end_to_end_bench_s"]
    reused = d.get("bricks_reused", 0)
    stored = f" ({reused} reused from the store, not timed)" if reused else ""
    return (
        f"Benchmarking time (session creation, warm-up and timed runs, "
        f"{d['config']['runs']} runs each): the {d['unique_bricks']} unique bricks of "
        f"{d['total_layers']} layers took {bricks:.2f} s{stored}, the models end to end "
        f"{end_to_end:.2f} s, a saving of {end_to_end - bricks:.2f} s "
        f"({end_to_end / max(bricks, 1e-9):.1f}x). Deduplication inside each model turns "
        f"{d['total_layers']} layers into {per_model} bricks (the most repeated: "
        f"{repeated['model']}, {repeated['layers']} layers in {repeated['bricks']} bricks); "
        f"sharing across models takes {per_model} to {d['unique_bricks']}, and the bricks' "
        f"time from {d['unshared_brick_bench_s']:.2f} s (each model's bricks alone) to "
        f"{bricks:.2f} s. ORT's per-run overhead, which every brick pays: "
        f"{d['run_overhead_ms'] * 1e3:.1f} µs."
    )


def bound_sentence(bounds: dict[str, dict[str, Any]]) -> str:
    """The range of measured / roofline across the models, naming the models at each end."""
    ratios = sorted((b["measured_ms"] / b["sequential_bound_ms"], n) for n, b in bounds.items())
    if not ratios:
        return "No model has a roofline."
    (lo, lo_name), (hi, hi_name) = ratios[0], ratios[-1]
    return f"Measured / bound ranges from {lo:.2f} ({lo_name}) to {hi:.2f} ({hi_name})."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="10 runs, 2 warm-up")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--from-json", type=Path, help="re-render the markdown of a saved --out")
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(args.from_json.read_text())
        text = markdown(result)
        print(text)
        if args.markdown:
            args.markdown.write_text(text)
        return 0
    runs, warmup = (10, 2) if args.quick else (args.runs, args.warmup)
    result = run(args.models, args.threads, runs, warmup)
    text = markdown(result)
    print(text)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
