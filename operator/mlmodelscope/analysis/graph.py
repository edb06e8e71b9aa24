"""Per-node costs of an ONNX model: FLOPs, bytes moved and a deduplication signature.

Shapes come from ONNX shape inference after the graph inputs' symbolic batch dimension is
set to ``batch_size``. Where inference leaves a value untyped or a dimension unresolved (the
contrib ops of an ONNX Runtime-optimized graph; an export whose batch inference loses on the
way), the shapes come from running the model once (``shapes_by_execution``), unless the caller
passes ``shapes`` (value name -> (shape, dtype)) itself.

What counts as FLOPs (a multiply-add is 2 FLOPs):

- Conv: 2 * out_elements * (C_in / group) * prod(kernel), plus out_elements if it has a bias.
  ConvTranspose: 2 * in_elements * (C_out / group) * prod(kernel), plus the bias.
- Gemm: 2 * M * N * K, plus M * N when C is given. MatMul (and FusedMatMul): 2 * batch * M * N * K
  with numpy broadcasting of the leading dimensions.
- Elementwise arithmetic and activations (Add, Mul, Relu, Sigmoid, Erf, Gelu, Clip, ...):
  1 per output element, transcendental functions included (a count, not a cycle estimate).
- MaxPool / AveragePool: out_elements * prod(kernel); Global*Pool and Reduce*: in_elements.
- BatchNormalization (inference): 2 per element (scale and shift);
  LayerNormalization / InstanceNormalization / SkipLayerNormalization: 5 per element
  (mean, variance, normalize, scale, shift; the skip add adds 1).
- Softmax / LogSoftmax: 3 per element (exp, sum, divide).
- ORT's fused ops: FusedConv = Conv + 1 per output element for its activation; FusedGemm likewise.

Counted as 0 FLOPs (they move or index data; their bytes still count): Reshape, Transpose,
Flatten, Squeeze, Unsqueeze, Concat, Split, Slice, Gather, Pad, Expand, Tile, Cast, Identity,
Shape, Constant, Dropout, ReorderInput/ReorderOutput and every op not listed above.

Bytes: ``bytes_read`` is every input tensor (activations and parameters) at its dtype's size,
``bytes_written`` every output; ``params_bytes`` the inputs that are initializers. A dimension
that stays unknown counts as 0 elements, so a cost is a lower estimate rather than a guess.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Shape = tuple[int, ...]
"""A tensor shape; -1 marks a dimension shape inference left unknown."""

ELEMENTWISE = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Neg", "Abs",
        "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid",
        "HardSwish", "Tanh", "Erf", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Softplus",
        "Softsign", "Clip", "Min", "Max", "Sum", "Mean", "Mish", "Sin", "Cos", "Floor", "Ceil",
        "Round", "Sign", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
        "Not", "And", "Or", "Xor", "BitShift", "Mod", "ThresholdedRelu", "Swish", "BiasAdd",
        "Add_Relu",
    }
)  # fmt: skip
"""Ops costing 1 FLOP per output element."""
REDUCE = frozenset(
    {
        "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "ReduceMean", "ReduceSum",
        "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
        "ReduceLogSumExp", "ArgMax", "ArgMin",
    }
)  # fmt: skip
"""Ops costing 1 FLOP per input element."""
NORMALIZATION = {
    "BatchNormalization": 2,
    "LayerNormalization": 5,
    "SimplifiedLayerNormalization": 4,
    "InstanceNormalization": 5,
    "GroupNormalization": 5,
    "SkipLayerNormalization": 6,
    "SkipSimplifiedLayerNormalization": 5,
    "Softmax": 3,
    "LogSoftmax": 3,
}
"""FLOPs per output element."""


@dataclass(frozen=True)
class LayerCost:
    """One ONNX node's work: what Benanza bounds and what DLBricks deduplicates by."""

    name: str
    op_type: str
    flops: int
    bytes_read: int
    bytes_written: int
    params_bytes: int
    input_shapes: tuple[Shape | None, ...]
    output_shapes: tuple[Shape | None, ...]
    input_dtypes: tuple[str | None, ...]
    output_dtypes: tuple[str | None, ...]
    attributes: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    domain: str = ""
    signature: str = ""

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte moved (0 when nothing moves)."""
        return self.flops / self.bytes_total if self.bytes_total else 0.0


def load_model(model: Any) -> Any:
    """An ``onnx.ModelProto`` from a proto, a path or a path string (a clear error otherwise)."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"model: no ONNX file at {path}")
        return onnx.load(str(path))
    raise TypeError(f"model: expected an onnx.ModelProto or a path, got {type(model).__name__}")


def with_batch_size(model: Any, batch_size: int) -> Any:
    """A copy of ``model`` whose graph inputs have ``batch_size`` as their first dimension.

    A symbolic (or 0) first dimension is replaced. A fixed one is kept when ``batch_size`` is
    1 (the default: "the model's own batch"); a larger ``batch_size`` that differs from it is
    an error, since the model was exported for another batch size.
    """
    import onnx

    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    initializers = {init.name for init in out.graph.initializer}
    for value in out.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if not dims:
            continue
        first = dims[0]
        if first.HasField("dim_value") and first.dim_value > 0:
            if batch_size != 1 and first.dim_value != batch_size:
                raise ValueError(
                    f"batch_size: input {value.name!r} has a fixed batch of {first.dim_value}; "
                    f"pass batch_size={first.dim_value} or export the model with a dynamic batch"
                )
            continue
        first.Clear()
        first.dim_value = batch_size
    # drop stale intermediate shapes, so inference recomputes them for this batch size
    del out.graph.value_info[:]
    return out


def _tensor_info(value: Any) -> tuple[Shape | None, str | None]:
    import onnx

    if not value.type.HasField("tensor_type"):
        return None, None
    tensor = value.type.tensor_type
    dtype = (
        onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else None
    )
    if not tensor.HasField("shape"):
        return None, dtype
    dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
    return dims, dtype


def value_types(model: Any) -> dict[str, tuple[Shape | None, str | None]]:
    """Every typed value of an (inferred) model: name -> (shape, numpy dtype name)."""
    import onnx

    found: dict[str, tuple[Shape | None, str | None]] = {}
    graph = model.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        shape, dtype = _tensor_info(value)
        if shape is not None or value.name not in found:
            found[value.name] = (shape, dtype)
    for init in graph.initializer:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type).name
        found[init.name] = (tuple(int(d) for d in init.dims), dtype)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    dtype = onnx.helper.tensor_dtype_to_np_dtype(attr.t.data_type).name
                    found[node.output[0]] = (tuple(int(d) for d in attr.t.dims), dtype)
    return found


def infer(model: Any, batch_size: int = 1) -> Any:
    """``model`` with its batch size set and ONNX shape inference applied (data propagation on,
    so Reshape targets computed from Shape ops resolve)."""
    import onnx

    fixed = with_batch_size(model, batch_size)
    try:
        return onnx.shape_inference.infer_shapes(fixed, data_prop=True)
    except Exception:  # inference may reject contrib ops; keep what it could not type unknown
        return fixed


def shapes_by_execution(
    model: Any, batch_size: int = 1, seed: int = 0
) -> dict[str, tuple[Shape, str]]:
    """Every node output's shape and dtype, recorded by running the model once in ONNX Runtime
    with random inputs and every value exposed as an output (optimizations off, so the graph
    runs as given). For graphs ONNX inference cannot type, e.g. ORT's optimized ones."""
    import onnx
    import onnxruntime as ort

    fixed = with_batch_size(model, batch_size)
    known = {v.name for v in fixed.graph.output}
    for node in fixed.graph.node:
        for name in node.output:
            if name and name not in known:
                fixed.graph.output.append(onnx.ValueInfoProto(name=name))
                known.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        fixed.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = random_feeds(session.get_inputs(), batch_size, seed)
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, feeds)
    return {
        n: (tuple(int(d) for d in v.shape), v.dtype.name)
        for n, v in zip(names, values, strict=True)
    }


ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def random_feeds(inputs: Sequence[Any], batch_size: int = 1, seed: int = 0) -> dict[str, Any]:
    """Random feeds for ORT ``NodeArg``s: floats in [0, 1), integers in [0, 2) (valid ids and
    masks for token inputs); a symbolic first dimension becomes ``batch_size``, others 1."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    for arg in inputs:
        dims = [d if isinstance(d, int) and d > 0 else None for d in arg.shape]
        shape = [d if d is not None else (batch_size if i == 0 else 1) for i, d in enumerate(dims)]
        dtype = ORT_TYPES.get(arg.type)
        if dtype is None:
            raise ValueError(f"input {arg.name!r}: unsupported type {arg.type}")
        if np.issubdtype(dtype, np.floating):
            feeds[arg.name] = rng.random(shape, dtype=np.float32).astype(dtype)
        else:
            feeds[arg.name] = rng.integers(0, 2, size=shape).astype(dtype)
    return feeds


def _attribute(attr: Any) -> Any:
    """An attribute as plain JSON-able Python (tensors as shape, dtype and a content digest)."""
    import onnx

    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, onnx.TensorProto):
        raw = onnx.numpy_helper.to_array(value)
        digest = hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()[:12]
        return {"tensor": list(raw.shape), "dtype": raw.dtype.name, "sha256": digest}
    if isinstance(value, onnx.GraphProto):
        return {"graph": value.name}
    if isinstance(value, list):
        return [v.decode(errors="replace") if isinstance(v, bytes) else v for v in value]
    if isinstance(value, float):
        return round(value, 9)
    return value


def _numel(shape: Shape | None) -> int:
    if shape is None or any(d < 0 for d in shape):
        return 0
    return math.prod(shape)


def _itemsize(dtype: str | None) -> int:
    if dtype is None:
        return 0
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        return 2 if "16" in dtype else 4  # bfloat16 and friends numpy lacks


def signature(
    op_type: str,
    domain: str,
    input_shapes: Sequence[Shape | None],
    input_dtypes: Sequence[str | None],
    attributes: Mapping[str, Any],
) -> str:
    """The DLBricks dedup key: two nodes with equal signatures run the same kernel on the same
    shapes, so one benchmark stands for both. Readable, stable across runs and processes."""
    ins = ",".join(
        f"{dt or '?'}[{'x'.join(str(d) for d in s) if s is not None else '?'}]"
        for s, dt in zip(input_shapes, input_dtypes, strict=True)
    )
    attrs = json.dumps(dict(attributes), sort_keys=True, separators=(",", ":"))
    op = f"{domain}.{op_type}" if domain not in ("", "ai.onnx") else op_type
    return f"{op}({ins}){attrs}"


def _conv_flops(ins: Sequence[Shape | None], out: Shape | None, attrs: Mapping[str, Any]) -> int:
    weight = ins[1] if len(ins) > 1 else None
    if weight is None or out is None or any(d < 0 for d in weight):
        return 0
    macs = _numel(out) * math.prod(weight[1:])  # weight: [C_out, C_in / group, *kernel]
    bias = _numel(out) if len(ins) > 2 and ins[2] is not None else 0
    return 2 * macs + bias


def _conv_transpose_flops(
    ins: Sequence[Shape | None], out: Shape | None, attrs: Mapping[str, Any]
) -> int:
    x, weight = ins[0], ins[1] if len(ins) > 1 else None
    if x is None or weight is None or any(d < 0 for d in weight):
        return 0
    # weight: [C_in, C_out / group, *kernel]; each input element feeds C_out/group * kernel MACs
    macs = _numel(x) * weight[1] * math.prod(weight[2:])
    bias = _numel(out) if len(ins) > 2 and ins[2] is not None else 0
    return 2 * macs + bias


def _matmul_flops(a: Shape | None, b: Shape | None, out: Shape | None) -> int:
    if a is None or b is None or not a or not b:
        return 0
    k = a[-1]
    n = b[-1] if len(b) > 1 else 1
    rows = _numel(out) // n if out is not None and n > 0 else 0
    if k < 0 or n < 0:
        return 0
    return 2 * rows * k * n


def _gemm_flops(ins: Sequence[Shape | None], attrs: Mapping[str, Any]) -> int:
    a, b = ins[0], ins[1] if len(ins) > 1 else None
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return 0
    m, k = (a[1], a[0]) if attrs.get("transA", 0) else (a[0], a[1])
    n = b[0] if attrs.get("transB", 0) else b[1]
    if min(m, k, n) < 0:
        return 0
    bias = m * n if len(ins) > 2 and ins[2] is not None else 0
    return 2 * m * n * k + bias


def _pool_flops(out: Shape | None, attrs: Mapping[str, Any]) -> int:
    kernel = attrs.get("kernel_shape") or [1]
    return _numel(out) * math.prod(int(k) for k in kernel)


def node_flops(
    op_type: str,
    ins: Sequence[Shape | None],
    outs: Sequence[Shape | None],
    attrs: Mapping[str, Any],
) -> int:
    """FLOPs of one node from its shapes (the rules in the module docstring)."""
    out = outs[0] if outs else None
    if op_type in ("Conv", "FusedConv"):
        extra = _numel(out) if op_type == "FusedConv" and attrs.get("activation") else 0
        return _conv_flops(ins, out, attrs) + extra
    if op_type == "ConvTranspose":
        return _conv_transpose_flops(ins, out, attrs)
    if op_type in ("Gemm", "FusedGemm"):
        extra = _numel(out) if op_type == "FusedGemm" and attrs.get("activation") else 0
        return _gemm_flops(ins, attrs) + extra
    if op_type in ("MatMul", "FusedMatMul", "MatMulInteger"):
        return _matmul_flops(ins[0], ins[1] if len(ins) > 1 else None, out)
    if op_type in ("MaxPool", "AveragePool", "LpPool"):
        return _pool_flops(out, attrs)
    if op_type in REDUCE:
        return _numel(ins[0] if ins else None)
    if op_type in NORMALIZATION:
        return NORMALIZATION[op_type] * _numel(out)
    if op_type in ELEMENTWISE:
        return _numel(out)
    return 0


def _unique_names(nodes: Sequence[Any]) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for index, node in enumerate(nodes):
        base = node.name or f"{node.op_type}_{index}"
        count = seen.get(base, 0)
        seen[base] = count + 1
        names.append(base if count == 0 else f"{base}__{count}")
    return names


def _untyped(model: Any, types: Mapping[str, tuple[Shape | None, str | None]]) -> bool:
    """Whether inference left a node's input or output without a full shape (a dimension it
    could not resolve, e.g. a batch it lost on the way): then the shapes come from running
    the model once (:func:`shapes_by_execution`)."""
    initializers = {init.name for init in model.graph.initializer}
    for node in model.graph.node:
        for name in (*node.input, *node.output):
            if not name or name in initializers:
                continue
            shape, _ = types.get(name, (None, None))
            if shape is None or any(d < 0 for d in shape):
                return True
    return False


def layer_costs(
    model: Any,
    batch_size: int = 1,
    shapes: Mapping[str, tuple[Shape | None, str | None]] | None = None,
) -> list[LayerCost]:
    """One ``LayerCost`` per node of ``model`` (an ``onnx.ModelProto`` or a path), in graph
    order, at ``batch_size``. ``shapes`` overrides or fills in value types (see the module
    docstring); node names are the ONNX names, made unique (``op_index`` when empty)."""
    loaded = load_model(model)
    inferred = infer(loaded, batch_size)
    types = value_types(inferred)
    if shapes is None and _untyped(inferred, types):
        try:
            shapes = shapes_by_execution(loaded, batch_size)
        except Exception:  # a graph ONNX Runtime cannot run keeps what inference typed
            shapes = None
    if shapes:
        types.update(shapes)
    initializers = {init.name for init in inferred.graph.initializer}
    costs = []
    nodes = list(inferred.graph.node)
    for name, node in zip(_unique_names(nodes), nodes, strict=True):
        ins = [types.get(i, (None, None)) if i else (None, None) for i in node.input]
        outs = [types.get(o, (None, None)) if o else (None, None) for o in node.output]
        in_shapes = tuple(s for s, _ in ins)
        out_shapes = tuple(s for s, _ in outs)
        in_dtypes = tuple(d for _, d in ins)
        out_dtypes = tuple(d for _, d in outs)
        attrs = {a.name: _attribute(a) for a in node.attribute}
        sizes_in = [_numel(s) * _itemsize(d) for s, d in ins]
        params = sum(
            size for size, i in zip(sizes_in, node.input, strict=True) if i in initializers
        )
        costs.append(
            LayerCost(
                name=name,
                op_type=node.op_type,
                flops=node_flops(node.op_type, in_shapes, out_shapes, attrs),
                bytes_read=sum(sizes_in),
                bytes_written=sum(_numel(s) * _itemsize(d) for s, d in outs),
                params_bytes=params,
                input_shapes=in_shapes,
                output_shapes=out_shapes,
                input_dtypes=in_dtypes,
                output_dtypes=out_dtypes,
                attributes=attrs,
                inputs=tuple(node.input),
                outputs=tuple(node.output),
                domain=node.domain,
                signature=signature(node.op_type, node.domain, in_shapes, in_dtypes, attrs),
            )
        )
    return costs


def total_flops(costs: Sequence[LayerCost]) -> int:
    return sum(c.flops for c in costs)
