"""ONNX nodes as PyTorch and TensorFlow calls: a DLBricks brick runnable in every framework.

A node is lowered from its op type, attributes and operands (each with the value one recorded
run gave it, so shapes are known): a function from an environment (value name -> tensor) to its
output tensor (a tuple of them for Split). Constant operands (initializers, ``Constant``
outputs) are converted once, at lowering, as a framework model holds its weights; the others
are read from the environment. Shape operands (Reshape's shape, Slice's starts, ends, axes and
steps, Squeeze's and Unsqueeze's axes, Split's sizes) are read from the recorded run and fixed
at lowering, as a traced framework graph holds them.

PyTorch runs NCHW, as exported. TensorFlow's CPU convolutions and pools want NHWC, so a graph
with convolutions or pools runs channels-last in TensorFlow (``channels_last``): 4-D values are
NHWC, 4-D constants and channel axes are converted to match, as Keras lays a CNN out. A node
that cannot be lowered with ONNX's semantics lowers to a string saying why: that framework
does not time the layer, and the report names the op and the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from mlmodelscope.tensorflow_import import before_tensorflow

REVISION: Final = 2
"""The lowering's revision, part of the stack a PyTorch or TensorFlow brick timing is stored
under (:func:`.implementations.implementation_stack`): raised whenever a lowering computes
differently, so timings of an earlier lowering are measured again rather than reused."""

Env = Mapping[str, Any]
NodeFn = Callable[[Env], Any]
Getter = Callable[[Env], Any]

SPATIAL = frozenset({"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
ELEMENTWISE_BINARY = ("Add", "Sub", "Mul", "Div")
UNARY = ("Relu", "Sigmoid", "Tanh", "Erf", "Identity")
NCHW_TO_NHWC = (0, 2, 3, 1)
"""Where each NHWC axis comes from in NCHW."""
CAST_TYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64")
"""What Cast lowers to: the NumPy types PyTorch and TensorFlow both hold."""
NOT_NHWC = "a 4-D value is NHWC in TensorFlow here; {op} would need its NCHW meaning"


@dataclass(frozen=True)
class Operand:
    name: str
    value: np.ndarray
    constant: bool
    """An initializer or a ``Constant`` output: converted at lowering, not read at run time."""


def channels_last(op_types: Sequence[str]) -> bool:
    """Whether TensorFlow runs this graph NHWC: it has a convolution or a pool."""
    return any(op in SPATIAL for op in op_types)


def reshape_target(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """ONNX Reshape's output shape (0 copies the input's dimension, one -1 is inferred)."""
    dims = [int(shape[i]) if int(d) == 0 else int(d) for i, d in enumerate(target)]
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(shape) // max(known, 1)
    return tuple(dims)


def onnx_slices(
    shape: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
) -> tuple[slice, ...]:
    """ONNX Slice as Python slices: negative starts and ends count from the end and both are
    clamped to the dimension (an end such as INT64_MAX means "to the end"), as the spec says."""
    rank = len(shape)
    out = [slice(None)] * rank
    axes = list(axes) if axes is not None else list(range(len(starts)))
    steps = list(steps) if steps is not None else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = _axis(axis, rank)
        dim = int(shape[axis])
        start, end = start + dim if start < 0 else start, end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        out[axis] = slice(start, end if end >= 0 else None, step)  # -1: past index 0
    return tuple(out)


def unsqueezed(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    """ONNX Unsqueeze's output shape: a 1 at each of ``axes`` (of the output's rank)."""
    rank = len(shape) + len(axes)
    ones = {_axis(a, rank) for a in axes}
    dims = iter(shape)
    return tuple(1 if i in ones else int(next(dims)) for i in range(rank))


def squeezed(shape: Sequence[int], axes: Sequence[int] | None) -> tuple[int, ...]:
    """ONNX Squeeze's output shape: ``axes`` removed, or every 1 where none are given."""
    if axes:
        drop = {_axis(a, len(shape)) for a in axes}
    else:
        drop = {i for i, d in enumerate(shape) if d == 1}
    return tuple(int(d) for i, d in enumerate(shape) if i not in drop)


def split_sizes(dim: int, split: Sequence[int] | None, parts: int) -> list[int]:
    """ONNX Split's sizes: ``split`` where given, else ``parts`` equal ones (the last smaller
    where ``dim`` does not divide, as opset 18's ``num_outputs`` allows)."""
    if split:
        return [int(s) for s in split]
    chunk = -(-dim // parts)
    return [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]


def _axis(axis: int, rank: int) -> int:
    """An ONNX axis (negative counts from the end) as a non-negative one."""
    return int(axis) + rank if int(axis) < 0 else int(axis)


def _np_dtype(to: int) -> np.dtype[Any] | str:
    """ONNX TensorProto data type ``to`` as a NumPy dtype, or why Cast does not lower to it."""
    from onnx import TensorProto, helper

    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    if dtype.name not in CAST_TYPES:
        return f"Cast to {TensorProto.DataType.Name(to)}: lowered only to {', '.join(CAST_TYPES)}"
    return dtype


def _to_nhwc(value: np.ndarray, rank: int) -> np.ndarray:
    """A constant broadcast against a 4-D NCHW value, laid out for the NHWC one."""
    if value.ndim == 3 and rank == 4:
        value = value[None]
    return value.transpose(0, 2, 3, 1) if value.ndim == 4 else value


def _nhwc_axis(axis: int, four: bool) -> int:
    """A non-negative NCHW axis as the NHWC value's axis where ``four``."""
    return NCHW_TO_NHWC.index(axis) if four else axis


def _pads2d(attrs: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    """(top, left, bottom, right), or None when ``auto_pad`` asks for what is not spelled out."""
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    return (pads[0], pads[1], pads[2], pads[3]) if len(pads) == 4 else None


def _same_valid_or_pad(
    size: Sequence[int], span: Sequence[int], strides: Sequence[int], pads: Sequence[int]
) -> tuple[str, list[list[int]] | None]:
    """TensorFlow's padding for an NHWC window op with ONNX ``pads``: "SAME" where TensorFlow's
    SAME pads exactly ``pads`` (it puts an odd pixel after), "VALID" where nothing is padded,
    else "VALID" after an explicit pad."""
    if _tf_same_pads(size, span, strides) == (pads[0], pads[2], pads[1], pads[3]):
        return "SAME", None
    if not any(pads):
        return "VALID", None
    return "VALID", [[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]]


def _tf_same_pads(
    size: Sequence[int], span: Sequence[int], strides: Sequence[int]
) -> tuple[int, ...]:
    """(top, bottom, left, right) that TensorFlow's SAME padding adds."""
    pads: list[int] = []
    for i in (0, 1):
        total = max((math.ceil(size[i] / strides[i]) - 1) * strides[i] + span[i] - size[i], 0)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


def _extra_outputs(op: str, outputs: int) -> str | None:
    """Why a node with ``outputs`` outputs does not lower (only Split's are all lowered)."""
    if outputs > 1 and op != "Split":
        return f"its {outputs - 1} optional extra output(s) are not lowered"
    return None


def _integer(operand: Operand) -> bool:
    return bool(np.issubdtype(np.asarray(operand.value).dtype, np.integer))


@dataclass(frozen=True)
class Node:
    """One node as the per-op lowerings read it."""

    op: str
    attrs: Mapping[str, Any]
    operands: Sequence[Operand]
    outputs: int = 1

    @property
    def shape(self) -> tuple[int, ...]:
        """The first input's recorded shape."""
        return tuple(int(d) for d in self.operands[0].value.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def present(self, i: int) -> bool:
        """Whether optional input ``i`` is given."""
        return len(self.operands) > i and bool(self.operands[i].name)

    def ints(self, i: int, key: str) -> list[int] | None:
        """Input ``i``'s recorded value as ints (opset 13 on), else attribute ``key`` (older
        opsets), else None."""
        if self.present(i):
            return [int(v) for v in np.asarray(self.operands[i].value).reshape(-1)]
        return [int(v) for v in self.attrs[key]] if key in self.attrs else None


def _layer_norm_reason(node: Node) -> str | None:
    """Why a LayerNormalization has no faithful lowering in either framework, or None."""
    if int(node.attrs.get("stash_type", 1)) != 1:
        return "stash_type other than 1 (float32 statistics)"
    normalized = node.shape[_axis(node.attrs.get("axis", -1), node.rank) :]
    for i, name in ((1, "Scale"), (2, "B")):
        if node.present(i) and tuple(node.operands[i].value.shape) != normalized:
            shape = list(node.operands[i].value.shape)
            return f"{name} of shape {shape}, not the normalized {list(normalized)}"
    return None


def _slice_index(node: Node) -> tuple[slice, ...]:
    """Slice's inputs (opset 10 on) or attributes (older) as Python slices."""
    starts, ends = node.ints(1, "starts") or [], node.ints(2, "ends") or []
    return onnx_slices(node.shape, starts, ends, node.ints(3, "axes"), node.ints(4, "steps"))


def _split(node: Node) -> tuple[int, list[int]]:
    """Split's axis and sizes (``split``, else ``num_outputs`` or one part per output)."""
    axis = _axis(node.attrs.get("axis", 0), node.rank)
    parts = int(node.attrs.get("num_outputs", node.outputs))
    return axis, split_sizes(node.shape[axis], node.ints(1, "split"), parts)


# ------------------------------------------------------------------------------ PyTorch


def torch_node(
    op: str, attrs: Mapping[str, Any], operands: Sequence[Operand], outputs: int = 1
) -> NodeFn | str:
    """``op`` as a PyTorch eager call, or why it has no faithful lowering here."""
    import torch

    consts = {o.name: torch.from_numpy(np.array(o.value)) for o in operands if o.constant}

    def get(i: int) -> Getter:
        name = operands[i].name
        if name in consts:
            tensor = consts[name]
            return lambda env: tensor
        return lambda env: env[name]

    args = [get(i) for i in range(len(operands))]
    extra = _extra_outputs(op, outputs)
    if extra:
        return extra
    if op in TORCH_OPS:
        return TORCH_OPS[op](Node(op, attrs, operands, outputs), args)
    return _torch_dense(op, attrs, operands, args)


def _torch_dense(
    op: str, attrs: Mapping[str, Any], operands: Sequence[Operand], args: Sequence[Getter]
) -> NodeFn | str:
    """The compute ops (convolutions, pools, matrix products, elementwise, normalization)."""
    import torch
    from torch.nn import functional

    shape = operands[0].value.shape if operands else ()
    a: Getter
    b: Getter
    c: Getter
    fn: Callable[..., Any]
    target: tuple[int, ...]
    if op in ("Conv", "MaxPool", "AveragePool"):
        pads = _pads2d(attrs)
        default = operands[1].value.shape[2:] if op == "Conv" else ()
        kernel = list(attrs.get("kernel_shape") or default)
        if len(kernel) != 2 or len(shape) != 4:
            return "only 2-D windows are lowered"
        if pads is None:
            return f"auto_pad {attrs.get('auto_pad')}: its pads are not spelled out"
        if pads[:2] != pads[2:]:
            return f"asymmetric pads {list(pads)}: PyTorch pads both sides alike"
        stride = tuple(attrs.get("strides") or (1, 1))
        padding = pads[:2]
        if op == "Conv":
            dilation = tuple(attrs.get("dilations") or (1, 1))
            group = int(attrs.get("group", 1))
            x, w = args[0], args[1]
            c = args[2] if len(args) > 2 else (lambda env: None)
            return lambda env: functional.conv2d(
                x(env), w(env), c(env), stride, padding, dilation, group
            )
        ceil = bool(attrs.get("ceil_mode", 0))
        x = args[0]
        if op == "MaxPool":
            return lambda env: functional.max_pool2d(
                x(env), kernel, stride, padding, ceil_mode=ceil
            )
        include = bool(attrs.get("count_include_pad", 0))
        return lambda env: functional.avg_pool2d(x(env), kernel, stride, padding, ceil, include)
    if op == "GlobalAveragePool":
        x = args[0]
        return lambda env: torch.mean(x(env), (2, 3), keepdim=True)
    if op == "Gemm":
        if (
            attrs.get("transA", 0)
            or attrs.get("alpha", 1.0) != 1.0
            or attrs.get("beta", 1.0) != 1.0
        ):
            return "transA, alpha or beta other than the defaults"
        if not (operands[1].constant and attrs.get("transB", 0)):
            a, b = args[0], args[1]
            c = args[2] if len(args) > 2 else (lambda env: 0)
            trans = bool(attrs.get("transB", 0))
            return lambda env: (a(env) @ (b(env).T if trans else b(env))) + c(env)
        a, w = args[0], args[1]
        bias = args[2] if len(args) > 2 else (lambda env: None)
        return lambda env: functional.linear(a(env), w(env), bias(env))
    if op == "MatMul":
        a, b = args[0], args[1]
        return lambda env: torch.matmul(a(env), b(env))
    if op in ELEMENTWISE_BINARY:
        a, b = args[0], args[1]
        if op == "Div" and _integer(operands[0]):  # ONNX (and ORT) truncate integer quotients
            return lambda env: torch.div(a(env), b(env), rounding_mode="trunc")
        fn = getattr(torch, {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}[op])
        return lambda env: fn(a(env), b(env))
    if op in UNARY:
        if op == "Identity":
            return args[0]
        unary = getattr(torch, op.lower())  # relu, sigmoid, tanh, erf
        x = args[0]
        return lambda env: unary(x(env))
    if op == "Clip":
        x = args[0]
        lo = args[1] if len(args) > 1 and operands[1].name else (lambda env: attrs.get("min"))
        hi = args[2] if len(args) > 2 and operands[2].name else (lambda env: attrs.get("max"))
        return lambda env: torch.clamp(x(env), lo(env), hi(env))
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        target = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        x = args[0]
        return lambda env: x(env).reshape(target)
    if op == "Reshape":
        if attrs.get("allowzero", 0) and 0 in operands[1].value:
            return "allowzero with a 0 in the shape: an empty dimension, not a copied one"
        target = reshape_target(shape, [int(d) for d in operands[1].value])
        x = args[0]
        return lambda env: x(env).reshape(target)
    if op == "Transpose":
        perm = tuple(attrs.get("perm") or reversed(range(len(shape))))
        x = args[0]
        return lambda env: x(env).permute(perm).contiguous()  # ONNX materializes it
    if op == "Softmax":
        axis = int(attrs.get("axis", -1))
        x = args[0]
        return lambda env: torch.softmax(x(env), axis)
    if op == "BatchNormalization":
        eps = float(attrs.get("epsilon", 1e-5))
        x, scale, bias, mean, var = args[:5]
        return lambda env: functional.batch_norm(
            x(env), mean(env), var(env), scale(env), bias(env), False, 0.0, eps
        )
    return f"no lowering for {op}"


def _torch_layer_norm(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    """``functional.layer_norm`` over the dimensions from ``axis`` on."""
    from torch.nn import functional

    reason = _layer_norm_reason(node)
    if reason:
        return reason
    normalized = tuple(int(d) for d in node.shape[_axis(node.attrs.get("axis", -1), node.rank) :])
    eps = float(node.attrs.get("epsilon", 1e-5))
    x, scale = args[0], args[1]
    bias = args[2] if node.present(2) else (lambda env: None)
    return lambda env: functional.layer_norm(x(env), normalized, scale(env), bias(env), eps)


def _torch_gather(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    """Indexing with the indices tensor on ``axis`` (negative indices count from the end)."""
    lead = (slice(None),) * _axis(node.attrs.get("axis", 0), node.rank)
    data, indices = args[0], args[1]
    return lambda env: data(env)[(*lead, indices(env))]


def _torch_concat(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    import torch

    axis = int(node.attrs["axis"])
    return lambda env: torch.cat([a(env) for a in args], axis)


def _torch_shape(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    """The input's shape as an int64 tensor (``start``, ``end`` as Python slicing clamps)."""
    import torch

    part = slice(node.attrs.get("start", 0), node.attrs.get("end"))
    x = args[0]
    return lambda env: torch.tensor(x(env).shape[part], dtype=torch.int64)


def _torch_cast(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    import torch

    dtype = _np_dtype(int(node.attrs["to"]))
    if isinstance(dtype, str):
        return dtype
    target = torch.from_numpy(np.zeros(0, dtype)).dtype
    x = args[0]
    return lambda env: x(env).to(target)


def _torch_reshape_to(target: tuple[int, ...], args: Sequence[Getter]) -> NodeFn:
    x = args[0]
    return lambda env: x(env).reshape(target)


def _torch_squeeze(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    return _torch_reshape_to(squeezed(node.shape, node.ints(1, "axes")), args)


def _torch_unsqueeze(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    return _torch_reshape_to(unsqueezed(node.shape, node.ints(1, "axes") or []), args)


def _torch_slice(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    """Python slicing (a view, as in an eager model); PyTorch has no negative steps."""
    index = _slice_index(node)
    if any((s.step or 1) < 0 for s in index):
        return "a negative step: PyTorch slicing has none (torch.flip would add a copy)"
    x = args[0]
    return lambda env: x(env)[index]


def _torch_split(node: Node, args: Sequence[Getter]) -> NodeFn | str:
    """``torch.split``: a tuple of views, one per output."""
    import torch

    axis, sizes = _split(node)
    x = args[0]
    return lambda env: torch.split(x(env), sizes, axis)


TORCH_OPS: dict[str, Callable[[Node, Sequence[Getter]], NodeFn | str]] = {
    "LayerNormalization": _torch_layer_norm,
    "Gather": _torch_gather,
    "Concat": _torch_concat,
    "Shape": _torch_shape,
    "Cast": _torch_cast,
    "Squeeze": _torch_squeeze,
    "Unsqueeze": _torch_unsqueeze,
    "Slice": _torch_slice,
    "Split": _torch_split,
}
"""The data-movement and normalization ops a transformer's graph adds, one function each."""


# ------------------------------------------------------------------------------ TensorFlow


def tf_node(
    op: str, attrs: Mapping[str, Any], operands: Sequence[Operand], nhwc: bool, outputs: int = 1
) -> NodeFn | str:
    """``op`` as TensorFlow calls (to run inside a ``tf.function``), NHWC where ``nhwc``; or
    why it has no faithful lowering here."""
    before_tensorflow()
    import tensorflow as tf

    shape = tuple(operands[0].value.shape) if operands else ()
    rank = len(shape)

    def get(i: int) -> Getter:
        o = operands[i]
        if o.constant:
            tensor = tf.constant(_to_nhwc(o.value, rank) if nhwc else o.value)
            return lambda env: tensor
        name = o.name
        return lambda env: env[name]

    args = [get(i) for i in range(len(operands))]
    extra = _extra_outputs(op, outputs)
    if extra:
        return extra
    if op in TF_OPS:
        return TF_OPS[op](Node(op, attrs, operands, outputs), args, nhwc)
    return _tf_dense(op, attrs, operands, args, nhwc)


def _tf_dense(
    op: str,
    attrs: Mapping[str, Any],
    operands: Sequence[Operand],
    args: Sequence[Getter],
    nhwc: bool,
) -> NodeFn | str:
    """The compute ops (convolutions, pools, matrix products, elementwise, normalization)."""
    before_tensorflow()
    import tensorflow as tf

    shape = tuple(operands[0].value.shape) if operands else ()
    rank = len(shape)
    four = nhwc and rank == 4
    axis_map = {0: 0, 1: 3, 2: 1, 3: 2}
    b: Getter
    c: Getter
    fn: Callable[..., Any]
    if op == "Conv":
        pads = _pads2d(attrs)
        w = operands[1].value
        if not four or w.ndim != 4:
            return "only 2-D convolutions are lowered"
        if pads is None:
            return f"auto_pad {attrs.get('auto_pad')}: its pads are not spelled out"
        if not operands[1].constant:
            return "weights computed at run time: TensorFlow's kernel layout is set at lowering"
        top, left, bottom, right = pads
        padding: Any = "VALID" if not any(pads) else [[0, 0], [top, bottom], [left, right], [0, 0]]
        strides = [1, *(attrs.get("strides") or (1, 1)), 1]
        dilations = list(attrs.get("dilations") or (1, 1))
        group = int(attrs.get("group", 1))
        x = args[0]
        if group == 1:
            kernel = tf.constant(w.transpose(2, 3, 1, 0))  # OIHW -> HWIO
            op_fn = tf.nn.conv2d
        elif group == shape[1] and w.shape[1] == 1:  # depthwise, channel multiplier ``mult``
            mult = w.shape[0] // group
            kernel = tf.constant(w.reshape(group, mult, *w.shape[2:]).transpose(2, 3, 0, 1))
            op_fn = tf.nn.depthwise_conv2d
            # grappler aborts the process on explicit paddings here: SAME, VALID or a Pad
            span = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], dilations, strict=True)]
            padding, pad_first = _same_valid_or_pad(shape[2:], span, strides[1:3], pads)
            if pad_first is not None:
                inner = x
                x = lambda env: tf.pad(inner(env), pad_first)  # noqa: E731
        else:
            return f"group {group}, not depthwise: TensorFlow's conv2d on CPU has no groups"

        def conv(env: Env) -> Any:
            return op_fn(x(env), kernel, strides, padding, dilations=dilations)

        if len(operands) < 3:
            return conv
        bias = tf.constant(operands[2].value)
        return lambda env: tf.nn.bias_add(conv(env), bias)
    if op in ("MaxPool", "AveragePool"):
        pads = _pads2d(attrs)
        kernel = list(attrs.get("kernel_shape") or [])
        if not four or len(kernel) != 2:
            return "only 2-D windows are lowered"
        if pads is None:
            return f"auto_pad {attrs.get('auto_pad')}: its pads are not spelled out"
        if attrs.get("ceil_mode", 0):
            return "ceil_mode: TensorFlow's pools round output sizes down"
        strides = list(attrs.get("strides") or (1, 1))
        pool = tf.nn.max_pool2d if op == "MaxPool" else tf.nn.avg_pool2d
        x = args[0]
        mode, paddings = _same_valid_or_pad(shape[2:], kernel, strides, pads)
        include = op == "AveragePool" and bool(attrs.get("count_include_pad", 0))
        if include and mode == "SAME":  # TensorFlow's SAME averages leave the padding out
            mode, paddings = "VALID", [[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]]
        elif op == "AveragePool" and not include and paddings is not None:
            return "pads TensorFlow's SAME does not give, left out of averages (zeros would count)"
        if paddings is None:
            return lambda env: pool(x(env), kernel, strides, mode)
        fill = float("-inf") if op == "MaxPool" else 0.0
        return lambda env: pool(
            tf.pad(x(env), paddings, constant_values=fill), kernel, strides, "VALID"
        )
    if op == "GlobalAveragePool":
        axes = [1, 2] if four else [2, 3]
        x = args[0]
        return lambda env: tf.reduce_mean(x(env), axes, keepdims=True)
    if op == "Gemm":
        if (
            attrs.get("transA", 0)
            or attrs.get("alpha", 1.0) != 1.0
            or attrs.get("beta", 1.0) != 1.0
        ):
            return "transA, alpha or beta other than the defaults"
        a = args[0]
        trans = bool(attrs.get("transB", 0))
        b = args[1]
        if operands[1].constant and trans:
            weight = tf.constant(operands[1].value.T)  # as a Keras Dense layer holds it
            b, trans = (lambda env: weight), False
        if len(operands) > 2 and operands[2].value.ndim == 1:
            c = args[2]
            return lambda env: tf.nn.bias_add(
                tf.linalg.matmul(a(env), b(env), transpose_b=trans), c(env)
            )
        c = args[2] if len(operands) > 2 else (lambda env: 0.0)
        return lambda env: tf.linalg.matmul(a(env), b(env), transpose_b=trans) + c(env)
    if op == "MatMul":
        if four or (nhwc and operands[1].value.ndim == 4):
            return NOT_NHWC.format(op=op)
        a, b = args[0], args[1]
        return lambda env: tf.linalg.matmul(a(env), b(env))
    if op in ELEMENTWISE_BINARY:
        if nhwc and any(o.value.ndim == 4 for o in operands):
            # a constant beside a 4-D value follows its layout
            args = [
                _tf_constant_as(o, 4) if o.constant else args[i] for i, o in enumerate(operands)
            ]
        a, b = args[0], args[1]
        if op == "Div" and _integer(operands[0]):  # ONNX (and ORT) truncate integer quotients
            return lambda env: tf.truncatediv(a(env), b(env))
        fn = {"Add": tf.add, "Sub": tf.subtract, "Mul": tf.multiply, "Div": tf.divide}[op]
        return lambda env: fn(a(env), b(env))
    if op in UNARY:
        unary = {"Relu": tf.nn.relu, "Sigmoid": tf.sigmoid, "Tanh": tf.tanh,
                 "Erf": tf.math.erf, "Identity": tf.identity}[op]  # fmt: skip
        x = args[0]
        return lambda env: unary(x(env))
    if op == "Clip":
        x = args[0]
        lo = (
            args[1]
            if len(args) > 1 and operands[1].name
            else (lambda env: attrs.get("min", -np.inf))
        )
        hi = (
            args[2]
            if len(args) > 2 and operands[2].name
            else (lambda env: attrs.get("max", np.inf))
        )
        return lambda env: tf.clip_by_value(x(env), lo(env), hi(env))
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        target = [math.prod(shape[:axis]), math.prod(shape[axis:])]
        x = args[0]
        return lambda env: tf.reshape(x(env), target)
    if op == "Reshape":
        if attrs.get("allowzero", 0) and 0 in operands[1].value:
            return "allowzero with a 0 in the shape: an empty dimension, not a copied one"
        target = list(reshape_target(shape, [int(d) for d in operands[1].value]))
        if nhwc and len(target) == 4 and list(target) != list(shape):
            return NOT_NHWC.format(op=op)
        x = args[0]
        return lambda env: tf.reshape(x(env), target)
    if op == "Transpose":
        if four:
            return NOT_NHWC.format(op=op)
        perm = list(attrs.get("perm") or reversed(range(rank)))
        x = args[0]
        return lambda env: tf.transpose(x(env), perm)
    if op == "Softmax":
        axis = int(attrs.get("axis", -1)) % max(rank, 1)
        axis = axis_map[axis] if four else axis
        x = args[0]
        return lambda env: tf.nn.softmax(x(env), axis)
    if op == "BatchNormalization":
        if not (four or rank == 2):
            return "only 4-D (NHWC) and 2-D inputs are lowered"
        eps = float(attrs.get("epsilon", 1e-5))
        scale, bias, mean, var = (tf.constant(o.value) for o in operands[1:5])
        x = args[0]
        return lambda env: tf.nn.batch_normalization(x(env), mean, var, bias, scale, eps)
    return f"no lowering for {op}"


def _tf_constant_as(operand: Operand, rank: int) -> Getter:
    """A constant laid out to broadcast against an NHWC value of ``rank``."""
    before_tensorflow()
    import tensorflow as tf

    tensor = tf.constant(_to_nhwc(operand.value, rank))
    return lambda env: tensor


def _tf_layer_norm(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    """``tf.nn.moments`` then ``tf.nn.batch_normalization`` over the dimensions from ``axis``
    on: what Keras' LayerNormalization computes."""
    before_tensorflow()
    import tensorflow as tf

    reason = NOT_NHWC.format(op=node.op) if nhwc and node.rank == 4 else None
    reason = reason or _layer_norm_reason(node)
    if reason:
        return reason
    axes = list(range(_axis(node.attrs.get("axis", -1), node.rank), node.rank))
    eps = float(node.attrs.get("epsilon", 1e-5))
    x, scale = args[0], args[1]
    bias = args[2] if node.present(2) else (lambda env: None)

    def layer_norm(env: Env) -> Any:
        value = x(env)
        mean, variance = tf.nn.moments(value, axes, keepdims=True)
        return tf.nn.batch_normalization(value, mean, variance, bias(env), scale(env), eps)

    return layer_norm


def _tf_gather(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    """``tf.gather``; constant negative indices are wrapped at lowering, since TensorFlow
    range-checks indices on the CPU and rejects negative ones."""
    before_tensorflow()
    import tensorflow as tf

    indices = np.asarray(node.operands[1].value)
    axis = _axis(node.attrs.get("axis", 0), node.rank)
    four = nhwc and node.rank == 4 and indices.ndim == 1  # rank kept: axis maps to NHWC
    if nhwc and 4 in (node.rank, node.rank - 1 + indices.ndim) and not four:
        return NOT_NHWC.format(op=node.op)
    index = args[1]
    if node.operands[1].constant:
        tensor = tf.constant(np.where(indices < 0, indices + node.shape[axis], indices))
        index = lambda env: tensor  # noqa: E731
    elif (indices < 0).any():
        return "negative indices at run time: TensorFlow's gather rejects them on the CPU"
    x, axis = args[0], _nhwc_axis(axis, four)
    return lambda env: tf.gather(x(env), index(env), axis=axis)


def _tf_concat(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    before_tensorflow()
    import tensorflow as tf

    axis = _nhwc_axis(_axis(node.attrs["axis"], node.rank), nhwc and node.rank == 4)
    return lambda env: tf.concat([a(env) for a in args], axis)


def _tf_shape(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    before_tensorflow()
    import tensorflow as tf

    if nhwc and node.rank == 4:
        return NOT_NHWC.format(op=node.op)
    start, end = node.attrs.get("start", 0), node.attrs.get("end")
    x = args[0]
    if start == 0 and end is None:
        return lambda env: tf.shape(x(env), out_type=tf.int64)
    return lambda env: tf.shape(x(env), out_type=tf.int64)[start:end]


def _tf_cast(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    before_tensorflow()
    import tensorflow as tf

    dtype = _np_dtype(int(node.attrs["to"]))
    if isinstance(dtype, str):
        return dtype
    target = tf.as_dtype(dtype)
    x = args[0]
    return lambda env: tf.cast(x(env), target)


def _tf_reshape_to(
    target: tuple[int, ...], node: Node, args: Sequence[Getter], nhwc: bool
) -> NodeFn | str:
    """``tf.reshape`` to ``target``; not where a 4-D value (in or out) is NHWC."""
    before_tensorflow()
    import tensorflow as tf

    if nhwc and 4 in (node.rank, len(target)):
        return NOT_NHWC.format(op=node.op)
    x = args[0]
    return lambda env: tf.reshape(x(env), list(target))


def _tf_squeeze(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    return _tf_reshape_to(squeezed(node.shape, node.ints(1, "axes")), node, args, nhwc)


def _tf_unsqueeze(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    return _tf_reshape_to(unsqueezed(node.shape, node.ints(1, "axes") or []), node, args, nhwc)


def _tf_slice(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    """Python slicing (``tf.strided_slice``), negative steps included."""
    index = _slice_index(node)
    if nhwc and node.rank == 4:
        index = tuple(index[i] for i in NCHW_TO_NHWC)
    x = args[0]
    return lambda env: x(env)[index]


def _tf_split(node: Node, args: Sequence[Getter], nhwc: bool) -> NodeFn | str:
    before_tensorflow()
    import tensorflow as tf

    axis, sizes = _split(node)
    x, axis = args[0], _nhwc_axis(axis, nhwc and node.rank == 4)
    return lambda env: tuple(tf.split(x(env), sizes, axis))


TF_OPS: dict[str, Callable[[Node, Sequence[Getter], bool], NodeFn | str]] = {
    "LayerNormalization": _tf_layer_norm,
    "Gather": _tf_gather,
    "Concat": _tf_concat,
    "Shape": _tf_shape,
    "Cast": _tf_cast,
    "Squeeze": _tf_squeeze,
    "Unsqueeze": _tf_unsqueeze,
    "Slice": _tf_slice,
    "Split": _tf_split,
}
"""The data-movement and normalization ops a transformer's graph adds, one function each;
``nhwc``: the graph runs channels-last (its 4-D values are NHWC)."""


def tf_feed(value: np.ndarray, nhwc: bool) -> np.ndarray:
    """A runtime value as TensorFlow receives it (NHWC when the graph runs channels-last)."""
    return np.ascontiguousarray(value.transpose(0, 2, 3, 1)) if nhwc and value.ndim == 4 else value
