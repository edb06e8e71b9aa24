"""What does each tracing level cost per query, and does it leak into reported latency?

For each framework (one process each, so TensorFlow's and PyTorch's thread pools never meet)
this runs the digits CNN through the real agent (``mlmodelscope.agent.runner.evaluate``) for
``--rounds`` rounds, alternating two evaluations per round:

(a) ``tracing.level: framework`` - the agent measures untraced (the reported p50), then runs
    its leveled passes of ``--queries`` queries each: untraced baseline, model level (query /
    preprocess / predict / postprocess spans) and framework level (plus the framework
    profiler's operators as spans). The pass p50s give each level's overhead per query;
(b) ``tracing.level: none`` - no passes at all; only the reported p50.

Reported per framework, batch size and level: the median over rounds of the pass p50 and of
the per-round overhead (p50 level / p50 untraced - 1), plus the reported (measured) p50 of (a)
and (b), which should agree: leveling keeps tracing out of the reported numbers. Library level
(CUDA kernels) needs a GPU and is reported as skipped on CPU-only machines. Spans are kept in
memory and written to the trace file as in a real run; no OTLP export (network noise).

    .venv/bin/python benchmarks/tracing_overhead.py --out tracing-overhead.json --markdown
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
BATCH_SIZES = (1, 8)
LEVELS = ("model", "framework", "library")


def evaluation(framework: str, models: Path, level: str) -> dict[str, Any]:
    from mlmodelscope.agent.digits import digits_evaluation

    return digits_evaluation(
        models,
        framework,
        f"overhead-{framework}-{level}",
        framework={"intraOpThreads": 1, "interOpThreads": 1},
        scenario={
            "batchSizes": list(BATCH_SIZES),
            "warmup": 50,
            "minQueryCount": 500,
            "minDuration": "500ms",
            "accuracy": False,
            "stability": {"maxWindows": 3},
        },
        tracing={"level": level},
    )


def worker(framework: str, config_path: Path, result_path: Path) -> None:
    """Run the rounds for one framework in this process."""
    import yaml

    from mlmodelscope.agent.digits import ensure_digits_models
    from mlmodelscope.agent.runner import evaluate
    from mlmodelscope.spec import load_evaluations
    from mlmodelscope.telemetry.agent import AgentTelemetry

    config = json.loads(config_path.read_text())
    os.environ["MLMS_TRACE_QUERIES"] = str(config["queries"])
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        os.environ.pop(var, None)
    models = ensure_digits_models()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mlms-tracing-overhead-") as tmp:
        for r in range(config["rounds"]):
            order = ("framework", "none") if r % 2 == 0 else ("none", "framework")
            entry: dict[str, Any] = {}
            for level in order:
                spec = Path(tmp) / f"{level}.yaml"
                spec.write_text(yaml.safe_dump(evaluation(framework, models, level)))
                [item] = load_evaluations(spec)
                doc = evaluate(
                    item,
                    output=Path(tmp) / f"{level}.json",
                    include_raw=False,
                    hooks=AgentTelemetry.start,
                ).document
                entry[level] = {
                    "reported_p50_s": {
                        str(m["batch_size"]): m["latency"]["percentiles_s"]["p50"]
                        for m in doc["measurements"]
                    },
                    "tracing": doc.get("tracing"),
                }
            rounds.append(entry)
            sys.stderr.write(f"  {framework}: round {r + 1}/{config['rounds']} done\n")
    result_path.write_text(json.dumps({"framework": framework, "rounds": rounds}))


def summarize(framework: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds, per batch size and level."""
    out: dict[str, Any] = {"framework": framework, "batch_sizes": {}}
    for b in BATCH_SIZES:
        key = str(b)
        untraced: list[float] = []
        levels: dict[str, dict[str, Any]] = {
            lvl: {"p50": [], "added": [], "overhead": [], "skipped": None} for lvl in LEVELS
        }
        reported = {"none": [], "framework": []}
        for entry in rounds:
            for level in ("none", "framework"):
                reported[level].append(entry[level]["reported_p50_s"][key])
            passes = next(
                p for p in entry["framework"]["tracing"]["by_batch_size"] if p["batch_size"] == b
            )
            untraced.append(passes["untraced"]["p50_s"])
            for lvl in LEVELS:
                result = passes["levels"].get(lvl)
                if result is None:
                    continue
                if "skipped" in result:
                    levels[lvl]["skipped"] = result["skipped"]
                    continue
                levels[lvl]["p50"].append(result["p50_s"])
                levels[lvl]["added"].append(result["p50_s"] - passes["untraced"]["p50_s"])
                levels[lvl]["overhead"].append(result["overhead_vs_untraced"])
        out["batch_sizes"][key] = {
            "untraced_pass_p50_s": statistics.median(untraced),
            "reported_p50_s": {lvl: statistics.median(v) for lvl, v in reported.items()},
            "levels": {
                lvl: (
                    {"skipped": v["skipped"]}
                    if not v["p50"]
                    else {
                        "p50_s": statistics.median(v["p50"]),
                        "added_s": statistics.median(v["added"]),
                        "added_range_s": [min(v["added"]), max(v["added"])],
                        "overhead_vs_untraced": statistics.median(v["overhead"]),
                        "overhead_range": [min(v["overhead"]), max(v["overhead"])],
                    }
                )
                for lvl, v in levels.items()
            },
        }
    return out


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Machine: {meta['machine']}; {meta['rounds']} rounds, {meta['queries']} queries per "
        "level per round. Per round, a level adds (its pass p50 - the untraced pass p50); the "
        "table gives the median over rounds, [the range], and the median relative overhead.",
        "",
        "| framework | batch | untraced pass p50 | model level adds | framework level adds "
        "| library level | reported p50, level none → framework |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for res in results:
        for b, row in res["batch_sizes"].items():
            cells = []
            for lvl in ("model", "framework"):
                v = row["levels"][lvl]
                if "skipped" in v:
                    cells.append("skipped")
                    continue
                lo, hi = (x * 1e6 for x in v["added_range_s"])
                cells.append(
                    f"{v['added_s'] * 1e6:+.0f} µs [{lo:+.0f}, {hi:+.0f}] "
                    f"({v['overhead_vs_untraced'] * 100:+.0f} %)"
                )
            lib = row["levels"]["library"]
            library = "skipped: no GPU" if "skipped" in lib else f"{lib['p50_s'] * 1e6:.0f} µs"
            rep = row["reported_p50_s"]
            lines.append(
                f"| {res['framework']} | {b} | {row['untraced_pass_p50_s'] * 1e6:.0f} µs | "
                f"{cells[0]} | {cells[1]} | {library} | "
                f"{rep['none'] * 1e6:.0f} → {rep['framework'] * 1e6:.0f} µs |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=300, help="queries per level per pass")
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS))
    parser.add_argument("--out", type=Path, default=None, help="write the full JSON here")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--from", dest="saved", type=Path, help="re-render a saved --out JSON")
    parser.add_argument("--worker", nargs=3, metavar=("FRAMEWORK", "CONFIG", "RESULT"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], Path(args.worker[1]), Path(args.worker[2]))
        return 0
    if args.saved:
        saved = json.loads(args.saved.read_text())
        print(markdown(saved["results"], saved["meta"]))
        return 0
    config = {"rounds": args.rounds, "queries": args.queries}
    results = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mlms-tracing-overhead-") as tmp:
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config))
        for framework in args.frameworks:
            result_path = Path(tmp) / f"{framework}.json"
            sys.stderr.write(f"{framework}: {args.rounds} rounds\n")
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                framework,
                str(config_path),
                str(result_path),
            ]
            subprocess.run(cmd, check=True)
            data = json.loads(result_path.read_text())
            results.append(summarize(framework, data["rounds"]))
    meta = {
        **config,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "python": platform.python_version(),
        "seconds": round(time.monotonic() - started, 1),
    }
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    if args.markdown:
        print(markdown(results, meta))
    else:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
