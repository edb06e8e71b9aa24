"""The GPU kit's per-layer parts (docs/gpu.md): layers recorded from the dispatcher, Benanza's
bound and suggestions and DLBricks' estimate from fixed timings, kernels placed under their
layers by NVTX, the rooflines, ``--only``, and the committed per-layer run checked against
its own CSV and quoted in docs/gpu.md as the code renders it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mlmodelscope.analysis.measuredbound import Implementation, Layer, LayerTiming, measured_bound
from mlmodelscope.devtools.gpukit import driver, ncu, rooflines
from mlmodelscope.devtools.gpukit.layerreport import (
    BrickTime,
    bound,
    dlbricks_estimate,
    op_name,
    pointwise_share,
    suggestions,
)

ROOT = Path(__file__).parents[2]
LAYERS_RUN = ROOT / "benchmarks" / "gpu" / "2026-11-27-h100-kit3-layers"
CONV, BN, RELU = (
    "aten.conv2d.default(f[1,3,8,8])",
    "aten.batch_norm.default(f[1])",
    "aten.relu.default(f[1])",
)
OFF, ON = "fp32, cudnn search off", "fp32, cudnn search on"
FP16 = "fp16, cudnn search on"


def test_fp16_and_fp32_forwards_record_the_same_layers_and_views_are_left_out() -> None:
    """A layer's signature names dtype classes, not dtypes, so the FP16 forward's bricks are
    the FP32 forward's; a view (here ``flatten``) launches no kernel and is no layer."""
    torch = pytest.importorskip("torch")
    from mlmodelscope.devtools.gpukit import layerbench

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten()
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    full = layerbench.record(model, x)
    half_model = layerbench.cast(copy.deepcopy(model), "fp16")
    half = layerbench.record(half_model, layerbench.cast(x, "fp16"))
    assert [op_name(s) for s in full.layers] == ["conv2d", "batch_norm", "relu"]  # flatten: a view
    assert half.layers == full.layers and full.views >= 1
    conv = full.bricks[full.layers[0]]
    assert conv.description == "conv2d [2x3x8x8; 4x3x3x3]" and conv.calls == 1
    timing = layerbench.time_brick(conv, runs=3, warmup=1, cuda=False)
    assert timing.runs == 3 and timing.device_ms == timing.wall_ms > 0  # no CUDA: wall


def test_the_bound_is_measuredbound_over_variants_with_one_per_precision() -> None:
    """``bound`` is Benanza's measured bound (analysis.measuredbound) over the variants; the
    bound within a precision takes only that precision's variants."""
    layers = [CONV, BN, RELU, CONV]
    times = [
        BrickTime(CONV, OFF, 2.0, 2.5), BrickTime(BN, OFF, 1.0, 1.2),
        BrickTime(RELU, OFF, 0.5, 0.6), BrickTime(CONV, ON, 1.5, 2.0),
        BrickTime(BN, ON, 1.1, 1.3), BrickTime(RELU, ON, 0.5, 0.7),
        BrickTime(CONV, FP16, 0.4, 1.0), BrickTime(BN, FP16, 1.2, 1.4),
    ]  # fmt: skip
    result = bound("m", layers, {CONV: "conv"}, times, {OFF: 9.0, ON: 8.0, FP16: 4.0})
    assert result["bound_ms"] == pytest.approx(0.4 + 1.0 + 0.5 + 0.4)
    assert result["bound_ms_per_precision"] == {
        "fp32": pytest.approx(1.5 + 1.0 + 0.5 + 1.5),
        "fp16": pytest.approx(0.4 + 1.2 + 0.4),  # relu: no fp16 timing, counted 0
    }
    impl = {v: Implementation("pytorch-cuda", v) for v in (OFF, ON, FP16)}
    expected = measured_bound(
        "m",
        [Layer(str(i), s, "conv" if s == CONV else op_name(s)) for i, s in enumerate(layers)],
        [LayerTiming(t.signature, impl[t.variant], t.device_ms) for t in times],
        {impl[OFF]: 9.0, impl[ON]: 8.0, impl[FP16]: 4.0},
    ).to_dict()
    assert result["rows"] == expected["rows"]
    fp16_row = next(r for r in result["rows"] if r["label"] == f"pytorch-cuda ({FP16})")
    assert (fp16_row["layers_run"], fp16_row["layers_total"]) == (3, 4)


def test_suggestions_say_what_each_switch_changed() -> None:
    """Precision and cuDNN's search on the device time; fusion and CUDA graphs on the wall
    time (they take launches away too)."""
    layers = [CONV, BN, RELU]
    times = [
        BrickTime(CONV, OFF, 2.0, 2.5), BrickTime(CONV, ON, 1.5, 2.0),
        BrickTime(BN, OFF, 1.0, 1.2), BrickTime(BN, ON, 1.0, 1.2),
        BrickTime(RELU, OFF, 0.5, 0.6), BrickTime(RELU, ON, 0.5, 0.6),
    ]  # fmt: skip
    e2e = {
        OFF: {"wall_ms": 5.0, "device_ms": 3.5},
        ON: {"wall_ms": 4.0, "device_ms": 3.0},
        FP16: {"wall_ms": 2.0, "device_ms": 1.0},
    }
    found = suggestions(layers, times, e2e, graphs_ms={OFF: 3.6}, fused_ms={ON: 3.0})
    by_kind = {(s["kind"], s.get("precision", s.get("variant"))): s for s in found}
    cores = [s for s in found if s["kind"] == "tensor cores"]
    assert [(s["from_ms"], s["to_ms"], s["change_pct"]) for s in cores] == [(3.0, 1.0, -66.7)]
    assert "on the device" in cores[0]["sentence"]  # precision: the device time decides
    search = by_kind[("algorithm search", "fp32")]
    assert (search["from_ms"], search["to_ms"], search["change_pct"]) == (3.5, 3.0, -14.3)
    assert search["layers_faster_with_search"] == [
        {"layer": "conv2d", "signature": CONV, "saves_ms": 0.5}
    ]
    assert by_kind[("fusion", ON)]["change_pct"] == -25.0
    launch = by_kind[("launch overhead", OFF)]
    assert (launch["device_ms"], launch["to_ms"], launch["change_pct"]) == (3.5, 3.6, -28.0)
    share = pointwise_share(layers, times, OFF)
    assert share == {"variant": OFF, "pointwise_ms": 1.5, "layers_ms": 3.5, "share_pct": 42.9}


def test_dlbricks_sums_bricks_per_layer_and_corrects_for_the_timing_overhead() -> None:
    estimate = dlbricks_estimate(
        "m", 1, [CONV, BN, CONV], {CONV: 1.0, BN: 0.5}, measured_ms=2.0, overhead_ms=0.1
    )
    assert estimate["estimate_ms"] == 2.5 and estimate["error_pct"] == 25.0
    assert estimate["estimate_corrected_ms"] == pytest.approx(2.5 - 3 * 0.1 + 0.1)
    assert (estimate["layers"], estimate["bricks"], estimate["layers_timed"]) == (3, 2, 3)
    assert estimate["by_op_ms"] == {"conv2d": 2.0, "batch_norm": 0.5}


def test_kernels_are_placed_under_the_layer_their_nvtx_range_names() -> None:
    """ncu's raw page names each kernel's NVTX push/pop stack; the innermost
    ``mlms-layer-N`` is its layer, and a layer's launches are summed together."""
    header = '"ID","thread Domain:Push/Pop_Range:PL_Type","Kernel Name","gpu__time_duration.sum"'
    units = '"","","","nsecond"'
    rows = [
        '"0","1  ""<default domain>:mlms-layer-0:none"" ","conv","1,000"',
        '"1","1  ""<default domain>:mlms-layer-0:none"" ","nchwToNhwc","500"',
        '"2","1  ""<default domain>:outer:none<default domain>:mlms-layer-2:none"" ","relu","250"',
        '"3","","memcpy","100"',
    ]
    records = [ncu.kernel_record(x) for x in ncu.parse_csv("\n".join([header, units, *rows]))]
    assert [r["layer"] for r in records] == [0, 0, 2, None]
    layers = [{"signature": CONV, "description": "conv"}, {}, {"signature": RELU}]
    first, third = ncu.by_layer(records, layers)
    assert (first["layer"], first["launches"], first["description"]) == (0, 2, "conv")
    assert first["duration_s"] == pytest.approx(1.5e-6)
    assert first["kernels"] == ["conv", "nchwToNhwc"]
    assert (third["layer"], third["signature"], third["description"]) == (2, RELU, None)


def test_rows_are_placed_on_either_side_of_the_ridge() -> None:
    """Memory-bound rows are held to the bandwidth (also without FLOPs), compute-bound ones
    to the compute peak at the measured clock (TF32 tensor when most FLOPs ran there)."""
    h100 = rooflines.gpu("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.bandwidth == 3.35e12
    half_clock = 0.5 * (h100.boost_clock_hz or 0)
    memory = rooflines.place(
        {
            "flops": 1e6, "dram_bytes": 1e6, "duration_s": 1e-6, "flop_per_s": 1e12,
            "arithmetic_intensity_flop_per_byte": 1.0, "dram_bytes_per_s": 1e12,
            "sm_clock_hertz": half_clock,
        },
        h100,
    )  # fmt: skip
    assert (memory["roof"], memory["bound"]) == ("fp32", "memory")
    assert memory["peak_flop_per_s"] == pytest.approx(67e12 / 2)
    assert memory["of_roof_pct"] == pytest.approx(100 / 3.35)
    copy = rooflines.place({"flops": 0.0, "dram_bytes": 2e6, "dram_bytes_per_s": 3.35e11}, h100)
    assert (copy["bound"], copy["of_roof_pct"]) == ("memory", pytest.approx(10.0))
    tensor = rooflines.place(
        {
            "flops": 1e9, "flops_tensor_tf32": 9e8, "dram_bytes": 1e6, "duration_s": 1e-5,
            "flop_per_s": 1e14, "arithmetic_intensity_flop_per_byte": 1000.0,
        },
        h100,
    )  # fmt: skip
    assert (tensor["roof"], tensor["bound"]) == ("tf32 tensor", "compute")
    assert tensor["of_roof_pct"] == pytest.approx(100 * 1e14 / 494.7e12)
    summary = rooflines.summary([memory, tensor, copy])
    assert summary["placed"] == 2  # the copy has no time
    assert summary["memory_bound_pct"] == pytest.approx(100 * 1e-6 / 1.1e-5)


def test_only_runs_the_named_steps_after_facts() -> None:
    names = [s.name for s in driver.chosen("ncu-layers, benanza-gpu")]
    assert names == ["facts", "benanza-gpu", "ncu-layers"]
    assert driver.chosen(None) == driver.STEPS  # `rounds` only when named
    assert [s.name for s in driver.chosen("rounds")] == ["facts", "rounds"]
    with pytest.raises(SystemExit, match=r"--only: no step \['bogus'\]"):
        driver.chosen("bogus")


def test_the_committed_layer_run_matches_its_csv_and_docs_quote_its_rooflines() -> None:
    """The per-layer run's by_layer is what the parser makes of its own CSV; docs/gpu.md's
    roofline tables are what :func:`rooflines.table` renders from them."""
    document = json.loads((LAYERS_RUN / "results.json").read_text())
    step = next(s for s in document["steps"] if s["name"] == "ncu-layers")
    committed = step["data"]["by_layer"]
    layers = [{"signature": r["signature"], "description": r["description"]} for r in committed]
    text = (LAYERS_RUN / "ncu-resnet50-layers.csv").read_text()
    records = [ncu.kernel_record(launch) for launch in ncu.parse_csv(text)]
    again = ncu.by_layer(records, layers)
    assert len(again) == len(committed) == step["data"]["layers"] == 174
    for new, old in zip(again, committed, strict=True):  # Python 3.12's sum() compensates
        numbers = {k for k, v in old.items() if isinstance(v, float)}
        assert {k: new[k] for k in numbers} == pytest.approx({k: old[k] for k in numbers})
        assert {k: new[k] for k in old if k not in numbers} == {
            k: v for k, v in old.items() if k not in numbers
        }
    device = rooflines.gpu(document["environment"]["device"])
    assert device is not None
    docs = (ROOT / "docs" / "gpu.md").read_text()
    for rows, name in (
        (again, "layer"),
        (ncu.by_kernel(records), "kernel"),
    ):
        rendered = "\n".join(rooflines.table([rooflines.place(r, device) for r in rows], name))
        assert rendered in docs, name


ROUNDS_RUN = ROOT / "benchmarks" / "gpu" / "2026-11-27-h100-rounds"


def rounds_table() -> str:
    """The rounds run's per-model interval and test, as docs/gpu.md states them."""
    import numpy as np
    from scipy import stats

    document = json.loads((ROUNDS_RUN / "results.json").read_text())
    step = next(s for s in document["steps"] if s["name"] == "rounds")
    lines = [
        "| model | rounds | median agent − bare | 95 % interval of the median "
        "| Wilcoxon p | goal |",
        "|---|---|---|---|---|---|",
    ]
    for zoo, data in step["data"]["models"].items():
        diffs = np.array([r["overhead_us"] for r in data["rounds"]])
        interval = stats.bootstrap(
            (diffs,), np.median, n_resamples=9999, method="percentile", random_state=0
        ).confidence_interval
        p = stats.wilcoxon(diffs).pvalue
        lines.append(
            f"| {zoo} | {len(diffs)} | {np.median(diffs):+.1f} µs | [{interval.low:+.1f}, "
            f"{interval.high:+.1f}] µs | {p:.2f} | {data['goal_us']:.1f} µs |"
        )
    return "\n".join(lines)


def test_the_rounds_run_is_stated_with_its_interval_and_test() -> None:
    """docs/gpu.md's table of the eleven-round run is what scipy computes from the file."""
    docs = (ROOT / "docs" / "gpu.md").read_text()
    assert rounds_table() in docs
