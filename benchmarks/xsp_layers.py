"""XSP checked layer by layer: each layer's corrected time against the same layer timed alone.

For each ONNX model this runs :func:`mlmodelscope.telemetry.layercheck.check_model`: the
leveled passes and the correction the agent runs at ``tracing.level: framework`` (ONNX
Runtime's session profiler, CPU provider, ORT_ENABLE_ALL), then every node of the graph ONNX
Runtime runs timed alone as a DLBricks brick (same kernel, same threads, less the per-``run``
cost), and compares them node by node with :mod:`mlmodelscope.analysis.xsp_layers`. Reported
per model: layers matched and unmatched, the median and 90th percentile of the per-layer
``|error|`` (``np.percentile``, linear), the signed median, the time-weighted error, Σ corrected
against Σ bricks, and the model-level residual beside them; then the pooled distribution per
op type.

Models: ``--models PATH ...``; by default the zoo's seven models at their test size (built on
first use into ``$MLMS_CACHE_DIR``); ``--resolution N`` builds the image models at N px
instead of 32. ``--quick``: 20 traced calls per level and 2 + 10 runs
per brick (about a minute for the zoo on two cores once built); otherwise 50 calls and
5 + 50 runs.

    .venv/bin/python benchmarks/xsp_layers.py --quick --out layers.json --markdown layers.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from machine_info import load_average

ZOO_DEFAULT = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vgg16", "bert_base",
               "mlp")  # fmt: skip


def model_name(path: Path) -> str:
    """digits.onnx -> digits; a zoo cache's .../zoo/resnet18/<key>/model.onnx -> resnet18."""
    if path.stem == "model" and len(path.parts) >= 3:
        return path.parent.parent.name
    return path.stem


def default_models(resolution: int | None = None) -> list[Path]:
    """The zoo at its test size; ``resolution`` overrides the image models' input size."""
    from mlmodelscope.zoo import entry
    from mlmodelscope.zoo.build import ensure_zoo_model

    def params(name: str) -> dict[str, Any] | None:
        has = "resolution" in entry(name).params
        return {"resolution": resolution} if resolution and has else None

    return [ensure_zoo_model(n, "onnx", small=True, params=params(n)).path for n in ZOO_DEFAULT]


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f} %"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.0f} %"


def markdown(report: dict[str, Any]) -> str:
    cfg = report["config"]
    lines = [
        f"Per-layer check of the leveled correction, ONNX Runtime {report['onnxruntime']} on the "
        f"CPU, zoo models at their test size{_at(report.get('resolution'))}, "
        f"{cfg['threads']} intra-op thread(s), batch {cfg['batch_size']}, "
        f"{cfg['calls']} traced calls per level; bricks {cfg['warmup']} + {cfg['runs']} runs, "
        f"ONNX Runtime's per-run cost subtracted; load average before / after: "
        f"{report['loadavg_before']} / {report['loadavg_after']}. Error = (corrected − brick) "
        "/ brick per layer; median and p90 of |error| (np.percentile, linear).",
        "",
        "| model | layers matched | unmatched (trace / bricks / brick ≤ 0) | median \\|error\\| "
        "| p90 \\|error\\| | signed median | time-weighted | share error median / p90 "
        "| Σ corrected / Σ bricks | model-level residual |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in report["models"]:
        d = m["distribution"]
        ratio = (
            f"{m['corrected_sum_s'] * 1e3:.3f} / {m['independent_sum_s'] * 1e3:.3f} ms"
            if m["independent_sum_s"] > 0
            else "-"
        )
        lines.append(
            f"| {m['model']} | {d['layers']} | {len(m['only_in_trace'])} / "
            f"{len(m['only_independent'])} / {len(m['not_comparable'])} | "
            f"{_pct(d['median_abs'])} | {_pct(d['p90_abs'])} | {_signed(d['median_signed'])} | "
            f"{_pct(d['time_weighted_abs'])} | {_share(d)} | {ratio} | "
            f"{_pct_fine(m['residual'])} |"
        )
    p = report["pooled"]
    lines.append(
        f"| **all {len(report['models'])} models** | {p['layers']} | | {_pct(p['median_abs'])} "
        f"| {_pct(p['p90_abs'])} | {_signed(p['median_signed'])} | "
        f"{_pct(p['time_weighted_abs'])} | {_share(p)} | | |"
    )
    lines += [
        "",
        "| op type (pooled) | layers | median \\|error\\| | p90 \\|error\\| | signed median "
        "| time-weighted |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for op_type, d in report["by_op_type"].items():
        lines.append(
            f"| {op_type} | {d['layers']} | {_pct(d['median_abs'])} | {_pct(d['p90_abs'])} | "
            f"{_signed(d['median_signed'])} | {_pct(d['time_weighted_abs'])} |"
        )
    return "\n".join([*lines, "", reading(report)]) + "\n"


LARGE_ERROR = 0.1
"""A pooled median |error| from which the reading says the per-layer error is large."""


def reading(report: dict[str, Any]) -> str:
    """The pooled error against the largest model-level residual, and how long the matched
    layers take alone: the figures the docs' explanation reads."""
    p, models = report["pooled"], report["models"]
    text = (
        f"Pooled over the {len(models)} models ({p['layers']} layers), the median |error| is "
        f"{_pct(p['median_abs'])} and its 90th percentile {_pct(p['p90_abs'])}; the share "
        f"error's, {_pct(p['share_median_abs'])} and {_pct(p['share_p90_abs'])}."
    )
    if p["median_abs"] is not None and p["median_abs"] >= LARGE_ERROR:
        text += (
            f" The per-layer error is large (median over {_pct(LARGE_ERROR)}): read a corrected "
            "layer table as the profiler's ordering of where the time goes, not as per-layer "
            "latencies."
        )
    residuals = [(m["residual"], m["model"]) for m in models if m["residual"] is not None]
    if residuals:
        worst, name = max(residuals)
        text += (
            f" The model-level residual is at most {_pct_fine(worst)} ({name}), "
            f"over the {len(residuals)} models that have one."
        )
    bricks = [layer["independent_s"] for m in models for layer in m["matched"]]
    if bricks:
        text += (
            f" A matched layer takes {min(bricks) * 1e6:.1f} to {max(bricks) * 1e6:.1f} µs "
            "alone (its brick, less the per-run cost)."
        )
    return text


def _at(resolution: int | None) -> str:
    return f" with {resolution} px images" if resolution else ""


def _share(d: dict[str, Any]) -> str:
    return f"{_pct(d['share_median_abs'])} / {_pct(d['share_p90_abs'])}"


def _pct_fine(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", type=Path, help="ONNX model files")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, both sides")
    parser.add_argument("--resolution", type=int, help="image models' input size (zoo default)")
    parser.add_argument("--quick", action="store_true", help="20 calls per level, 2 + 10 runs")
    parser.add_argument("--out", type=Path, help="JSON report")
    parser.add_argument("--markdown", type=Path, help="Markdown tables")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    from mlmodelscope.analysis.xsp_layers import by_op_type, pooled
    from mlmodelscope.telemetry.layercheck import CheckConfig, check_model

    config = CheckConfig(
        threads=args.threads,
        batch_size=args.batch,
        calls=20 if args.quick else 50,
        warmup=2 if args.quick else 5,
        runs=10 if args.quick else 50,
    )
    models = args.models or default_models(args.resolution)
    report: dict[str, Any] = {
        "benchmark": "xsp_layers",
        "onnxruntime": ort.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "config": asdict(config),
        "resolution": args.resolution,
        "loadavg_before": load_average(),
        "models": [],
    }
    checks = []
    for path in models:
        started = time.perf_counter()
        check = check_model(Path(path), model_name(Path(path)), config)
        checks.append(check)
        row = {**asdict(check), "seconds": time.perf_counter() - started}
        report["models"].append(row)
        d = check.distribution
        print(f"{check.model}: {d.layers} layers, median |error| {_pct(d.median_abs)}, "
              f"p90 {_pct(d.p90_abs)}, {row['seconds']:.1f} s", file=sys.stderr)  # fmt: skip
    report["loadavg_after"] = load_average()
    report["pooled"] = asdict(pooled(checks))
    report["by_op_type"] = {k: asdict(v) for k, v in by_op_type(checks).items()}
    text = markdown(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
