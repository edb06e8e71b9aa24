"""The leveled correction's arithmetic on synthetic passes, and profiled runs turned into the
operator samples it takes (self times, wrappers, kernels left out)."""

from __future__ import annotations

import pytest

from mlmodelscope.agent.profilers import ProfiledOp, ProfiledRun
from mlmodelscope.analysis.xsp import TOLERANCE, OpSample, correct
from mlmodelscope.telemetry.leveled import leveled_correction, op_samples


def ops(*durations: int) -> list[OpSample]:
    return [
        OpSample(f"op{i}", "Conv" if i == 0 else "Gemm", d, d, True)
        for i, d in enumerate(durations)
    ]


def test_stable_shares_add_up_to_the_untraced_latency() -> None:
    # untraced 100 µs; model level costs +20 µs; the profiler doubles the call and leaves
    # 40 % of it between operators
    untraced = [100_000] * 9
    model = dict.fromkeys(range(9), 120000)
    framework = dict.fromkeys(range(9), 240000)
    profiled = {c: ops(96_000, 48_000) for c in range(9)}
    out = correct(untraced, model, framework, profiled)
    assert out["untraced_predict_p50_s"] == pytest.approx(100e-6)
    assert out["model_overhead_s"] == pytest.approx(20e-6)
    assert out["profiler_overhead_s"] == pytest.approx(120e-6)
    assert out["profiler_overhead_per_event_s"] == pytest.approx(40e-6)  # 2 ops + the call
    assert out["outside_operators_share_raw"] == pytest.approx(0.4)
    assert [r["corrected_s"] for r in out["layers"]] == pytest.approx([200e-6 / 3, 100e-6 / 3])
    assert out["corrected_sum_s"] == pytest.approx(100e-6)
    assert out["residual"] == pytest.approx(0.0, abs=1e-12)
    assert out["raw_residual"] == pytest.approx(0.44)
    assert out["within_tolerance"] is True and out["tolerance"] == TOLERANCE
    assert [r["op_type"] for r in out["operators"]] == ["Conv", "Gemm"]
    assert sum(r["share"] for r in out["layers"]) == pytest.approx(1.0)


def test_each_call_gets_its_model_level_budget_and_outliers_are_left_out() -> None:
    # call 1 was slow at model level: its operators get a larger budget, scaled to untraced
    untraced = [50_000, 50_000, 50_000]
    model = {0: 100_000, 1: 300_000, 2: 100_000}
    framework = dict.fromkeys(range(3), 400000)
    profiled = {c: ops(10_000, 10_000) for c in range(3)}
    out = correct(untraced, model, framework, profiled)
    # budget = M_c * 50/100: 50, 150, 50 µs; the slow call is outside the 25th-75th
    # percentile band, so the table averages the other two: 25 µs per layer
    assert out["paired_calls"] == 3 and out["calls"] == 2
    assert [r["corrected_s"] for r in out["layers"]] == pytest.approx([25e-6, 25e-6])
    assert out["residual"] == pytest.approx(0.0, abs=1e-12)


def test_varying_shares_still_add_up() -> None:
    # the heavy operator changes from call to call: per-call means keep the table additive
    untraced = [90_000] * 3
    model = dict.fromkeys(range(3), 90000)
    framework = dict.fromkeys(range(3), 90000)
    profiled = {0: ops(70_000, 10_000, 10_000), 1: ops(10_000, 70_000, 10_000),
                2: ops(10_000, 10_000, 70_000)}  # fmt: skip
    out = correct(untraced, model, framework, profiled)
    assert [r["corrected_s"] for r in out["layers"]] == pytest.approx([30e-6] * 3)
    assert out["residual"] == pytest.approx(0, abs=1e-9)


def test_a_skewed_model_level_leaves_a_residual() -> None:
    # model level: median 100 µs (= untraced), but a slow tail inside the central band
    untraced = [100_000] * 10
    times = [100_000] * 6 + [130_000] * 3 + [200_000]
    model = dict(enumerate(times))
    framework = dict.fromkeys(range(10), 150000)
    out = correct(untraced, model, framework, {c: ops(40_000, 60_000) for c in range(10)})
    assert out["paired_calls"] == 10 and out["calls"] == 9  # the 200 µs call is left out
    assert out["corrected_sum_s"] == pytest.approx(110e-6)  # (6 * 100 + 3 * 130) / 9
    assert out["residual"] == pytest.approx(0.1)
    assert out["within_tolerance"] is False


def test_a_preempted_profiled_call_is_left_out() -> None:
    profiled = {c: ops(50_000, 50_000) for c in range(10)}
    profiled[3] = ops(900_000, 10_000)  # preempted inside the first operator
    out = correct([100_000] * 10, dict.fromkeys(range(10), 100_000),
                  dict.fromkeys(range(10), 150_000), profiled)  # fmt: skip
    assert out["calls"] == 9
    assert [r["corrected_s"] for r in out["layers"]] == pytest.approx([50e-6, 50e-6])


def test_calls_missing_from_a_pass_are_left_out() -> None:
    out = correct([10_000], {0: 10_000}, {0: 20_000, 1: 20_000}, {0: ops(5_000), 1: ops(5_000)})
    assert out["calls"] == 1
    with pytest.raises(ValueError, match="no untraced calls"):
        correct([], {0: 1}, {0: 1}, {0: ops(1)})
    with pytest.raises(ValueError, match="both a model-level time and profiled operators"):
        correct([10], {0: 10}, {1: 10}, {1: ops(1)})


def test_op_samples_self_times_wrappers_and_kernels() -> None:
    # forward (a TorchScript wrapper) > aten::conv2d > aten::convolution, plus a GPU kernel
    run = ProfiledRun(
        index=0,
        duration_ns=1000,
        ops=[
            ProfiledOp("forward", "layer", 0, 900, None, {"op_type": "forward"}),
            ProfiledOp("aten::conv2d", "layer", 10, 600, 0, {"op_type": "aten::conv2d"}),
            ProfiledOp("aten::convolution", "layer", 20, 500, 1, {"op_type": "aten::convolution"}),
            ProfiledOp("kern", "kernel", 30, 400, 2),
            ProfiledOp("aten::addmm", "layer", 700, 100, 0, {"op_type": "aten::addmm"}),
            ProfiledOp("aten::to", "layer", 950, 20, None, {"op_type": "aten::to"}),
        ],
    )
    samples = {s.name: s for s in op_samples(run)}
    assert "kern" not in samples
    assert samples["forward"].top_level is False  # a wrapper: its children are the layers
    assert samples["forward"].self_ns == 200
    assert samples["aten::conv2d"].top_level and samples["aten::conv2d"].self_ns == 100
    assert samples["aten::convolution"].top_level is False
    assert samples["aten::convolution"].self_ns == 500
    assert samples["aten::addmm"].top_level and samples["aten::to"].top_level
    # self times add up to the top-level time: nothing counted twice
    assert sum(s.self_ns for s in samples.values()) == 900 + 20


def test_leveled_correction_says_why_it_is_missing() -> None:
    assert (
        "no framework profiler"
        in leveled_correction(
            {"_call_ns": [1]},
            {"framework": {"skipped": "the null backend has no framework profiler"}},
        )["skipped"]
    )
    assert (
        "no operators"
        in leveled_correction(
            {"_call_ns": [1]},
            {"model": {"_call_ns": {}}, "framework": {"_call_ns": {}, "_ops": {}}},
        )["skipped"]
    )
