"""DLBricks and Benanza on hand-built graphs: what is deduplicated, composed and bounded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from mlmodelscope.analysis import dlbricks
from mlmodelscope.analysis.benanza import bound, critical_path_ms, effective_device
from mlmodelscope.analysis.devices import GPUS, Device, device
from mlmodelscope.analysis.dlbricks import BenchConfig, estimate, split
from mlmodelscope.analysis.graph import layer_costs
from mlmodelscope.cli import app
from mlmodelscope.store import open_store

FAST = BenchConfig(runs=3, warmup=1)


def branchy(path: Path, tail: str = "Relu") -> Path:
    """x -> Conv -> Relu -> Conv -> Relu (the two convs equal), plus a 1x1 Conv shortcut from
    x, added: a repeated layer, a fusable chain and two independent branches. ``tail`` is the
    last node's op (another op: a model sharing every brick but one)."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.random(s, dtype=np.float32), n) for n, s in
         (("w1", [8, 8, 3, 3]), ("w2", [8, 8, 3, 3]), ("ws", [8, 8, 1, 1]))]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1] * 4),
        helper.make_node("Conv", ["x", "ws"], ["s"], name="shortcut"),
        helper.make_node("Add", ["c2", "s"], ["a"], name="add"),
        helper.make_node(tail, ["a"], ["y"], name="relu2"),
    ]
    graph = helper.make_graph(
        nodes,
        "branchy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        w,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return branchy(tmp_path / "branchy.onnx")


def test_raw_split_dedups_equal_layers(model: Path) -> None:
    layers, bricks = split(model, BenchConfig(graph="raw"))
    assert [c.name for c in layers] == ["conv1", "relu1", "conv2", "shortcut", "add", "relu2"]
    conv = next(b for b in bricks.values() if b.op_type == "Conv" and len(b.layers) == 2)
    assert conv.layers == ["conv1", "conv2"]  # same shapes and attributes: one benchmark
    assert len(bricks) == 4  # relu1 and relu2 differ in nothing either


def test_optimized_split_times_ort_fused_kernels(model: Path) -> None:
    layers, _ = split(model, BenchConfig(graph="optimized"))
    raw, _ = split(model, BenchConfig(graph="raw"))
    assert len(layers) < len(raw)  # ORT fused Conv+Relu (and the Add) into its Conv


def test_estimate_composes_and_shares_bricks_across_models(model: Path, tmp_path: Path) -> None:
    twin = branchy(tmp_path / "twin.onnx")
    report = estimate([model, twin], BenchConfig(runs=3, warmup=1, graph="raw"))
    first, second = report.models
    assert second.bricks == 4 and second.estimate_ms == pytest.approx(first.estimate_ms)
    assert first.layers == 6 and first.bricks == 4
    assert set(first.per_layer_ms) == {"conv1", "relu1", "conv2", "shortcut", "add", "relu2"}
    assert first.estimate_ms == pytest.approx(sum(first.per_layer_ms.values()))
    assert first.per_layer_ms["conv1"] == first.per_layer_ms["conv2"]
    assert first.measured_ms > 0 and report.run_overhead_ms > 0
    assert report.unique_bricks == 4  # the twin's bricks were benchmarked once, for both
    assert report.unshared_brick_bench_s > report.brick_bench_s
    assert json.dumps(report.to_dict())


def test_store_reuses_bricks_measured_on_the_same_stack(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    benchmarked: list[str] = []
    benchmark_brick = dlbricks.benchmark_brick

    def counted(brick: dlbricks.Brick, config: BenchConfig) -> dlbricks.Timing:
        benchmarked.append(brick.op_type)
        return benchmark_brick(brick, config)

    monkeypatch.setattr(dlbricks, "benchmark_brick", counted)
    sigmoid = branchy(tmp_path / "sigmoid.onnx", tail="Sigmoid")  # 4 bricks shared, 1 new
    config = BenchConfig(runs=3, warmup=1, graph="raw")
    with open_store(str(tmp_path / "runs.db")) as store:
        first = estimate([model], config, store=store)
        assert (first.bricks_measured, first.bricks_reused, first.reuse_saved_s) == (4, 0, 0.0)
        assert len(benchmarked) == 4

        benchmarked.clear()
        second = estimate([sigmoid], config, store=store)
        assert benchmarked == ["Sigmoid"]  # only the brick never measured on this stack
        assert (second.bricks_measured, second.bricks_reused) == (1, 4)
        assert second.models[0].bricks_reused == 4 and second.models[0].bricks_measured == 1
        # saved: the stored bricks' own measuring wall times, i.e. all of the first estimate's
        assert second.reuse_saved_s == pytest.approx(first.brick_bench_s)
        assert second.brick_bench_s < second.unshared_brick_bench_s
        assert second.models[0].per_layer_ms["conv1"] == first.models[0].per_layer_ms["conv1"]
        assert second.stack_key == first.stack_key and len(first.stack_key) == 64

        benchmarked.clear()
        other = estimate(
            [sigmoid], BenchConfig(threads=2, runs=3, warmup=1, graph="raw"), store=store
        )
        assert other.stack_key != first.stack_key and other.stack["intra_op_threads"] == 2
        assert (other.bricks_measured, other.bricks_reused, other.reuse_saved_s) == (5, 0, 0.0)
        assert len(benchmarked) == 5  # another stack: nothing reused


def test_bound_is_the_roofline_per_layer_and_the_dag_path(tmp_path: Path) -> None:
    dev = Device("toy", peak_flops=1e9, bandwidth=1e9, source="test")
    model = branchy(tmp_path / "m.onnx")
    costs = layer_costs(model)
    report = bound(model, dev)
    conv1 = next(b for b in report.layers if b.name == "conv1")
    cost = next(c for c in costs if c.name == "conv1")
    assert conv1.bound_ms == pytest.approx(1e3 * max(cost.flops, cost.bytes_total) / 1e9)
    assert report.sequential_bound_ms == pytest.approx(sum(b.bound_ms for b in report.layers))
    # the shortcut overlaps conv1..conv2, so the critical path is shorter than the sum
    assert report.critical_path_bound_ms < report.sequential_bound_ms
    assert critical_path_ms(costs, [1.0] * len(costs)) == 5.0  # conv1 relu1 conv2 add relu2
    kinds = {(o.kind, o.layers) for o in report.opportunities}
    assert ("parallel", ("conv1", "shortcut")) in kinds
    assert ("fusion", ("conv1", "relu1")) in kinds
    assert ("fusion", ("conv2", "add", "relu2")) in kinds


def test_measured_layers_give_gaps_and_raise_a_low_roof(model: Path) -> None:
    dev = Device("slow-roof", peak_flops=1.0, bandwidth=1.0, source="test")
    costs = layer_costs(model)
    measured = {c.name: 1.0 for c in costs}  # 1 ms each
    raised = effective_device(dev, costs, measured)
    assert raised.peak_flops == max(c.flops for c in costs) * 1e3
    assert "raisedFrom" in raised.conditions
    report = bound(model, dev, measured_layers=measured, measured_ms=5.0)
    assert all(b.bound_ms <= 1.0 + 1e-9 for b in report.layers)  # never above what ran
    far = [o for o in report.opportunities if o.kind == "far-from-bound"]
    assert far and far[0].saving_ms == max(b.gap_ms or 0 for b in report.layers)


def test_device_table_cites_datasheets_and_rejects_unknown_names() -> None:
    assert {"NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4"} <= set(GPUS)
    assert all("datasheet" in d.source for d in GPUS.values())
    with pytest.raises(ValueError, match="device: unknown 'tpu'"):
        device("tpu")
    cpu = device("cpu")
    assert cpu.peak_flops > 0 and cpu.bandwidth > 0 and "loadavg" in cpu.conditions


def test_cli_dlbricks_and_bound(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLMS_DATA_DIR", str(tmp_path / "data"))  # a fresh default store
    out = tmp_path / "d.json"
    args = ["dlbricks", str(model), "--runs", "2", "--graph", "raw", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "branchy: estimate" in result.output and json.loads(out.read_text())["models"]
    assert (
        "4 measured" in result.output and "0 reused from the store (saved 0.00 s)" in result.output
    )
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "0 measured" in again.output and "4 reused from the store" in again.output
    assert json.loads(out.read_text())["reuse_saved_s"] > 0
    gpu = CliRunner().invoke(app, ["bound", str(model), "--device", "Tesla-T4"])
    assert gpu.exit_code == 0 and "roofline" in gpu.output and "measured" not in gpu.output
    bad = CliRunner().invoke(app, ["bound", str(tmp_path / "none.onnx")])
    assert bad.exit_code == 2 and "model: no ONNX file" in bad.output


@pytest.mark.frameworks
def test_zoo_resnet50_reuses_what_resnet18_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlmodelscope.zoo import ensure_zoo_model

    calls: list[str] = []
    benchmark_brick = dlbricks.benchmark_brick

    def counted(brick: dlbricks.Brick, config: BenchConfig) -> dlbricks.Timing:
        calls.append(brick.signature)
        return benchmark_brick(brick, config)

    monkeypatch.setattr(dlbricks, "benchmark_brick", counted)
    r18, r50 = (
        ensure_zoo_model(n, small=True, cache_dir=tmp_path).path for n in ("resnet18", "resnet50")
    )
    with open_store(str(tmp_path / "runs.db")) as store:
        first = estimate([r18], FAST, names=["resnet18"], store=store)
        calls.clear()
        second = estimate([r50], FAST, names=["resnet50"], store=store)
    assert first.bricks_reused == 0 and first.bricks_measured == first.unique_bricks
    assert 0 < second.bricks_reused < second.unique_bricks  # the stem, shared blocks
    assert len(calls) == second.bricks_measured == second.unique_bricks - second.bricks_reused
    assert 0 < second.reuse_saved_s <= first.brick_bench_s
