"""How long from `mlms run` to the first timed query? Per framework, phase by phase.

For each framework (ONNX Runtime, PyTorch, TensorFlow) this runs ``python -m mlmodelscope run``
on the example digits CNN (built by ``mlmodelscope.agent.digits``) in a fresh process,
``--repetitions`` times, and reads the result document's ``startup`` section: the process's
start (``/proc/self/stat``, 10 ms ticks) to the first timed query, phase by phase (see
``mlmodelscope.contract.result.StartupInfo``). As a check that does not rely on the child's
clock, the parent also notes the UTC time right before it spawns the process and subtracts it
from the document's ``first_timed_query_at`` (millisecond resolution): that is "exec to first
timed query" as the process's caller sees it, the quantity a Job's ``creationTimestamp``
would be subtracted from on a cluster. ``import mlmodelscope.cli`` alone is timed in fresh
processes too.

The spec is the examples' (preprocessing, softmax + top-5, accuracy pass, model-level
tracing), with SingleStream batch 1, 10 warm-up queries and a short window, so each process
ends soon after its first timed query. The digits split is cached and the models are built
before anything is timed (one-time costs per machine).

    .venv/bin/python benchmarks/startup.py --out startup.json --markdown startup.md  # ~1 min
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
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from machine_info import cpu_model, versions

HERE = Path(__file__).resolve().parent
FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
SCENARIO = {
    "batchSizes": [1],
    "warmup": 10,
    "minQueryCount": 100,
    "minDuration": "100ms",
    "stability": {"maxWindows": 2},
}
IMPORT_CLI = (
    "import time; t = time.perf_counter_ns(); import mlmodelscope.cli; "
    "print(time.perf_counter_ns() - t)"
)
RUN_TIMEOUT_S = 300


def _utc_seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def child_env() -> dict[str, str]:
    """The environment of every timed process: this one's, quiet TensorFlow, no GPU."""
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}


def write_specs(folder: Path) -> dict[str, Path]:
    """One ModelEvaluation file per framework (building the digits models if needed), and the
    digits split cached, so neither one-time cost lands in a timed run."""
    import yaml

    from mlmodelscope.agent.digits import digits_evaluation, digits_split, ensure_digits_models

    models = ensure_digits_models()
    digits_split("test")
    specs = {}
    for framework in FRAMEWORKS:
        document = digits_evaluation(models, framework, f"startup-{framework}", scenario=SCENARIO)
        specs[framework] = folder / f"{framework}.yaml"
        specs[framework].write_text(yaml.safe_dump(document))
    return specs


def run_once(spec: Path, out: Path) -> dict[str, Any]:
    """One fresh ``mlms run``; its startup section plus the parent-side exec measure."""
    command = [sys.executable, "-m", "mlmodelscope", "run", str(spec), "-o", str(out)]
    spawned = time.time()
    proc = subprocess.run(
        [*command, "--no-store"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    exited = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    result = out / f"startup-{spec.stem}.json"
    document = json.loads(result.read_text())
    for produced in out.iterdir():  # the document and its trace file
        produced.unlink()
    startup: dict[str, Any] = document["startup"]
    first = _utc_seconds(startup["first_timed_query_at"])
    return {
        **startup,
        "spawn_to_first_timed_query_s": first - spawned,
        "process_wall_s": exited - spawned,
    }


def import_cli_once() -> dict[str, float]:
    """``import mlmodelscope.cli`` in a fresh interpreter: in-process and whole-process time."""
    spawned = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_CLI],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    return {
        "import_s": int(proc.stdout.strip()) / 1e9,
        "process_wall_s": time.perf_counter() - spawned,
    }


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and range per phase (phases in the order of the first run) and per total."""
    phases: dict[str, list[float]] = {}
    for run in runs:
        for name, seconds in run["phases_s"].items():
            phases.setdefault(name, []).append(seconds)
    return {
        "phases_s": {name: spread(values) for name, values in phases.items()},
        "to_first_timed_query_s": spread([r["to_first_timed_query_s"] for r in runs]),
        "spawn_to_first_timed_query_s": spread([r["spawn_to_first_timed_query_s"] for r in runs]),
        "first_timed_query_s": spread([r["first_timed_query_s"] for r in runs]),
        "process_wall_s": spread([r["process_wall_s"] for r in runs]),
        "warmup_queries": runs[0]["warmup_queries"],
        "process_start_source": runs[0]["process_start_source"],
        "repetitions": len(runs),
    }


def _cell(s: dict[str, float], scale: float = 1e3, digits: int = 0) -> str:
    return (
        f"{s['median'] * scale:.{digits}f} "
        f"({s['min'] * scale:.{digits}f}–{s['max'] * scale:.{digits}f})"
    )


def format_table(summary: dict[str, dict[str, Any]], frameworks: Sequence[str]) -> str:
    """Markdown: one row per phase, one column per framework, ms as median (min–max)."""
    names: list[str] = []
    for fw in frameworks:
        names += [n for n in summary[fw]["phases_s"] if n not in names]
    lines = [
        "| phase (ms, median (min–max)) | " + " | ".join(frameworks) + " |",
        "|---|" + "---|" * len(frameworks),
    ]
    for name in names:
        cells = [
            _cell(summary[fw]["phases_s"][name]) if name in summary[fw]["phases_s"] else "–"
            for fw in frameworks
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for label, key in (
        ("**process start → first timed query** (sum)", "to_first_timed_query_s"),
        ("spawn → first timed query (parent's clock)", "spawn_to_first_timed_query_s"),
        ("whole process (spawn → exit)", "process_wall_s"),
    ):
        lines.append(f"| {label} | " + " | ".join(_cell(summary[fw][key]) for fw in frameworks))
        lines[-1] += " |"
    lines.append(
        "| first timed query's latency (µs) | "
        + " | ".join(_cell(summary[fw]["first_timed_query_s"], 1e6, 0) for fw in frameworks)
        + " |"
    )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--frameworks",
        type=lambda v: [f.strip() for f in v.split(",") if f.strip()],
        default=list(FRAMEWORKS),
    )
    parser.add_argument("--repetitions", type=int, default=3, help="fresh processes each")
    parser.add_argument("--quick", action="store_true", help="one repetition (~25 s)")
    parser.add_argument("--out", type=Path, help="all figures and the machine, as JSON")
    parser.add_argument("--markdown", type=Path, help="the result table, as Markdown")
    args = parser.parse_args(argv)
    for fw in args.frameworks:
        if fw not in FRAMEWORKS:
            parser.error(f"unknown framework {fw!r}; choose from {', '.join(FRAMEWORKS)}")
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")
    if args.quick:
        args.repetitions = 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started_at, started = _now(), time.monotonic()
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {fw: [] for fw in args.frameworks}
    cli: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="mlms-startup-") as tmp:
        folder = Path(tmp)
        specs = write_specs(folder)
        for r in range(args.repetitions):  # frameworks interleaved: drift hits all alike
            cli.append(import_cli_once())
            for fw in args.frameworks:
                run = run_once(specs[fw], folder / "out")
                runs[fw].append(run)
                print(
                    f"  {fw:<11} run {r + 1}: {run['to_first_timed_query_s']:.3f} s to the first "
                    f"timed query (spawn: {run['spawn_to_first_timed_query_s']:.3f} s)",
                    flush=True,
                )
    summary = {fw: summarize(runs[fw]) for fw in args.frameworks}
    cli_summary = {
        "import_s": spread([c["import_s"] for c in cli]),
        "process_wall_s": spread([c["process_wall_s"] for c in cli]),
    }
    wall = time.monotonic() - started
    load_after = os.getloadavg()
    table = format_table(summary, args.frameworks)
    cli_line = (
        f"`import mlmodelscope.cli` alone: {_cell(cli_summary['import_s'])} ms in-process, "
        f"{_cell(cli_summary['process_wall_s'])} ms for the whole `python -c` process "
        f"({len(cli)} fresh processes)."
    )
    heading = (
        f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.2f} → {load_after[0]:.2f}; {started_at}; wall time {wall:.0f} s; "
        f"{args.repetitions} fresh process(es) per framework."
    )
    print()
    print(table)
    print()
    print(cli_line)
    if args.markdown:
        args.markdown.write_text(f"{heading}\n\n{table}\n\n{cli_line}\n")
    if args.out:
        report = {
            "benchmark": "startup",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "machine": {
                "cpu": cpu_model(),
                "cpus": os.cpu_count(),
                "loadavg_before": load_before,
                "loadavg_after": load_after,
                "platform": platform.platform(),
            },
            "versions": versions(),
            "started_at": started_at,
            "finished_at": _now(),
            "duration_s": wall,
            "settings": {"repetitions": args.repetitions, "scenario": SCENARIO},
            "import_cli": {**cli_summary, "runs": cli},
            "results": summary,
            "runs": runs,
            "table_markdown": table,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
