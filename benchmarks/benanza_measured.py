"""Benanza's bound, measured, on zoo models in ONNX Runtime, PyTorch and TensorFlow.

    python benchmarks/benanza_measured.py --quick --out bound.json --markdown bound.md

Builds (or reuses) the zoo models as ONNX, then on this CPU at ``--threads`` times every layer's
brick in each implementation (``analysis/implementations.py``) and each whole model, and prints
``mlms benanza``'s table: per model and implementation, end to end, the sum of its layers, the
bound (sum of each layer's best), the gap, the roofline (this CPU, measured), and the three
layers farthest from their best implementation. ``--quick``: 5 runs after 2 warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from mlmodelscope.analysis.devices import measure_cpu
from mlmodelscope.analysis.implementations import BoundConfig, measure
from mlmodelscope.analysis.measuredbound import MeasuredBound, table
from mlmodelscope.zoo import ensure_zoo_model

MODELS = ("resnet18", "mobilenet_v2", "bert_base")
ABOVE_LAYERS = 1.25
"""An end-to-end time this many times its own layer sum is named under the table."""


def reading(results: Sequence[MeasuredBound]) -> list[str]:
    """What the table says in sentences: per model, the implementation fastest end to end
    against the bound; the end-to-end times well above their own layer sums; and whether
    every implementation timed every layer and ran every model."""
    lines = []
    for result in results:
        ran = [r for r in result.rows if r.end_to_end_ms is not None]
        if not ran or result.bound_ms <= 0:
            continue
        best = min(ran, key=lambda r: r.end_to_end_ms or 0.0)
        e2e = best.end_to_end_ms or 0.0
        lines.append(
            f"- {result.model}: fastest end to end in {best.implementation.label}, "
            f"{e2e:.1f} ms, {100 * (e2e - result.bound_ms) / result.bound_ms:+.1f} % against "
            f"the bound ({result.bound_ms:.1f} ms)."
        )
    above = [
        f"{result.model} in {r.implementation.label} ({r.end_to_end_ms:.1f} ms against "
        f"{r.layers_ms:.1f} ms)"
        for result in results
        for r in result.rows
        if r.end_to_end_ms is not None and r.end_to_end_ms > ABOVE_LAYERS * r.layers_ms
    ]
    times = f"{ABOVE_LAYERS:g} times"
    lines.append(
        f"- End to end above {times} its own layer sum: {'; '.join(above)}."
        if above
        else f"- No implementation ran a model end to end above {times} its own layer sum."
    )
    labels = sorted({r.implementation for result in results for r in result.rows})
    short, not_run = [], []
    for result in results:
        rows = {r.implementation: r for r in result.rows}
        for impl in labels:
            row = rows.get(impl)
            if row is None or not row.complete:
                timed = 0 if row is None else row.layers_run
                total = len(result.layers)
                short.append(f"{result.model} in {impl.label} ({timed}/{total} layers)")
            if row is None or row.end_to_end_ms is None:
                not_run.append(f"{result.model} in {impl.label}")
    if short or not_run:
        lines.append(
            f"- Not every layer timed: {'; '.join(short) or 'none'}; not run end to end: "
            f"{'; '.join(not_run) or 'none'} (the reasons are listed above)."
        )
    else:
        lines.append(
            f"- Every layer of the {len(results)} models was timed in all {len(labels)} "
            "implementations, and each implementation ran every model end to end."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="the zoo's test-size models")
    parser.add_argument("--quick", action="store_true", help="5 runs, 2 warm-up")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args(argv)
    runs, warmup = (5, 2) if args.quick else (args.runs, args.warmup)
    config = BoundConfig(args.threads, warmup, runs)
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    cpu = measure_cpu(args.threads)
    results = [
        measure(ensure_zoo_model(m, small=args.small).path, config, m, roofline=cpu)
        for m in args.models
    ]
    cond = results[0].conditions
    threads = ", ".join(
        f"{name} {t['intra_op_threads']}/{t['inter_op_threads']}"
        for name, t in cond["threads"].items()
    )
    versions = ", ".join(f"{name} {v}" for name, v in cond["versions"].items())
    lines = [
        f"Measured {started}, load average {[round(x, 2) for x in load_before]} before and "
        f"{[round(x, 2) for x in os.getloadavg()]} after; batch {config.batch_size}, "
        f"{'test-size' if args.small else 'full-size'} zoo models, median of {runs} runs after "
        f"{warmup} warm-up; threads (intra/inter) {threads}; {versions}; TensorFlow layout "
        f"{cond['tensorflow_layout']}. Roofline: this CPU's measured roofs, raised to the best "
        "measured layer.",
        "",
        *table(results),
        "",
        *reading(results),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
