"""How well do the leveled correction's layer times add up? Its residual per ONNX model.

For each ONNX model file this runs, in this process, exactly what the agent runs after a
measurement at ``tracing.level: framework`` (``mlmodelscope.telemetry.leveled``): the untraced
baseline pass, the model-level pass and the framework-level pass with ONNX Runtime's session
profiler, then :func:`mlmodelscope.analysis.xsp.correct`. The model is fed random inputs of
its declared shapes (a symbolic batch dimension becomes ``--batch``) through an
``InferenceSession`` at graph optimization level ``all`` on the CPU provider, as the agent's
backend loads it. Reported per model: untraced predict p50, the sum of the profiler's raw
layer times, the sum of the corrected ones, the raw residual, the residual, and whether it is
within the stated tolerance (5 %).

Models: ``--models PATH ...``; by default the zoo's models at their test size when
``mlmodelscope.zoo`` is installed (built on first use into ``$MLMS_CACHE_DIR``), else the
digits CNN. ``--quick`` takes 20 traced calls per level instead of 50.

    .venv/bin/python benchmarks/xsp_residual.py --out xsp.json --markdown xsp.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from machine_info import load_average

ZOO_DEFAULT = ("resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vgg16", "bert_base",
               "mlp")  # fmt: skip


class OrtModel:
    """The least an ONNX Runtime model needs for the leveled passes: predict and profiler."""

    name = "onnxruntime"

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        self.path = path
        self._ort = ort
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        out: list[np.ndarray] = self.session.run(
            self.outputs, dict(zip(self.inputs, inputs, strict=True))
        )
        return out

    def profiler(self, level: str) -> Any:
        from mlmodelscope.agent.profilers import OrtProfiler

        def make_session(prefix: str) -> Any:
            options = self.session.get_session_options()
            options.enable_profiling = True
            options.profile_file_prefix = prefix
            return self._ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )

        def feed(inputs: Sequence[np.ndarray]) -> tuple[Any, dict[str, np.ndarray]]:
            return self.outputs, dict(zip(self.inputs, inputs, strict=True))

        return OrtProfiler(level, make_session, feed, gpu=False)


def measure(path: Path, batch: int, calls: int) -> dict[str, Any]:
    """The leveled passes and the correction of one model at one batch size."""
    from mlmodelscope.analysis.graph import random_feeds
    from mlmodelscope.telemetry.leveled import LeveledPasses, run_levels
    from mlmodelscope.telemetry.tracing import EvaluationTracer

    model = OrtModel(path)
    feeds = random_feeds(model.session.get_inputs(), batch)
    batch_inputs = tuple(feeds[name] for name in model.inputs)
    tracer = EvaluationTracer.create({}, environ={})
    if tracer is None:
        raise SystemExit("the OpenTelemetry SDK is needed: pip install 'mlmodelscope[telemetry]'")
    tracer.begin("xsp residual", {})
    passes = LeveledPasses(tracer, model, [(batch_inputs,)], [(np.zeros(batch, int),)],
                           count=calls)  # fmt: skip
    started = time.perf_counter()
    result = run_levels(passes, "framework")
    tracer.end()
    corr = result["correction"]
    row: dict[str, Any] = {"model": model_name(path), "path": str(path), "batch_size": batch,
                           "seconds": time.perf_counter() - started}  # fmt: skip
    if "skipped" in corr:
        return {**row, "skipped": corr["skipped"]}
    keep = ("untraced_predict_p50_s", "raw_sum_s", "corrected_sum_s", "raw_residual", "residual",
            "tolerance", "within_tolerance", "calls", "paired_calls", "model_overhead_s",
            "profiler_overhead_s", "outside_operators_share_raw")  # fmt: skip
    return {**row, "layers": len(corr["layers"]), **{k: corr[k] for k in keep}}


def model_name(path: Path) -> str:
    """digits.onnx -> digits; a zoo cache's .../zoo/resnet18/<key>/model.onnx -> resnet18."""
    if path.stem == "model" and len(path.parts) >= 3:
        return path.parent.parent.name
    return path.stem


def default_models() -> list[Path]:
    try:
        from mlmodelscope.zoo.build import ensure_zoo_model
    except ImportError:
        from mlmodelscope.agent.digits import ensure_digits_models

        return [ensure_digits_models() / "digits.onnx"]
    return [ensure_zoo_model(name, "onnx", small=True).path for name in ZOO_DEFAULT]


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"Leveled correction residual, ONNX Runtime {report['onnxruntime']} on the CPU, batch "
        f"{report['batch_size']}, {report['calls']} traced calls per level; load average "
        f"before / after: {report['loadavg_before']} / {report['loadavg_after']}.",
        "",
        "| model | layers | untraced predict p50 | Σ raw layer times | Σ corrected | raw "
        "residual | residual | within 5 % |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["models"]:
        if "skipped" in r:
            lines.append(f"| {r['model']} | - | - | - | - | - | - | skipped: {r['skipped']} |")
            continue
        lines.append(
            f"| {r['model']} | {r['layers']} | {r['untraced_predict_p50_s'] * 1e3:.4f} ms | "
            f"{r['raw_sum_s'] * 1e3:.4f} ms | {r['corrected_sum_s'] * 1e3:.4f} ms | "
            f"{r['raw_residual'] * 100:.1f} % | {r['residual'] * 100:.2f} % | "
            f"{'yes' if r['within_tolerance'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", type=Path, help="ONNX model files")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--calls", type=int, default=None, help="traced calls per level")
    parser.add_argument("--quick", action="store_true", help="20 calls per level")
    parser.add_argument("--out", type=Path, help="JSON report")
    parser.add_argument("--markdown", type=Path, help="Markdown table")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    calls = args.calls or (20 if args.quick else 50)
    models = args.models or default_models()
    report: dict[str, Any] = {
        "benchmark": "xsp_residual",
        "onnxruntime": ort.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "batch_size": args.batch,
        "calls": calls,
        "loadavg_before": load_average(),
        "models": [],
    }
    for path in models:
        row = measure(Path(path), args.batch, calls)
        report["models"].append(row)
        print(json.dumps(row), file=sys.stderr)
    report["loadavg_after"] = load_average()
    text = markdown(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
