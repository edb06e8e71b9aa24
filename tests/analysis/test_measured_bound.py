"""Benanza's measured bound: the pure composition on hand-made timings, whole zoo models lowered
to PyTorch and TensorFlow, and the measurement on zoo models in all three frameworks (each
node's lowering is tested in test_lowering.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mlmodelscope.analysis.measuredbound import (
    Implementation,
    Layer,
    LayerTiming,
    describe,
    measured_bound,
    table,
)

ORT = Implementation("onnxruntime", "all")
TORCH = Implementation("pytorch", "eager")
TF = Implementation("tensorflow", "tf.function")


def hand_made() -> tuple[list[Layer], list[LayerTiming]]:
    """conv (twice, same signature), relu, gemm; each framework best somewhere."""
    layers = [
        Layer("conv1", "conv", "Conv 3x3 s1 at [1,64,56,56]"),
        Layer("relu1", "relu", "Relu at [1,64,56,56]"),
        Layer("conv2", "conv", "Conv 3x3 s1 at [1,64,56,56]"),
        Layer("fc", "gemm", "Gemm at [1,512]"),
    ]
    ms = {
        ORT: {"conv": 0.22, "relu": 0.05, "gemm": 0.10},
        TORCH: {"conv": 0.30, "relu": 0.02, "gemm": 0.12},
        TF: {"conv": 0.41, "relu": 0.06},  # no gemm timing: ran 3 of 4 layers
    }
    timings = [LayerTiming(sig, impl, t) for impl, row in ms.items() for sig, t in row.items()]
    return layers, timings


def test_bound_is_the_sum_of_each_layers_best_implementation() -> None:
    layers, timings = hand_made()
    result = measured_bound("m", layers, timings, end_to_end={ORT: 0.5}, roofline_ms=0.3)
    assert result.bound_ms == pytest.approx(0.22 * 2 + 0.02 + 0.10)
    best = {b.layer.name: (b.best, b.best_ms) for b in result.layers}
    assert best == {"conv1": (ORT, 0.22), "conv2": (ORT, 0.22), "relu1": (TORCH, 0.02),
                    "fc": (ORT, 0.10)}  # fmt: skip
    rows = {r.implementation: r for r in result.rows}
    assert [r.implementation for r in result.rows] == [ORT, TORCH, TF]  # as timed
    assert rows[ORT].layers_ms == pytest.approx(0.22 * 2 + 0.05 + 0.10)
    assert rows[ORT].gap_ms == pytest.approx(0.03)
    assert rows[ORT].end_to_end_gap_ms == pytest.approx(0.5 - result.bound_ms)
    assert rows[TORCH].end_to_end_ms is None and rows[TORCH].end_to_end_gap_ms is None
    # TensorFlow ran 3 of the 4 layers: its gap is against the bound over those three
    assert not rows[TF].complete and rows[TF].layers_run == 3
    assert rows[TF].bound_ms == pytest.approx(0.22 * 2 + 0.02)
    for row in result.rows:
        assert row.bound_ms <= row.layers_ms + 1e-12


def test_top_layers_are_farthest_from_their_best_with_the_faster_implementation() -> None:
    layers, timings = hand_made()
    rows = {r.implementation: r for r in measured_bound("m", layers, timings).rows}
    tf_top = rows[TF].top
    # conv twice at +0.19 ms each, then relu +0.04
    assert [g.description for g in tf_top] == [
        "Conv 3x3 s1 at [1,64,56,56]",
        "Relu at [1,64,56,56]",
    ]
    assert tf_top[0].gap_ms == pytest.approx(2 * 0.19) and tf_top[0].best == ORT
    assert tf_top[0].sentence() == (
        "Conv 3x3 s1 at [1,64,56,56] (x2): 0.410 ms in tensorflow (tf.function), "
        "best 0.220 ms in onnxruntime (all)"
    )
    torch_top = rows[TORCH].top
    assert [g.best for g in torch_top] == [ORT, ORT]  # conv +0.16, gemm +0.02; relu is its own
    assert all(g.implementation == TORCH for g in torch_top)
    assert [g.description for g in rows[ORT].top] == ["Relu at [1,64,56,56]"]
    assert len(measured_bound("m", layers, timings, top=1).rows[2].top) == 1


def test_unmeasured_layers_table_and_json() -> None:
    layers, timings = hand_made()
    layers.append(Layer("odd", "odd", "Odd at [1]"))
    result = measured_bound("m", layers, timings, roofline_ms=0.3)
    assert result.unmeasured == ("odd",)
    text = "\n".join(table([result]))
    assert "| m | tensorflow (tf.function) (3/5 layers) |" in text
    assert "| 0.300 |" in text  # the roofline column
    assert "best 0.220 ms in onnxruntime (all)" in text and "no implementation ran: odd" in text
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["rows"][2]["top"][0]["sentence"].startswith("Conv 3x3 s1")
    assert doc["unmeasured"] == ["odd"]


def test_describe_names_kernel_stride_group_and_shape() -> None:
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "group": 32, "pads": [1] * 4}
    assert describe("Conv", attrs, (1, 32, 56, 56)) == "Conv 3x3 s2 g32 at [1,32,56,56]"
    assert describe("Gemm", {}, (1, 512)) == "Gemm at [1,512]"
    assert describe("Relu", {}, None) == "Relu"


def test_table_names_what_was_not_timed_or_run_and_why() -> None:
    layers, timings = hand_made()
    conditions = {
        "not_timed": {"pytorch (eager)": {"Slice": "Slice: a negative step"}},
        "end_to_end_not_run": {"pytorch (eager)": "Slice: a negative step"},
    }
    text = "\n".join(table([measured_bound("m", layers, timings, conditions=conditions)]))
    assert "- not timed in pytorch (eager): Slice: a negative step" in text
    assert "- not run end to end in pytorch (eager): Slice: a negative step" in text


@pytest.mark.frameworks
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2", "bert_base"])
def test_whole_zoo_models_lowered_give_onnx_runtimes_output(model: str) -> None:
    """Every node lowered, in graph order, gives the recorded ONNX Runtime output in PyTorch,
    TensorFlow eager and tf.function (NHWC for the CNNs, even-sized stride-2 windows included)."""
    from mlmodelscope.analysis.dlbricks import record_values
    from mlmodelscope.analysis.graph import load_model
    from mlmodelscope.analysis.implementations import Program, program, tf_call, torch_call
    from mlmodelscope.analysis.lowering import channels_last
    from mlmodelscope.zoo import ensure_zoo_model

    fixed, values = record_values(load_model(ensure_zoo_model(model, small=True).path), 1)
    prog = program(fixed, values)
    assert isinstance(prog, Program), prog
    nhwc = channels_last([n.op_type for n in fixed.graph.node])
    calls = {
        "pytorch": torch_call(prog),
        "tensorflow": tf_call(prog, nhwc, function=False),
        "tf.function": tf_call(prog, nhwc, function=True),
    }
    for name, call in calls.items():
        assert not isinstance(call, str), f"{name}: {call}"
        got = np.asarray(call())
        np.testing.assert_allclose(
            got, values[prog.output], rtol=1e-4, atol=1e-4, err_msg=f"{model} in {name}"
        )


@pytest.mark.frameworks
def test_measured_bound_on_the_zoo_bert_in_three_frameworks() -> None:
    """The small BERT: every layer (LayerNormalization, Gather, Concat, Split, ...) is timed in
    all six implementations, and each runs the whole model. Timings are not asserted."""
    from mlmodelscope.analysis.implementations import IMPLEMENTATIONS, BoundConfig, measure
    from mlmodelscope.zoo import ensure_zoo_model

    path = ensure_zoo_model("bert_base", small=True).path
    result = measure(path, BoundConfig(runs=2, warmup=0), "bert_base")
    assert result.conditions["not_timed"] == {}
    assert result.conditions["end_to_end_not_run"] == {}
    assert [row.implementation for row in result.rows] == list(IMPLEMENTATIONS)
    ops = {layer.layer.description.split()[0] for layer in result.layers}
    assert {"LayerNormalization", "Gather", "Concat", "Split", "Slice"} <= ops
    for row in result.rows:
        assert row.complete and row.end_to_end_ms is not None
        assert result.bound_ms <= row.layers_ms + 1e-9


@pytest.mark.frameworks
def test_measured_bound_on_a_zoo_model_in_three_frameworks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The small ResNet-18 through `mlms benanza`: every layer has a best implementation, the
    bound is at most each implementation's sum of its own layers, and each names its three
    layers farthest from their best with the faster implementation. Timings are not asserted."""
    from mlmodelscope.analysis.implementations import IMPLEMENTATIONS
    from mlmodelscope.cli import app
    from mlmodelscope.zoo import ensure_zoo_model

    monkeypatch.setenv("MLMS_DATA_DIR", str(tmp_path / "data"))  # a fresh default store
    ensure_zoo_model("resnet18", small=True)
    out = tmp_path / "bound.json"
    args = ["benanza", "resnet18", "--small", "--runs", "3", "--warmup", "1", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--device", "Tesla-T4"])
    assert result.exit_code == 0, result.output
    (doc,) = json.loads(out.read_text())
    assert doc["model"] == "resnet18" and not doc["unmeasured"]
    assert all(layer["best"] is not None for layer in doc["layers"])
    labels = [row["label"] for row in doc["rows"]]
    assert labels == [i.label for i in IMPLEMENTATIONS]  # every layer lowered everywhere
    assert {row["implementation"]["framework"] for row in doc["rows"]} == {
        "onnxruntime", "pytorch", "tensorflow"
    }  # fmt: skip
    for row in doc["rows"]:
        assert row["layers_run"] == row["layers_total"] == len(doc["layers"])
        assert row["bound_ms"] == pytest.approx(doc["bound_ms"])
        assert doc["bound_ms"] <= row["layers_ms"] + 1e-9
        assert row["end_to_end_ms"] is not None and row["end_to_end_ms"] > 0
        for gap in row["top"]:
            assert gap["implementation"] == row["implementation"]
            assert gap["best"] != gap["implementation"] and gap["best_ms"] < gap["ms"]
            assert f"best {gap['best_ms']:.3f} ms in " in gap["sentence"]
    assert any(len(row["top"]) == 3 for row in doc["rows"])
    assert doc["roofline_ms"] > 0 and doc["conditions"]["roofline_device"] == "Tesla-T4"
    assert "| resnet18 | pytorch (eager) |" in result.output
    assert "roofline ms" in result.output and "best " in result.output
    assert "pytorch 1/1" in result.output

    # the store keeps the bricks per implementation: a second run measures none
    again = CliRunner().invoke(app, [*args, "--no-roofline"])
    assert again.exit_code == 0, again.output
    (second,) = json.loads(out.read_text())
    assert (
        second["conditions"]["bricks_reused"] == len(IMPLEMENTATIONS) * doc["conditions"]["bricks"]
    )
    assert second["roofline_ms"] is None


def test_cli_benanza_rejects_what_it_cannot_run(tmp_path: Path) -> None:
    from mlmodelscope.cli import app

    missing = CliRunner().invoke(app, ["benanza", str(tmp_path / "none.onnx"), "--no-store"])
    assert missing.exit_code == 2 and "neither an ONNX file nor a zoo model" in missing.output
    bad = CliRunner().invoke(app, ["benanza", "mlp", "--framework", "jax", "--no-store"])
    assert bad.exit_code == 2 and "frameworks: ['jax']" in bad.output
