"""ONNX nodes lowered to PyTorch and TensorFlow give ONNX Runtime's result for the same node,
and a node that cannot be lowered faithfully says why instead of being skipped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from mlmodelscope.analysis.lowering import (
    onnx_slices,
    split_sizes,
    squeezed,
    unsqueezed,
)

Input = tuple[str, Any, bool]
"""(name, value, constant): a constant is an initializer, the rest are fed; "" leaves an
optional input out."""

INT64_MAX = np.iinfo(np.int64).max
RNG = np.random.default_rng(0)


def floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def ints(*values: Any) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def ort_outputs(
    op: str, attrs: Mapping[str, Any], inputs: Sequence[Input], outputs: int, opset: int
) -> list[np.ndarray]:
    """ONNX Runtime's outputs for the one node, inputs fed or held as initializers."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    node = helper.make_node(op, [n for n, _, _ in inputs], [f"y{i}" for i in range(outputs)])
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    feeds = {n: np.asarray(v) for n, v, constant in inputs if n and not constant}
    fed = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in feeds.items()
    ]
    held = {n: np.asarray(v) for n, v, constant in inputs if n and constant}
    inits = [numpy_helper.from_array(v, n) for n, v in held.items()]
    results = [onnx.ValueInfoProto(name=f"y{i}") for i in range(outputs)]
    graph = helper.make_graph([node], op, fed, results, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    return list(ort.InferenceSession(model.SerializeToString()).run(None, feeds))


def operands(inputs: Sequence[Input]) -> list[Any]:
    from mlmodelscope.analysis.lowering import Operand

    return [
        Operand(n, np.asarray(v), c) if n else Operand("", np.zeros(0, np.float32), True)
        for n, v, c in inputs
    ]


def lower(
    op: str,
    attrs: Mapping[str, Any],
    inputs: Sequence[Input],
    outputs: int = 1,
    nhwc: bool = False,
) -> dict[str, Any]:
    """The node's lowering in each implementation: a call or the reason it has none."""
    from mlmodelscope.analysis.lowering import tf_node, torch_node

    found = operands(inputs)
    tf_fn = tf_node(op, attrs, found, nhwc, outputs)
    return {
        "pytorch": torch_node(op, attrs, found, outputs),
        "tensorflow": tf_fn,
        "tf.function": tf_fn if isinstance(tf_fn, str) else _traced(tf_fn),
    }


def _traced(fn: Any) -> Any:
    import tensorflow as tf

    return tf.function(fn)  # grappler's rewrites run too


def run(name: str, fn: Any, inputs: Sequence[Input], nhwc: bool) -> list[np.ndarray]:
    """``fn`` (of implementation ``name``) on the fed inputs, its output(s) as NCHW arrays."""
    import tensorflow as tf
    import torch

    from mlmodelscope.analysis.lowering import tf_feed

    fed = {n: np.asarray(v) for n, v, constant in inputs if n and not constant}
    if name == "pytorch":
        got = fn({n: torch.from_numpy(v) for n, v in fed.items()})
    else:
        got = fn({n: tf.constant(tf_feed(v, nhwc)) for n, v in fed.items()})
    values = [np.asarray(g) for g in (got if isinstance(got, (tuple, list)) else [got])]
    back = nhwc and name != "pytorch"
    return [v.transpose(0, 3, 1, 2) if back and v.ndim == 4 else v for v in values]


def check(
    op: str,
    attrs: Mapping[str, Any],
    inputs: Sequence[Input],
    outputs: int = 1,
    nhwc: bool = False,
    opset: int = 17,
) -> None:
    """Every implementation lowers the node and matches ONNX Runtime: same shapes and dtypes,
    integers exactly, floats to float32 rounding."""
    want = ort_outputs(op, attrs, inputs, outputs, opset)
    for name, fn in lower(op, attrs, inputs, outputs, nhwc).items():
        label = f"{name} {op} {dict(attrs)}"
        assert not isinstance(fn, str), f"{label}: {fn}"
        got = run(name, fn, inputs, nhwc)
        assert len(got) == len(want), label
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape, (label, g.dtype, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=label)


# ------------------------------------------------------------------------------ pure shape rules


def test_slices_follow_onnx_clamping_and_negative_steps() -> None:
    shape = (4, 10)
    assert onnx_slices(shape, [1], [INT64_MAX], [1]) == (slice(None), slice(1, 10, 1))
    assert onnx_slices(shape, [-3, 0], [-1, 2]) == (slice(1, 3, 1), slice(0, 2, 1))
    # a negative step down to the first element: ONNX's end -1 is Python's None
    assert onnx_slices(shape, [-1], [-INT64_MAX], [-1], [-2]) == (
        slice(None),
        slice(9, None, -2),
    )
    assert np.arange(10)[onnx_slices((10,), [-1], [-INT64_MAX], None, [-2])].tolist() == [
        9, 7, 5, 3, 1
    ]  # fmt: skip


def test_squeeze_unsqueeze_and_split_shapes() -> None:
    assert unsqueezed((3, 4), [0, -1]) == (1, 3, 4, 1)
    assert unsqueezed((), [0]) == (1,)
    assert squeezed((1, 3, 1, 4), [-2]) == (1, 3, 4)
    assert squeezed((1, 3, 1, 4), None) == (3, 4)
    assert split_sizes(6, [1, 2, 3], 3) == [1, 2, 3]
    assert split_sizes(6, None, 3) == [2, 2, 2]
    assert split_sizes(7, None, 3) == [3, 3, 1]  # opset 18's num_outputs, uneven


# ------------------------------------------------------------------------------ CNN ops


@pytest.mark.frameworks
@pytest.mark.parametrize("side", [9, 10])
def test_cnn_ops_match_onnx_runtime_on_odd_and_even_sizes(side: int) -> None:
    """Every op the zoo's CNNs use gives ONNX Runtime's numbers in PyTorch (NCHW) and
    TensorFlow (NHWC), on odd and even sizes: TensorFlow's SAME pads an odd pixel after, so on
    even sizes a stride-2 window with ONNX pads 1 needs an explicit pad to sit where ONNX's does."""
    x = ("x", floats(1, 8, side, side), False)
    w = ("w", floats(4, 8, 3, 3), True)
    depthwise = ("w", floats(8, 1, 3, 3), True)
    cases: list[tuple[str, dict[str, Any], list[Input]]] = [
        ("Conv", {"pads": [1, 1, 1, 1], "strides": [2, 2]}, [x, w, ("b", floats(4), True)]),
        ("Conv", {"pads": [1, 1, 1, 1], "group": 8}, [x, depthwise]),
        ("Conv", {"pads": [1, 1, 1, 1], "group": 8, "strides": [2, 2]}, [x, depthwise]),
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, [x]),
        ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [x]),
        ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                         "count_include_pad": 1}, [x]),
        ("GlobalAveragePool", {}, [x]),
        ("Add", {}, [x, ("c", floats(1, 8, 1, 1), True)]),
        ("Mul", {}, [x, ("c", floats(1, 8, side, side), True)]),
        ("Relu", {}, [x]), ("Sigmoid", {}, [x]),
        ("Clip", {}, [x, ("lo", np.float32(0.2), True), ("hi", np.float32(0.7), True)]),
        ("Softmax", {"axis": 1}, [x]),
        ("Concat", {"axis": 1}, [x, ("c", floats(1, 3, side, side), True), x]),
        ("Split", {"axis": 1}, [x, ("s", ints(3, 5), True)]),
        ("Slice", {}, [x, ("st", ints(1, -4), True), ("en", ints(INT64_MAX, -1), True),
                       ("ax", ints(1, 3), True), ("sp", ints(2, 1), True)]),
        ("Gather", {"axis": 1}, [x, ("i", ints(7, 0, -1), True)]),
        ("Cast", {"to": 11}, [x]),
    ]  # fmt: skip
    for op, attrs, inputs in cases:
        check(op, attrs, inputs, outputs=2 if op == "Split" else 1, nhwc=True)


@pytest.mark.frameworks
def test_tensorflow_names_what_it_cannot_pad_or_lay_out() -> None:
    """Average pools leaving out pads that SAME does not give, and ops whose 4-D result would
    need NCHW order in an NHWC graph, lower to a reason in TensorFlow (PyTorch runs them)."""
    x = ("x", floats(1, 8, 10, 10), False)
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    scale, bias = ("s", floats(10), True), ("b", floats(10), True)
    refused = {
        "AveragePool": (pool, [x], "left out of averages"),
        "Shape": ({}, [x], "NHWC"),
        "Squeeze": ({}, [("x", floats(1, 8, 1, 10), False), ("a", ints(2), True)], "NHWC"),
        "LayerNormalization": ({"axis": -1}, [x, scale, bias], "NHWC"),
        "Gather": ({"axis": 1}, [x, ("i", ints([0, 1]), True)], "NHWC"),  # 2-D indices: 5-D
    }
    for op, (attrs, inputs, reason) in refused.items():
        found = lower(op, attrs, inputs, nhwc=True)
        assert not isinstance(found["pytorch"], str), op
        assert isinstance(found["tensorflow"], str) and reason in found["tensorflow"], op


# ------------------------------------------------------------------------------ transformer ops


@pytest.mark.frameworks
def test_layer_normalization_matches_onnx_runtime() -> None:
    x = ("x", floats(2, 5, 8), False)
    cases: list[tuple[dict[str, Any], list[Input]]] = [
        ({"axis": -1, "epsilon": 1e-12}, [x, ("s", floats(8), True), ("b", floats(8), True)]),
        ({"axis": 1, "epsilon": 1e-3}, [x, ("s", floats(5, 8), True), ("b", floats(5, 8), True)]),
        ({"axis": -2}, [x, ("s", floats(5, 8), True)]),  # no bias, default epsilon
        ({}, [x, ("s", floats(8), False), ("b", floats(8), False)]),  # scale and bias fed
    ]
    for attrs, inputs in cases:
        check("LayerNormalization", attrs, inputs)


@pytest.mark.frameworks
def test_gather_matches_onnx_runtime_on_either_axis_and_index_kind() -> None:
    table = ("t", floats(10, 4), True)
    cases: list[tuple[dict[str, Any], list[Input]]] = [
        ({}, [table, ("i", ints([1, 9, 0], [2, 2, 5]), False)]),  # an embedding, fed indices
        ({"axis": 0}, [("d", floats(10, 4), False), ("i", ints([-1, 0], [3, -10]), True)]),
        ({"axis": 1}, [("d", floats(3, 5, 4), False), ("i", ints(4, -1, 0), True)]),
        ({"axis": 1}, [("d", floats(3, 5, 4), False), ("i", np.array([2, 0], np.int32), True)]),
        ({"axis": -1}, [("d", floats(3, 5, 4), False), ("i", np.int64(-2), True)]),
        ({"axis": 0}, [("d", ints(1, 16, 64), True), ("i", np.int64(2), True)]),  # a shape's dim
    ]
    for attrs, inputs in cases:
        check("Gather", attrs, inputs)


@pytest.mark.frameworks
def test_concat_shape_cast_and_integer_div_match_onnx_runtime() -> None:
    a, b = ("a", floats(2, 3), False), ("b", floats(2, 1), True)
    check("Concat", {"axis": 1}, [a, b, ("c", floats(2, 4), False)])
    check("Concat", {"axis": -2}, [a, ("d", floats(5, 3), True), a])
    dims = [(f"u{i}", ints(v), i % 2 == 0) for i, v in enumerate([1, 16, 3, 4, 16])]
    check("Concat", {"axis": 0}, dims)  # a Reshape target built from five pieces
    x = ("x", floats(2, 3, 4) * 3, False)
    for attrs in ({}, {"start": 1}, {"start": -2, "end": -1}):
        check("Shape", attrs, [x], opset=17)
    check("Cast", {"to": 7}, [x])  # float to int64 truncates toward zero
    for to in (9, 10, 11):  # bool, float16, double
        check("Cast", {"to": to}, [x])
    check("Cast", {"to": 2}, [("i", ints(3, 200), False)])  # int64 to uint8
    check("Cast", {"to": 1}, [("i", ints(3, -4), False)])
    check("Cast", {"to": 7}, [("i", ints(3, -4), False)])
    check("Div", {}, [("n", ints(7, -7, 7, -7), False), ("d", ints(2, 2, -2, -2), True)])


@pytest.mark.frameworks
def test_squeeze_unsqueeze_slice_and_split_match_onnx_runtime() -> None:
    check("Unsqueeze", {}, [("x", floats(3, 4), False), ("a", ints(0, -1), True)])
    check("Unsqueeze", {}, [("x", np.int64(16), False), ("a", ints(0), True)])
    check("Squeeze", {}, [("x", floats(1, 3, 1, 4), False), ("a", ints(-2), True)])
    check("Squeeze", {}, [("x", floats(1, 3, 1, 4), False)])
    x = ("x", floats(2, 10, 6), False)
    check("Slice", {}, [x, ("s", ints(1, -4), True), ("e", ints(INT64_MAX, -1), True),
                        ("a", ints(1, 2), True), ("p", ints(2, 1), True)])  # fmt: skip
    positions = ("pos", np.arange(512, dtype=np.int64)[None], True)
    check("Slice", {}, [positions, ("s", ints(0), True), ("e", ints(16), False),
                        ("a", ints(1), True)])  # fmt: skip
    check("Split", {"axis": 0}, [("x", floats(6, 2, 4), False), ("s", ints(1, 2, 3), True)], 3)
    check("Split", {"axis": -1}, [("x", floats(2, 3, 6), False)], outputs=3)
    check("Split", {"axis": 1, "num_outputs": 3}, [("x", floats(2, 7), False)], 3, opset=18)


@pytest.mark.frameworks
def test_what_cannot_be_lowered_says_why() -> None:
    """No silent skip: each framework that cannot give ONNX's semantics names the reason."""
    x = ("x", floats(2, 10), False)
    backwards = [x, ("s", ints(-1), True), ("e", ints(-INT64_MAX), True),
                 ("a", ints(1), True), ("p", ints(-2), True)]  # fmt: skip
    found = lower("Slice", {}, backwards)
    assert "negative step" in found["pytorch"]
    reversed_tf = run("tensorflow", found["tensorflow"], backwards, False)  # TensorFlow can
    np.testing.assert_array_equal(reversed_tf[0], ort_outputs("Slice", {}, backwards, 1, 17)[0])

    fed_negative = [("t", floats(10, 4), True), ("i", ints(-1, 2), False)]
    found = lower("Gather", {}, fed_negative)
    assert not isinstance(found["pytorch"], str)
    assert "negative indices at run time" in found["tensorflow"]

    norm = [("x", floats(2, 8), False), ("s", floats(8), True), ("b", floats(8), True)]
    for attrs, outputs, reason in (
        ({"stash_type": 0}, 1, "stash_type"),
        ({}, 3, "extra output"),  # Mean and InvStdDev asked for
    ):
        for name, fn in lower("LayerNormalization", attrs, norm, outputs).items():
            assert isinstance(fn, str) and reason in fn, name
    wide = [("x", floats(2, 8), False), ("s", floats(1), True)]
    assert "not the normalized [8]" in lower("LayerNormalization", {}, wide)["pytorch"]
    for fn in lower("Cast", {"to": 8}, [x]).values():
        assert isinstance(fn, str) and fn.startswith("Cast to STRING"), fn
    assert lower("NonZero", {}, [x])["pytorch"] == "no lowering for NonZero"


def test_a_stored_framework_timing_names_the_lowering_it_was_measured_with() -> None:
    """PyTorch and TensorFlow bricks are stored under the lowering's revision, so a changed
    lowering measures again; ONNX Runtime's stack stays DLBricks' own (they share timings)."""
    from mlmodelscope.analysis.dlbricks import BenchConfig, system_stack
    from mlmodelscope.analysis.implementations import IMPLEMENTATIONS, implementation_stack
    from mlmodelscope.analysis.lowering import REVISION

    bench = BenchConfig(graph="raw")
    threads = {"intra_op_threads": 1, "inter_op_threads": 1}
    for impl in IMPLEMENTATIONS:
        stack = implementation_stack(impl, bench, threads, nhwc=False)
        if impl.framework == "onnxruntime":
            assert "lowering" not in stack
            if impl.variant == "all":
                assert stack == {**system_stack(bench), "brick_optimization": "all"}
        else:
            assert stack["lowering"] == REVISION
