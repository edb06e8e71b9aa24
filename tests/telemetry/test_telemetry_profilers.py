"""Profiler traces -> runs, and runs -> spans anchored to the predict span: synthetic traces
shaped like torch.profiler's, ONNX Runtime's and TensorFlow's, so library-level (CUDA) paths
are tested on a machine without a GPU."""

from __future__ import annotations

from typing import Any

import pytest

from mlmodelscope.agent.profilers import (
    ProfilingUnavailableError,
    TorchProfiler,
    ort_runs_from_profile,
    tf_runs_from_xspace,
    torch_runs_from_chrome_trace,
)


def x(
    cat: str, name: str, ts: float, dur: float, tid: int = 1, pid: int = 100, **args: Any
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


TORCH_TRACE: dict[str, Any] = {
    "schemaVersion": 1,
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        x("cpu_op", "aten::warmup_op", 500.0, 10.0),  # outside every marker: dropped
        x("kernel", "stray_kernel", 10.0, 1.0, tid=7, pid=0, correlation=100),  # before all runs
        x("user_annotation", "mlms.query#0", 1000.0, 500.0),
        x("cpu_op", "aten::conv2d", 1010.0, 200.0),
        x("cpu_op", "aten::cudnn_convolution", 1020.0, 150.0),
        x("cuda_runtime", "cudaLaunchKernel", 1030.0, 10.0, correlation=7),
        x("cpu_op", "aten::relu", 1250.0, 50.0),
        x("cuda_runtime", "cudaLaunchKernel", 1260.0, 5.0, correlation=8),
        x(
            "kernel",
            "implicit_gemm",
            1100.0,
            80.0,
            tid=7,
            pid=0,
            correlation=7,
            stream=7,
            grid=[4, 1, 1],
        ),
        x("kernel", "relu_kernel", 1300.0, 20.0, tid=7, pid=0, correlation=8),
        x(
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pageable)",
            1400.0,
            30.0,
            tid=7,
            pid=0,
            correlation=99,
        ),
        x("user_annotation", "mlms.query#1", 3000.0, 400.0),
        x("cpu_op", "aten::relu", 3010.0, 50.0),
        x("cuda_runtime", "cudaLaunchKernel", 3020.0, 5.0, correlation=9),
        # async: the kernel runs after the call's marker ended; correlation still finds it
        x("kernel", "relu_kernel", 3600.0, 20.0, tid=7, pid=0, correlation=9),
        {"ph": "s", "cat": "ac2g", "id": 9, "ts": 3020.0, "pid": 100, "tid": 1},
    ],
}


def test_torch_trace_nests_ops_and_puts_kernels_under_their_launching_layer() -> None:
    runs = torch_runs_from_chrome_trace(TORCH_TRACE)
    assert [r.index for r in runs] == [0, 1]
    first = runs[0]
    assert first.duration_ns == 500_000
    got = [(o.name, o.kind, o.start_ns, o.duration_ns, o.parent) for o in first.ops]
    assert got == [
        ("aten::conv2d", "layer", 10_000, 200_000, None),
        ("aten::cudnn_convolution", "layer", 20_000, 150_000, 0),
        ("implicit_gemm", "kernel", 100_000, 80_000, 1),
        ("aten::relu", "layer", 250_000, 50_000, None),
        ("relu_kernel", "kernel", 300_000, 20_000, 3),
        ("Memcpy DtoH (Device -> Pageable)", "memcpy", 400_000, 30_000, None),
    ]
    assert first.ops[2].attributes["stream"] == 7
    assert first.ops[2].attributes["grid"] == "[4,1,1]"
    second = [(o.name, o.start_ns, o.parent) for o in runs[1].ops]
    assert second == [("aten::relu", 10_000, None), ("relu_kernel", 600_000, 0)]


def test_torch_trace_framework_level_has_no_gpu_activity() -> None:
    runs = torch_runs_from_chrome_trace(TORCH_TRACE, library=False)
    assert all(o.kind == "layer" for r in runs for o in r.ops)
    assert [o.name for o in runs[0].ops] == [
        "aten::conv2d",
        "aten::cudnn_convolution",
        "aten::relu",
    ]


def test_torch_trace_without_markers_yields_nothing() -> None:
    assert torch_runs_from_chrome_trace({"traceEvents": [x("cpu_op", "aten::add", 1.0, 1.0)]}) == []


def test_child_ending_a_rounding_error_after_its_parent_still_nests() -> None:
    events = [
        x("user_annotation", "mlms.query#0", 0.0, 100.0),
        x("cpu_op", "outer", 1.0, 10.0),
        x("cpu_op", "inner", 2.0, 9.0005),  # ends 0.5 ns after outer (float µs rounding)
    ]
    ops = torch_runs_from_chrome_trace(events)[0].ops
    assert [(o.name, o.parent) for o in ops] == [("outer", None), ("inner", 0)]


def test_torch_library_level_needs_cuda() -> None:
    with pytest.raises(ProfilingUnavailableError, match="CUDA"):
        TorchProfiler(lambda inputs: [], "library", cuda=False)


def ort_event(cat: str, name: str, ts: int, dur: int, **args: Any) -> dict[str, Any]:
    return {"cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 2, "args": args}


def test_ort_profile_maps_model_runs_to_traced_calls() -> None:
    events = [
        ort_event("Session", "model_loading_uri", 0, 100),
        ort_event(
            "Node", "conv_kernel_time", 210, 30, op_name="Conv", provider="CPUExecutionProvider"
        ),
        ort_event("Session", "model_run", 200, 60),  # warm-up call, not traced
        ort_event(
            "Node", "conv_kernel_time", 1010, 40, op_name="Conv", provider="CUDAExecutionProvider"
        ),
        ort_event("Node", "gemm_kernel_time", 1060, 20, op_name="Gemm", node_index="3"),
        ort_event("Kernel", "volta_sgemm", 1070, 15, parent_name="gemm", stream=1),
        ort_event("Session", "model_run", 1000, 100),
        ort_event("Session", "model_run", 2000, 50),
        ort_event("Node", "conv_kernel_time", 2005, 10, op_name="Conv"),
    ]
    runs = ort_runs_from_profile(events, [None, 5, 6])
    assert [(r.index, r.duration_ns) for r in runs] == [(5, 100_000), (6, 50_000)]
    ops = [(o.name, o.kind, o.start_ns, o.duration_ns, o.parent) for o in runs[0].ops]
    assert ops == [
        ("conv", "layer", 10_000, 40_000, None),
        ("gemm", "layer", 60_000, 20_000, None),
        ("volta_sgemm", "kernel", 70_000, 15_000, 1),
    ]
    assert runs[0].ops[0].attributes["op_type"] == "Conv"
    assert runs[0].ops[0].attributes["provider"] == "CUDAExecutionProvider"
    assert [o.name for o in runs[1].ops] == ["conv"]
    assert all(
        o.kind == "layer" for r in ort_runs_from_profile(events, [None, 5, 6], False) for o in r.ops
    )


def _xspace() -> Any:
    xplane_pb2 = pytest.importorskip("tensorflow.tsl.profiler.protobuf.xplane_pb2")
    space = xplane_pb2.XSpace()
    host = space.planes.add(id=0, name="/host:CPU")
    host.event_metadata[1].id, host.event_metadata[1].name = 1, "mlms.query"
    op = host.event_metadata[2]
    op.id, op.name, op.display_name = 2, "StatefulPartitionedCall/conv/Conv2D:Conv2D", "Conv2D"
    relu = host.event_metadata[3]
    relu.id, relu.name, relu.display_name = 3, "StatefulPartitionedCall/Relu:Relu", "Relu"
    host.stat_metadata[1].id, host.stat_metadata[1].name = 1, "mlms_query"
    python = host.lines.add(id=1, name="python", timestamp_ns=1000)
    marker = python.events.add(metadata_id=1, offset_ps=0, duration_ps=1_000_000)
    marker.stats.add(metadata_id=1, int64_value=4)
    compute = host.lines.add(id=2, name="tf_Compute", timestamp_ns=1000)
    compute.events.add(metadata_id=2, offset_ps=100_000, duration_ps=300_000)
    compute.events.add(metadata_id=3, offset_ps=450_000, duration_ps=20_000)
    compute.events.add(metadata_id=3, offset_ps=5_000_000, duration_ps=20_000)  # outside: dropped
    gpu = space.planes.add(id=1, name="/device:GPU:0")
    gpu.event_metadata[1].id, gpu.event_metadata[1].name = 1, "volta_sgemm"
    gpu.event_metadata[2].id, gpu.event_metadata[2].name = 2, "MemcpyDtoH"
    gpu.stat_metadata[1].id, gpu.stat_metadata[1].name = 1, "tf_op"
    stream = gpu.lines.add(id=7, name="Stream #7", timestamp_ns=1000)
    kernel = stream.events.add(metadata_id=1, offset_ps=500_000, duration_ps=100_000)
    kernel.stats.add(metadata_id=1, str_value="StatefulPartitionedCall/conv/Conv2D:Conv2D")
    stream.events.add(metadata_id=2, offset_ps=700_000, duration_ps=10_000)
    return space


def test_tf_xspace_ops_and_device_kernels() -> None:
    runs = tf_runs_from_xspace(_xspace())
    assert [(r.index, r.duration_ns) for r in runs] == [(4, 1000)]
    ops = [(o.name, o.kind, o.start_ns, o.duration_ns, o.parent) for o in runs[0].ops]
    assert ops == [
        ("conv/Conv2D", "layer", 100, 300, None),
        ("Relu", "layer", 450, 20, None),
        ("volta_sgemm", "kernel", 500, 100, 0),
        ("MemcpyDtoH", "memcpy", 700, 10, None),
    ]
    assert runs[0].ops[0].attributes["op_type"] == "Conv2D"
    framework_only = tf_runs_from_xspace(_xspace(), library=False)
    assert [o.name for o in framework_only[0].ops] == ["conv/Conv2D", "Relu"]


@pytest.mark.frameworks
def test_torch_profiler_runs_in_a_process_that_loaded_tensorflow() -> None:
    """torch.profiler.profile().start() imports torch._inductor, which segfaults once
    TensorFlow is loaded; a multi-framework `mlms run` loads both, so the profiler must not."""
    pytest.importorskip("tensorflow")
    torch = pytest.importorskip("torch")
    x_in = torch.ones(4)

    def predict(inputs: Any) -> list[Any]:
        return [(x_in + 1).numpy()]

    profiler = TorchProfiler(predict, "framework", cuda=False)
    profiler.start()
    predict([])  # an unannotated (warm-up) call is not a run
    with profiler.annotate(3):
        profiler.predict([])
    runs = profiler.stop()
    profiler.close()
    assert [r.index for r in runs] == [3]
    assert runs[0].ops[0].name == "aten::add"
    assert all(o.kind == "layer" and o.start_ns >= 0 for o in runs[0].ops)
