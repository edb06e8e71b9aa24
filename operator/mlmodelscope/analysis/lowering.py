"""ONNX nodes as PyTorch and TensorFlow calls: a DLBricks brick runnable in every framework.

A node is lowered from its op type, attributes and operands (each with the value one recorded
run gave it, so shapes are known): a function from an environment (value name -> tensor) to its
output tensor. Constant operands (initializers, ``Constant`` outputs) are converted once, at
lowering, as a framework model holds its weights; the others are read from the environment.

PyTorch runs NCHW, as exported. TensorFlow's CPU convolutions and pools want NHWC, so a graph
with convolutions or pools runs channels-last in TensorFlow (``channels_last``): 4-D values are
NHWC, 4-D constants and channel axes are converted to match, as Keras lays a CNN out. A node
that cannot be lowered faithfully (an op not listed, a grouped convolution other than
depthwise, asymmetric padding in PyTorch, several outputs) lowers to None: that framework does
not time the layer, and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Env = Mapping[str, Any]
NodeFn = Callable[[Env], Any]

SPATIAL = frozenset({"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
ELEMENTWISE_BINARY = ("Add", "Sub", "Mul", "Div")
UNARY = ("Relu", "Sigmoid", "Tanh", "Erf", "Identity")


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


def _to_nhwc(value: np.ndarray, rank: int) -> np.ndarray:
    """A constant broadcast against a 4-D NCHW value, laid out for the NHWC one."""
    if value.ndim == 3 and rank == 4:
        value = value[None]
    return value.transpose(0, 2, 3, 1) if value.ndim == 4 else value


def _pads2d(attrs: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    """(top, left, bottom, right), or None when ``auto_pad`` asks for what is not spelled out."""
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return None
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    return (pads[0], pads[1], pads[2], pads[3]) if len(pads) == 4 else None


def _same_valid_or_pad(
    size: Sequence[int], span: Sequence[int], strides: Sequence[int], pads: Sequence[int]
) -> tuple[str, list[list[int]] | None]:
    """TensorFlow's padding for an NHWC window op with ONNX ``pads``: "SAME" where that gives
    ONNX's output size, "VALID" where nothing is padded, else "VALID" after an explicit pad."""
    out = [(size[i] + pads[i] + pads[i + 2] - span[i]) // strides[i] + 1 for i in (0, 1)]
    if out == [math.ceil(size[i] / strides[i]) for i in (0, 1)]:
        return "SAME", None
    if not any(pads):
        return "VALID", None
    return "VALID", [[0, 0], [pads[0], pads[2]], [pads[1], pads[3]], [0, 0]]


# ------------------------------------------------------------------------------ PyTorch


def torch_node(op: str, attrs: Mapping[str, Any], operands: Sequence[Operand]) -> NodeFn | None:
    """``op`` as a PyTorch eager call, or None where it has no faithful lowering here."""
    import torch
    from torch.nn import functional

    consts = {o.name: torch.from_numpy(np.array(o.value)) for o in operands if o.constant}

    def get(i: int) -> Callable[[Env], Any]:
        name = operands[i].name
        if name in consts:
            tensor = consts[name]
            return lambda env: tensor
        return lambda env: env[name]

    args = [get(i) for i in range(len(operands))]
    shape = operands[0].value.shape if operands else ()
    a: Callable[[Env], Any]
    b: Callable[[Env], Any]
    c: Callable[[Env], Any]
    fn: Callable[..., Any]
    target: tuple[int, ...]
    if op in ("Conv", "MaxPool", "AveragePool"):
        pads = _pads2d(attrs)
        default = operands[1].value.shape[2:] if op == "Conv" else ()
        kernel = list(attrs.get("kernel_shape") or default)
        if pads is None or pads[:2] != pads[2:] or len(kernel) != 2 or len(shape) != 4:
            return None
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
            return None
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
        fn = getattr(torch, {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}[op])
        a, b = args[0], args[1]
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
    return None


# ------------------------------------------------------------------------------ TensorFlow


def tf_node(
    op: str, attrs: Mapping[str, Any], operands: Sequence[Operand], nhwc: bool
) -> NodeFn | None:
    """``op`` as TensorFlow calls (to run inside a ``tf.function``), NHWC where ``nhwc``."""
    import tensorflow as tf

    shape = tuple(operands[0].value.shape) if operands else ()
    rank = len(shape)
    four = nhwc and rank == 4

    def const(value: np.ndarray) -> Any:
        return tf.constant(_to_nhwc(value, rank) if nhwc else value)

    def get(i: int) -> Callable[[Env], Any]:
        o = operands[i]
        if o.constant:
            tensor = const(o.value)
            return lambda env: tensor
        name = o.name
        return lambda env: env[name]

    args = [get(i) for i in range(len(operands))]
    axis_map = {0: 0, 1: 3, 2: 1, 3: 2}
    b: Callable[[Env], Any]
    c: Callable[[Env], Any]
    fn: Callable[..., Any]
    if op == "Conv":
        pads = _pads2d(attrs)
        w = operands[1].value
        if not four or pads is None or w.ndim != 4 or not operands[1].constant:
            return None
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
            return None

        def conv(env: Env) -> Any:
            return op_fn(x(env), kernel, strides, padding, dilations=dilations)

        if len(operands) < 3:
            return conv
        bias = tf.constant(operands[2].value)
        return lambda env: tf.nn.bias_add(conv(env), bias)
    if op in ("MaxPool", "AveragePool"):
        pads = _pads2d(attrs)
        kernel = list(attrs.get("kernel_shape") or [])
        if not four or pads is None or len(kernel) != 2 or attrs.get("ceil_mode", 0):
            return None
        strides = list(attrs.get("strides") or (1, 1))
        pool = tf.nn.max_pool2d if op == "MaxPool" else tf.nn.avg_pool2d
        x = args[0]
        mode, paddings = _same_valid_or_pad(shape[2:], kernel, strides, pads)
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
            return None
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
            return None
        a, b = args[0], args[1]
        return lambda env: tf.linalg.matmul(a(env), b(env))
    if op in ELEMENTWISE_BINARY:
        fn = {"Add": tf.add, "Sub": tf.subtract, "Mul": tf.multiply, "Div": tf.divide}[op]
        if nhwc and any(o.value.ndim == 4 for o in operands):
            rank = 4  # a constant beside a 4-D value follows its layout
            args = [get(i) for i in range(len(operands))]
        a, b = args[0], args[1]
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
        target = list(reshape_target(shape, [int(d) for d in operands[1].value]))
        if nhwc and len(target) == 4 and list(target) != list(shape):
            return None  # a 4-D result would need an NCHW meaning here
        x = args[0]
        return lambda env: tf.reshape(x(env), target)
    if op == "Transpose":
        if four:
            return None
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
            return None
        eps = float(attrs.get("epsilon", 1e-5))
        scale, bias, mean, var = (tf.constant(o.value) for o in operands[1:5])
        x = args[0]
        return lambda env: tf.nn.batch_normalization(x(env), mean, var, bias, scale, eps)
    return None


def tf_feed(value: np.ndarray, nhwc: bool) -> np.ndarray:
    """A runtime value as TensorFlow receives it (NHWC when the graph runs channels-last)."""
    return np.ascontiguousarray(value.transpose(0, 2, 3, 1)) if nhwc and value.ndim == 4 else value
