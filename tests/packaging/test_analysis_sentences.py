"""The sentences docs/analysis.md reads its figures from are computed by the benchmark scripts
from their own records (run_all's analysis-zoo, benanza-measured and xsp-layers steps), never
typed: each writer checked here on synthetic records."""

from __future__ import annotations

from typing import Any

from benchmark_scripts import load_script

from mlmodelscope.analysis.measuredbound import Implementation, Layer, LayerTiming, measured_bound

analysis_zoo = load_script("analysis_zoo")
benanza_measured = load_script("benanza_measured")
xsp_layers = load_script("xsp_layers")


def estimate(model: str, error_pct: float, layers: int = 10, bricks: int = 5) -> dict[str, Any]:
    return {"model": model, "error_pct": error_pct, "layers": layers, "bricks": bricks}


def test_the_estimate_error_says_low_or_high_and_by_how_much() -> None:
    low = [estimate("a", -0.3), estimate("b", -10.3), estimate("c", -2.0)]
    assert analysis_zoo.error_sentence(low, "optimized") == (
        "On the optimized graph the DLBricks estimate reads low for all 3 models, "
        "by 0.3 % to 10.3 %."
    )
    high = [estimate("a", 3.3)]
    assert analysis_zoo.error_sentence(high, "raw").endswith(
        "reads high for all 1 models, by 3.3 % to 3.3 %."
    )
    mixed = [estimate("a", -8.3), estimate("b", 26.8), estimate("c", 5.5), estimate("d", -9.0)]
    assert analysis_zoo.error_sentence(mixed, "raw") == (
        "On the raw graph the DLBricks estimate reads low for 2 of 4 models (by up to 9.0 %, d) "
        "and high for the other 2 (by up to 26.8 %, b)."
    )


def test_the_benchmarking_time_names_where_the_saving_comes_from() -> None:
    report = {
        "config": {"runs": 10},
        "models": [estimate("cnn", -1, layers=25, bricks=20), estimate("bert", -1, 366, 33)],
        "unique_bricks": 50,
        "total_layers": 391,
        "brick_bench_s": 2.0,
        "end_to_end_bench_s": 5.0,
        "unshared_brick_bench_s": 2.2,
        "run_overhead_ms": 0.0038,
    }
    text = analysis_zoo.benchmarking_sentence(report)
    assert "the 50 unique bricks of 391 layers took 2.00 s, the models end to end 5.00 s" in text
    assert "a saving of 3.00 s (2.5x)" in text and "10 runs each" in text
    assert "turns 391 layers into 53 bricks (the most repeated: bert, 366 layers in 33" in text
    assert "takes 53 to 50, and the bricks' time from 2.20 s" in text
    assert text.endswith("every brick pays: 3.8 µs.")
    assert "reused" not in text
    assert "(4 reused from the store, not timed)" in analysis_zoo.benchmarking_sentence(
        report | {"bricks_reused": 4}
    )


def test_measured_over_bound_names_both_ends() -> None:
    bounds = {
        "a": {"measured_ms": 11.0, "sequential_bound_ms": 10.0},
        "b": {"measured_ms": 13.0, "sequential_bound_ms": 10.0},
        "c": {"measured_ms": 10.6, "sequential_bound_ms": 10.0},
    }
    assert (
        analysis_zoo.bound_sentence(bounds) == "Measured / bound ranges from 1.06 (c) to 1.30 (b)."
    )


ORT = Implementation("onnxruntime", "all")
TORCH = Implementation("pytorch", "eager")


def bound(model: str, e2e: dict[Implementation, float], torch_layers: int = 2) -> Any:
    layers = [Layer("conv", "s1", "Conv"), Layer("relu", "s2", "Relu")]
    timings = [LayerTiming("s1", ORT, 3.0), LayerTiming("s2", ORT, 1.0)]
    timings += [LayerTiming(s, TORCH, 2.0) for s in ("s1", "s2")[:torch_layers]]
    return measured_bound(model, layers, timings, end_to_end=e2e)


def test_the_bound_reading_is_computed_from_the_records() -> None:
    results = [bound("m1", {ORT: 4.2, TORCH: 3.0}), bound("m2", {ORT: 9.0, TORCH: 4.0})]
    lines = benanza_measured.reading(results)
    assert lines[0] == (
        "- m1: fastest end to end in pytorch (eager), 3.0 ms, +0.0 % against the bound (3.0 ms)."
    )
    assert lines[1].startswith("- m2: fastest end to end in pytorch (eager), 4.0 ms, +33.3 %")
    assert lines[2] == (
        "- End to end above 1.25 times its own layer sum: m2 in onnxruntime (all) "
        "(9.0 ms against 4.0 ms)."
    )
    assert lines[3] == (
        "- Every layer of the 2 models was timed in all 2 implementations, and each "
        "implementation ran every model end to end."
    )


def test_the_bound_reading_names_what_was_not_timed_or_run() -> None:
    lines = benanza_measured.reading([bound("m", {ORT: 4.0}, torch_layers=1)])
    assert (
        lines[-2]
        == "- No implementation ran a model end to end above 1.25 times its own layer sum."
    )
    assert lines[-1] == (
        "- Not every layer timed: m in pytorch (eager) (1/2 layers); not run end to end: "
        "m in pytorch (eager) (the reasons are listed above)."
    )


def layer_model(name: str, residual: float | None, bricks_s: list[float]) -> dict[str, Any]:
    return {
        "model": name,
        "residual": residual,
        "matched": [{"independent_s": s} for s in bricks_s],
    }


def test_the_layer_check_reading_puts_the_pooled_error_beside_the_residual() -> None:
    report = {
        "pooled": {
            "layers": 3,
            "median_abs": 0.51,
            "p90_abs": 1.68,
            "share_median_abs": 0.43,
            "share_p90_abs": 1.6,
        },
        "models": [
            layer_model("a", 0.0383, [0.3e-6, 2e-6]),
            layer_model("b", 0.0048, [15e-6]),
            layer_model("c", None, []),
        ],
    }
    assert xsp_layers.reading(report) == (
        "Pooled over the 3 models (3 layers), the median |error| is 51 % and its 90th "
        "percentile 168 %; the share error's, 43 % and 160 %. The per-layer error is large "
        "(median over 10 %): read a corrected layer table as the profiler's ordering of where "
        "the time goes, not as per-layer latencies. The model-level residual is at "
        "most 3.83 % (a), over the 2 models that have one. A matched layer takes 0.3 to 15.0 µs "
        "alone (its brick, less the per-run cost)."
    )
    report["pooled"]["median_abs"] = 0.05
    assert "large" not in xsp_layers.reading(report)
