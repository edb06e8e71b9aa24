"""layer_costs against FLOPs and bytes computed by hand on one-node ONNX graphs."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlmodelscope.analysis.graph import layer_costs


def one_node(
    op: str,
    inputs: dict[str, list[int | str]],
    weights: dict[str, list[int]],
    output: str = "y",
    **attrs: Any,
) -> onnx.ModelProto:
    """A one-node float32 model: ``inputs`` are graph inputs, ``weights`` initializers."""
    rng = np.random.default_rng(0)
    node = helper.make_node(op, [*inputs, *weights], [output], **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(rng.random(s, dtype=np.float32), name=n)
            for n, s in weights.items()
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_flops_bytes_and_shapes() -> None:
    # x [1,3,8,8], w [4,3,3,3], pad 1 -> y [1,4,8,8]; MACs = 4*8*8 * 3*3*3 = 6912; bias 256
    model = one_node(
        "Conv",
        {"x": [1, 3, 8, 8]},
        {"w": [4, 3, 3, 3], "b": [4]},
        kernel_shape=[3, 3],
        pads=[1] * 4,
    )
    (cost,) = layer_costs(model)
    assert cost.op_type == "Conv"
    assert cost.output_shapes == ((1, 4, 8, 8),)
    assert cost.flops == 2 * 6912 + 256
    assert cost.params_bytes == (4 * 3 * 3 * 3 + 4) * 4
    assert cost.bytes_read == (3 * 8 * 8) * 4 + cost.params_bytes
    assert cost.bytes_written == 4 * 8 * 8 * 4
    assert cost.attributes["kernel_shape"] == [3, 3]


def test_grouped_conv_counts_input_channels_per_group() -> None:
    # depthwise-ish: x [2,8,6,6], group 4, w [8,2,3,3] (C_in/group = 2), no pad -> y [2,8,4,4]
    # MACs = 2*8*4*4 * 2*3*3 = 4608
    model = one_node("Conv", {"x": [2, 8, 6, 6]}, {"w": [8, 2, 3, 3]}, group=4, kernel_shape=[3, 3])
    (cost,) = layer_costs(model)
    assert cost.output_shapes == ((2, 8, 4, 4),)
    assert cost.flops == 2 * 4608


def test_gemm_with_transposed_b_and_bias() -> None:
    # A [5,7], B^T [3,7] -> [5,3]; 2*5*3*7 = 210, + C 15
    model = one_node("Gemm", {"a": [5, 7]}, {"b": [3, 7], "c": [3]}, transB=1)
    (cost,) = layer_costs(model)
    assert cost.output_shapes == ((5, 3),)
    assert cost.flops == 210 + 15


def test_batched_matmul_broadcasts_leading_dimensions() -> None:
    # [2,4,6,8] @ [8,3] -> [2,4,6,3]: 2 * (2*4*6) * 8 * 3 = 2304
    model = one_node("MatMul", {"a": [2, 4, 6, 8]}, {"b": [8, 3]})
    (cost,) = layer_costs(model)
    assert cost.output_shapes == ((2, 4, 6, 3),)
    assert cost.flops == 2304


def test_symbolic_batch_is_set_and_scales_flops() -> None:
    model = one_node("MatMul", {"a": ["batch", 8]}, {"b": [8, 3]})
    one, four = layer_costs(model, 1)[0], layer_costs(model, batch_size=4)[0]
    assert one.input_shapes[0] == (1, 8) and four.input_shapes[0] == (4, 8)
    assert four.flops == 4 * one.flops == 4 * 2 * 8 * 3


def test_fixed_batch_that_differs_is_a_clear_error() -> None:
    model = one_node("Relu", {"x": [2, 4]}, {})
    assert layer_costs(model)[0].input_shapes == ((2, 4),)  # the default keeps the model's own
    with pytest.raises(ValueError, match="batch_size: input 'x' has a fixed batch of 2"):
        layer_costs(model, batch_size=8)


def test_elementwise_pool_and_data_movement() -> None:
    relu = layer_costs(one_node("Relu", {"x": [1, 3, 4, 4]}, {}))[0]
    assert relu.flops == 48
    pool = layer_costs(
        one_node("MaxPool", {"x": [1, 3, 4, 4]}, {}, kernel_shape=[2, 2], strides=[2, 2])
    )[0]
    assert pool.output_shapes == ((1, 3, 2, 2),) and pool.flops == 12 * 4
    flat = layer_costs(one_node("Flatten", {"x": [1, 3, 4, 4]}, {}))[0]
    assert flat.flops == 0 and flat.bytes_read == flat.bytes_written == 48 * 4


def test_signature_dedups_equal_layers_and_separates_different_ones() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("LeakyRelu", ["b"], ["c"], alpha=0.1),
        helper.make_node("LeakyRelu", ["c"], ["z"], alpha=0.2),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    costs = layer_costs(model)
    assert [c.name for c in costs] == ["Relu_0", "Relu_1", "LeakyRelu_2", "LeakyRelu_3"]
    assert costs[0].signature == costs[1].signature
    assert costs[2].signature != costs[3].signature
    assert "float32[1x4]" in costs[0].signature


def test_empty_node_names_are_made_unique_and_path_loads(tmp_path: Any) -> None:
    model = one_node("Relu", {"x": [1, 4]}, {})
    model.graph.node[0].name = "act"
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert layer_costs(path)[0].name == "act"
    with pytest.raises(FileNotFoundError, match="model: no ONNX file"):
        layer_costs(tmp_path / "missing.onnx")


def test_values_inference_cannot_type_come_from_running_the_model() -> None:
    """ONNX inference does not type ONNX Runtime's contrib ops (nor, in some exports, keeps the
    batch through every node): the untyped values' shapes then come from one run in ONNX
    Runtime, so the MatMul after the contrib op still gets its FLOPs."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("FusedMatMul", ["a", "b"], ["h"], domain="com.microsoft", alpha=1.0),
        helper.make_node("MatMul", ["h", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "contrib",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(rng.random((3, 4), dtype=np.float32), name="b"),
            numpy_helper.from_array(rng.random((4, 5), dtype=np.float32), name="w"),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=8,
    )
    matmul = layer_costs(model, batch_size=2)[1]
    assert matmul.input_shapes == ((2, 4), (4, 5))
    assert matmul.flops == 2 * 2 * 4 * 5
