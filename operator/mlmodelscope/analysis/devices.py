"""Peak FP32 compute and memory bandwidth per device: the roofs of the roofline.

GPUs: the datasheet figures of the products the node pools name (docs/gpu-node-pools.md's
``nvidia.com/gpu.product`` values), each row citing its datasheet. FP32 is the non-Tensor-Core
figure, since the zoo runs float32. This machine's CPU: measured by ``measure_cpu`` (a large
float32 MatMul through ONNX Runtime at the benchmark's thread count, a large numpy copy),
recorded with its conditions, because no datasheet states what a shared VM delivers.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Device:
    name: str
    peak_flops: float
    """FP32 FLOP/s."""
    bandwidth: float
    """Memory bandwidth, bytes/s."""
    source: str
    conditions: dict[str, Any] = field(default_factory=dict)
    tensor_tf32_flops: float | None = None
    """Dense TF32 Tensor Core FLOP/s (no sparsity), where the datasheet gives it."""
    boost_clock_hz: float | None = None
    """The SM clock the datasheet's peaks hold at (compute peaks scale with the clock)."""


GPUS: dict[str, Device] = {
    d.name: d
    for d in (
        Device(
            "NVIDIA-A100-SXM4-80GB",
            19.5e12,
            2039e9,
            "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: FP32 19.5 TFLOPS, "
            "GPU memory bandwidth 2,039 GB/s), https://www.nvidia.com/content/dam/en-zz/"
            "Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        ),
        Device(
            "NVIDIA-H100-80GB-HBM3",
            67e12,
            3.35e12,
            "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: FP32 67 teraFLOPS, TF32 Tensor "
            "Core 989 teraFLOPS with sparsity, so 494.7 dense; GPU memory bandwidth 3.35 TB/s; "
            "max boost clock 1,980 MHz), https://www.nvidia.com/en-us/data-center/h100/",
            tensor_tf32_flops=494.7e12,
            boost_clock_hz=1.98e9,
        ),
        Device(
            "Tesla-T4",
            8.1e12,
            320e9,
            "NVIDIA T4 Tensor Core GPU datasheet (single-precision 8.1 TFLOPS, GPU memory "
            "bandwidth 320+ GB/s), https://www.nvidia.com/content/dam/en-zz/Solutions/"
            "Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
        ),
    )
}
"""The GPU products the node pools name, by their ``nvidia.com/gpu.product`` label. Peak
dense FP32 (no Tensor Cores, no sparsity) and memory bandwidth as each datasheet states them;
checked on 2026-11-24 against independent spec tables (A100 80GB SXM4: 19.5 TFLOPS, 2,039 GB/s;
H100 SXM5: 67 TFLOPS, 3,350 GB/s; T4: 8.1 TFLOPS, 320 GB/s)."""


def measure_cpu(
    threads: int = 1, size: int = 2048, copy_mib: int = 256, repeats: int = 5
) -> Device:
    """This CPU's roofs, measured: best of ``repeats`` of a ``size``-square float32 MatMul in
    ONNX Runtime (``threads`` intra-op threads, as the benchmarks run) and of a ``copy_mib`` MiB
    numpy copy (read + write counted). Best, not median: a roof is what the machine can reach."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "peak",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [size, size]) for n in "ab"],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [size, size])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    rng = np.random.default_rng(0)
    feeds = {n: rng.random((size, size), dtype=np.float32) for n in "ab"}
    session.run(None, feeds)
    best_matmul = min(_timed(lambda: session.run(None, feeds)) for _ in range(repeats))
    src = np.ones(copy_mib * 2**20 // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best_copy = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    load = os.getloadavg()
    return Device(
        name="cpu",
        peak_flops=2 * size**3 / best_matmul,
        bandwidth=2 * src.nbytes / best_copy,
        source="measured on this machine by mlmodelscope.analysis.devices.measure_cpu",
        conditions={
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "threads": threads,
            "matmul": f"{size}x{size} float32, ONNX Runtime {ort.__version__}, best of {repeats}",
            "copy": f"{copy_mib} MiB numpy copyto, read+write counted, best of {repeats}",
            "loadavg": [round(x, 2) for x in load],
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        },
    )


def _timed(fn: Any) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e9


def device(name: str, threads: int = 1) -> Device:
    """A GPU row by its product label, or ``cpu`` measured now; an unknown name is an error
    listing the known ones."""
    if name == "cpu":
        return measure_cpu(threads)
    if name in GPUS:
        return GPUS[name]
    raise ValueError(f"device: unknown {name!r}; choose 'cpu' or one of {sorted(GPUS)}")
