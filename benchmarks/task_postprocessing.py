"""What each task's postprocessing costs beside the model: examples/tasks in ONNX Runtime,
SingleStream batch 1, the model's p50 (the timed region: the model and spec.postprocessing)
against the accuracy pass's per-sample task postprocessing (class maps, boxes, NMS, reading
the target images) and the metric's own time (COCOeval, IoU, scikit-learn, scikit-image's PSNR
and SSIM), all outside every timed query.

    .venv/bin/python benchmarks/task_postprocessing.py [--repetitions 3]   # about 30 s
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml
from machine_info import cpu_model

from mlmodelscope.agent.runner import evaluate
from mlmodelscope.agent.tasks.reference import ensure_task_models
from mlmodelscope.spec import load_evaluations

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
TASKS = ("text-classification", "segmentation", "detection", "image-to-image")


def run_once(name: str, models: Path, folder: Path) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    spec = doc["spec"]
    spec["model"]["uri"] = str(models / Path(spec["model"]["uri"]).name)
    for key in ("path", "masks", "targets", "tokenizer", "annotations"):
        if key in spec["dataset"]:
            spec["dataset"][key] = str(models / spec["dataset"][key].removeprefix("build/"))
    spec["scenario"] = {"type": "SingleStream", "batchSizes": [1], "minDuration": "1s"}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    [loaded] = load_evaluations(path)
    document = evaluate(loaded, include_raw=False).document
    task = document["task"]
    return {
        "p50_us": document["results"][0]["latency_ms"]["p50"] * 1e3,
        "post_us": task["postprocessing_per_sample_s"] * 1e6,
        "metric_ms": task["metrics_s"] * 1e3,
        "samples": document["accuracy"]["samples"],
        "primary": f"{task['primary']} {task['metrics'][task['primary']]:.4f}",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    models = ensure_task_models()
    print(f"CPU: {cpu_model()}; medians of {args.repetitions} runs")
    columns = ("task", "samples", "model p50 (µs)", "task postprocessing per sample (µs)")
    print("| " + " | ".join((*columns, "metric (ms)", "primary")) + " |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in TASKS:
            runs = [run_once(name, models, Path(tmp)) for _ in range(args.repetitions)]
            med = {
                k: statistics.median(r[k] for r in runs) for k in ("p50_us", "post_us", "metric_ms")
            }
            print(
                f"| {name} | {runs[0]['samples']} | {med['p50_us']:.0f} | {med['post_us']:.0f} "
                f"| {med['metric_ms']:.1f} | {runs[0]['primary']} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
