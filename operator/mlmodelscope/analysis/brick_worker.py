"""A brick Job's worker: ``python -m mlmodelscope.analysis.brick_worker SUITE [--bricks K,..]``.

It runs in the onnxruntime agent image, which has ONNX Runtime and numpy but not ``onnx``:
the suite's bricks are runnable models already (``analysis/bricksuite.py``). It prints its
system stack (``dlbricks.system_stack`` under the suite's graph and the given protocol), then
without ``--bricks`` the suite itself, and with ``--bricks`` a timing per listed brick, each
measured as ``dlbricks.benchmark_brick`` measures one in process (``analysis/brick_lines.py``
says how the lines look). A listed brick the suite lacks, or one that fails to load or run, is
named on stderr and makes the exit status 1, after the others are measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from mlmodelscope.analysis.brick_lines import stack_line, suite_line, timing_line
from mlmodelscope.analysis.brickstore import MeasuredBrick
from mlmodelscope.analysis.bricksuite import SuiteBrick, SuiteError, read_suite
from mlmodelscope.analysis.dlbricks import (
    BenchConfig,
    Timing,
    measured_brick,
    session_options,
    system_stack,
)


def measure(folder: Path, brick: SuiteBrick, config: BenchConfig) -> MeasuredBrick:
    """Time the suite's ``brick`` under ``config``: optimizations off for bricks of the
    optimized graph, on for raw ones; random feeds; session creation counts in measure_s."""
    import onnxruntime as ort

    from mlmodelscope.analysis.dlbricks import time_session
    from mlmodelscope.analysis.graph import random_feeds

    start = time.perf_counter()
    session = ort.InferenceSession(
        str(folder / brick.file),
        session_options(config.threads, optimize=config.graph == "raw"),
        providers=["CPUExecutionProvider"],
    )
    feeds = random_feeds(session.get_inputs(), config.batch_size)
    timing: Timing = replace(
        time_session(session, feeds, config), wall_s=time.perf_counter() - start
    )
    return measured_brick(brick.key, brick.signature, brick.op_type, timing)


def _emit(line: str, stream: TextIO | None = None) -> None:
    """One line, flushed at once: a pod's log keeps what was written before it died."""
    out = stream or sys.stdout
    out.write(line + "\n")
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="brick_worker", description=__doc__)
    parser.add_argument("suite", type=Path, help="the suite folder (suite.json, bricks/)")
    parser.add_argument("--bricks", help="comma-separated brick keys to measure")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        suite = read_suite(args.suite)
        config = BenchConfig(args.threads, args.warmup, args.runs, suite.batch_size, suite.graph)
    except (SuiteError, ValueError) as exc:
        _emit(f"brick_worker: {exc}", sys.stderr)
        return 2
    _emit(stack_line(system_stack(config)))
    if args.bricks is None:
        _emit(suite_line(suite))
        return 0
    known = {b.key: b for b in suite.bricks}
    failed = 0
    for key in filter(None, args.bricks.split(",")):
        if key not in known:
            _emit(f"brick_worker: brick {key} is not in the suite", sys.stderr)
            failed += 1
            continue
        try:
            measured = measure(args.suite, known[key], config)
        except Exception as exc:  # ORT's errors derive from Exception alone; go on with the rest
            _emit(f"brick_worker: brick {key}: {type(exc).__name__}: {exc}", sys.stderr)
            failed += 1
            continue
        _emit(timing_line(measured))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
