"""Tracing without a backend: clock anchoring of profiled ops, TRACEPARENT, the standard OTEL
variables, leveled passes, the trace file, `mlms trace`, and a missing telemetry extra."""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from mlmodelscope.agent.backends import NullBackend
from mlmodelscope.agent.profilers import (
    FrameworkProfiler,
    ProfiledOp,
    ProfiledRun,
    ProfilingUnavailableError,
)
from mlmodelscope.cli import app
from mlmodelscope.telemetry.agent import AgentTelemetry, trace_path
from mlmodelscope.telemetry.breakdown import breakdown, spans_from_jaeger, spans_from_trace_file
from mlmodelscope.telemetry.leveled import LeveledPasses, is_traced, levels_up_to, run_levels
from mlmodelscope.telemetry.tracing import (
    EvaluationTracer,
    TelemetryMissingError,
    otlp_endpoint,
    write_trace_file,
)

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


_made: list[EvaluationTracer] = []


@pytest.fixture(autouse=True)
def _end_tracers() -> Iterator[None]:
    """A begun tracer makes its root span current; end every one so no test leaks context."""
    yield
    while _made:
        _made.pop().end()


def make_tracer(**env: str) -> EvaluationTracer:
    tracer = EvaluationTracer.create({"mlmodelscope.evaluation": "e"}, env)
    assert tracer is not None
    tracer.begin("evaluation e", {"mlmodelscope.model": "digits"})
    _made.append(tracer)
    return tracer


def by_name(spans: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        out.setdefault(s["name"], []).append(s)
    return out


def test_endpoint_follows_the_standard_variables() -> None:
    assert otlp_endpoint({}) is None
    assert otlp_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) == "http://c:4318"
    traces = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/v1/traces"}
    assert (
        otlp_endpoint({**traces, "OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
        == traces["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    )
    assert otlp_endpoint({**traces, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert otlp_endpoint({**traces, "OTEL_SDK_DISABLED": "true"}) is None
    assert EvaluationTracer.create({}, {"OTEL_SDK_DISABLED": "true"}) is None


def test_traceparent_parents_the_evaluation_and_resource_follows_semconv() -> None:
    tracer = make_tracer(TRACEPARENT=PARENT, MLMS_NAMESPACE="team-a", MLMS_POD_NAME="job-x-abc")
    assert tracer.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert not tracer.exported
    tracer.end()
    [root] = tracer.spans()
    assert root["parent_span_id"] == "b7ad6b7169203331"
    resource = tracer.resource()
    assert resource["service.name"] == "mlmodelscope-agent"
    assert resource["k8s.namespace.name"] == "team-a"
    assert resource["k8s.pod.name"] == "job-x-abc"
    assert resource["mlmodelscope.evaluation"] == "e"


def test_profiled_ops_are_anchored_to_the_predict_span_start() -> None:
    tracer = make_tracer()
    with tracer.span("predict") as predict:
        pass
    run = ProfiledRun(
        index=0,
        duration_ns=1000,
        ops=[
            ProfiledOp("aten::conv2d", "layer", 100, 500, None, {"op_type": "aten::conv2d"}),
            ProfiledOp("implicit_gemm", "kernel", 300, 200, 0, {"stream": 7}),
            ProfiledOp("Memcpy DtoH", "memcpy", 700, 50, None),
        ],
    )
    assert tracer.emit_runs([run], {0: predict}, "library") == 3
    assert tracer.emit_runs([run], {1: predict}, "library") == 0  # no predict span: skipped
    tracer.end()
    spans = by_name(tracer.spans())
    start = spans["predict"][0]["start_ns"]
    conv, gemm, copy = spans["aten::conv2d"][0], spans["implicit_gemm"][0], spans["Memcpy DtoH"][0]
    assert (conv["start_ns"] - start, conv["end_ns"] - start) == (100, 600)
    assert (gemm["start_ns"] - start, gemm["end_ns"] - start) == (300, 500)
    assert conv["parent_span_id"] == spans["predict"][0]["span_id"]
    assert gemm["parent_span_id"] == conv["span_id"]
    assert copy["parent_span_id"] == spans["predict"][0]["span_id"]
    assert gemm["attributes"]["mlmodelscope.span.kind"] == "kernel"
    assert gemm["attributes"]["mlmodelscope.trace.level"] == "library"
    assert gemm["attributes"]["mlmodelscope.stream"] == 7


def test_framework_level_leaves_library_ops_out() -> None:
    tracer = make_tracer()
    with tracer.span("predict") as predict:
        pass
    run = ProfiledRun(
        0, 10, [ProfiledOp("conv", "layer", 0, 5), ProfiledOp("k", "kernel", 1, 1, 0)]
    )
    assert tracer.emit_runs([run], {0: predict}, "framework") == 1


class FakeProfiler(FrameworkProfiler):
    """Records one 'layer' per annotated call, 10 ns into it."""

    def __init__(self, predict: Any, level: str) -> None:
        super().__init__(predict, level)
        self.annotated: list[int] = []
        self.started = self.stopped = self.closed = False

    def start(self) -> None:
        self.started = True

    def annotate(self, index: int) -> Any:
        self.annotated.append(index)
        return super().annotate(index)

    def stop(self) -> list[ProfiledRun]:
        self.stopped = True
        return [ProfiledRun(i, 100, [ProfiledOp("layer", "layer", 10, 20)]) for i in self.annotated]

    def close(self) -> None:
        self.closed = True


class ProfiledNull(NullBackend):
    def __init__(self) -> None:
        super().__init__()
        self.profilers: list[FakeProfiler] = []

    def profiler(self, level: str) -> FakeProfiler:
        if level == "library":
            raise ProfilingUnavailableError("library level needs CUDA; this model runs on the CPU")
        self.profilers.append(FakeProfiler(self.predict, level))
        return self.profilers[-1]


def ring(
    batches: int = 4,
) -> tuple[list[tuple[tuple[np.ndarray, ...], ...]], list[tuple[np.ndarray, ...]]]:
    queries = [((np.zeros((2, 3), dtype=np.float32),),) for _ in range(batches)]
    indices = [(np.array([2 * i, 2 * i + 1]),) for i in range(batches)]
    return queries, indices


def test_leveled_passes_report_every_level_and_skip_library_on_cpu() -> None:
    tracer = make_tracer()
    backend = ProfiledNull()
    queries, indices = ring()
    raw = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    seen: list[int] = []

    def pre(sample: np.ndarray) -> np.ndarray:
        seen.append(1)
        return sample

    passes = LeveledPasses(
        tracer,
        backend,
        queries,
        indices,
        raw_samples=raw,
        preprocess=pre,
        postprocess=lambda out: out,
        count=6,
        attributes={"mlmodelscope.batch_size": 2},
    )
    result = run_levels(passes, "library")
    assert result["untraced"]["queries"] == 6
    levels = result["levels"]
    assert set(levels) == {"model", "framework", "library"}
    assert levels["model"]["traced_queries"] == 6
    assert levels["framework"]["profiled_spans"] == 6
    assert "overhead_vs_untraced" in levels["framework"]
    assert "CUDA" in levels["library"]["skipped"]
    [profiler] = backend.profilers
    assert profiler.started and profiler.stopped and profiler.closed
    assert len(seen) == 2 * 6 * 2  # model + framework passes, 6 queries, 2 samples each
    tracer.end()
    spans = by_name(tracer.spans())
    assert len(spans["query"]) == 12
    assert len(spans["layer"]) == 6
    predict_ids = {s["span_id"] for s in spans["predict"]}
    assert all(s["parent_span_id"] in predict_ids for s in spans["layer"])
    groups = breakdown(spans_from_trace_file({"spans": tracer.spans()}))
    assert [(g["level"], g["batch_size"], g["queries"]) for g in groups] == [
        ("framework", 2, 6),
        ("model", 2, 6),
    ]
    assert groups[0]["layers"][0]["name"] == "layer"
    assert groups[0]["layers"][0]["count"] == 6


def test_sampling_spreads_traced_queries_evenly() -> None:
    assert [is_traced(q, 1.0) for q in range(4)] == [True] * 4
    assert [is_traced(q, 0.5) for q in range(4)] == [False, True, False, True]
    assert sum(is_traced(q, 0.1) for q in range(100)) == 10
    assert not any(is_traced(q, 0.0) for q in range(100))
    assert levels_up_to("none") == []
    assert levels_up_to("framework") == ["model", "framework"]


def test_backend_without_profiler_skips_framework_level() -> None:
    tracer = make_tracer()
    queries, indices = ring()
    result = run_levels(
        LeveledPasses(tracer, NullBackend(), queries, indices, count=3), "framework"
    )
    assert "no framework profiler" in result["levels"]["framework"]["skipped"]


def test_breakdown_uses_self_time_and_reads_jaeger_json() -> None:
    def span(
        sid: str, parent: str | None, name: str, start: int, dur: int, **attrs: Any
    ) -> dict[str, Any]:
        return {
            "traceID": "t",
            "spanID": sid,
            "operationName": name,
            "references": [{"refType": "CHILD_OF", "spanID": parent}] if parent else [],
            "startTime": start,
            "duration": dur,
            "tags": [{"key": k, "value": v} for k, v in attrs.items()],
        }

    layer = {"mlmodelscope.span.kind": "layer"}
    conv = {**layer, "mlmodelscope.op_type": "Conv"}
    query = {"mlmodelscope.trace.level": "library", "mlmodelscope.batch_size": 4}
    data = {
        "data": [
            {
                "spans": [
                    span("q", None, "query", 0, 100, **query),
                    span("p", "q", "predict", 10, 80),
                    span("o", "q", "postprocess", 90, 10),
                    span("a", "p", "forward", 10, 70, **layer),
                    span("b", "a", "aten::conv2d", 15, 40, **conv),
                    span("c", "a", "aten::relu", 60, 10, **layer),
                    span("k", "b", "gemm_kernel", 20, 30, **{"mlmodelscope.span.kind": "kernel"}),
                ]
            }
        ]
    }
    [group] = breakdown(spans_from_jaeger(data))
    assert group["level"] == "library" and group["batch_size"] == 4
    assert group["stages"]["predict"]["share_of_query"] == pytest.approx(0.8)
    layers = {r["name"]: r for r in group["layers"]}
    assert layers["aten::conv2d"]["self_s"] == pytest.approx(40e-6)  # kernels are not layers
    assert layers["forward"]["self_s"] == pytest.approx(20e-6)  # 70 - 40 - 10
    assert layers["aten::conv2d"]["kind"] == "Conv"
    assert sum(r["share_of_predict"] for r in group["layers"]) == pytest.approx(70 / 80)
    assert group["kernels"][0]["name"] == "gemm_kernel"
    assert group["kernels"][0]["share_of_predict"] == pytest.approx(30 / 80)


def test_mlms_trace_reads_the_file_next_to_a_result(tmp_path: Path) -> None:
    tracer = make_tracer()
    queries, indices = ring()
    run_levels(LeveledPasses(tracer, ProfiledNull(), queries, indices, count=3), "framework")
    trace_id = tracer.trace_id
    tracer.end()
    result = tmp_path / "eval.json"
    result.write_text(
        json.dumps({"trace_id": trace_id, "tracing": {"trace_file": "eval.trace.json"}})
    )
    write_trace_file(trace_path(result), trace_id, tracer.resource(), tracer.spans())
    runner = CliRunner()
    out = runner.invoke(app, ["trace", str(result), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["trace_id"] == trace_id
    assert data["passes"][0]["level"] == "framework"
    table = runner.invoke(app, ["trace", str(result)])
    assert table.exit_code == 0 and "top layers by self time" in table.output
    missing = runner.invoke(app, ["trace", str(tmp_path / "nope.json")])
    assert missing.exit_code == 1 and "--jaeger" in missing.output


def _block(monkeypatch: pytest.MonkeyPatch, *prefixes: str) -> None:
    """Make the telemetry packages unimportable, as without the telemetry extra."""
    real = builtins.__import__

    def fake(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith(prefixes):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


def test_without_the_extra_tracing_is_off_unless_an_endpoint_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _block(monkeypatch, "opentelemetry", "prometheus_client")
    assert EvaluationTracer.create({}, {}) is None
    with pytest.raises(TelemetryMissingError, match=r"pip install 'mlmodelscope\[telemetry\]'"):
        EvaluationTracer.create({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"})
    from mlmodelscope.telemetry.agent_metrics import AgentMetrics

    assert AgentMetrics.from_env("ns", "e", {}) is None
    with pytest.raises(TelemetryMissingError, match=r"mlmodelscope\[telemetry\]"):
        AgentMetrics.from_env("ns", "e", {"MLMS_PUSHGATEWAY_URL": "http://pgw:9091"})


@pytest.mark.frameworks
def test_mlms_run_works_without_the_telemetry_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, digits_models: Path, make_evaluation: Any
) -> None:
    """The whole agent path with OpenTelemetry and prometheus-client unimportable."""
    from mlmodelscope.agent.runner import EvaluationError, evaluate
    from mlmodelscope.spec import load_evaluations

    path = make_evaluation(tmp_path, digits_models, "onnxruntime", "no-extra")
    [item] = load_evaluations(path)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("MLMS_PUSHGATEWAY_URL", raising=False)
    _block(monkeypatch, "opentelemetry", "prometheus_client")
    telemetry = AgentTelemetry.start(item.evaluation, {})
    assert telemetry.tracer is None and telemetry.metrics is None
    outcome = evaluate(item, output=tmp_path / "out.json", hooks=AgentTelemetry.start)
    assert outcome.document["status"] == "Succeeded"
    assert "trace_id" not in outcome.document
    assert outcome.document["tracing"]["enabled"] is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    with pytest.raises(EvaluationError, match=r"pip install 'mlmodelscope\[telemetry\]'"):
        evaluate(item, output=tmp_path / "out.json", hooks=AgentTelemetry.start)


def test_unreachable_collector_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}  # nothing listens on port 9
    tracer = EvaluationTracer.create({}, env)
    assert tracer is not None and tracer.exported
    tracer.begin("evaluation e", {})
    tracer.end()
    problem = tracer.shutdown(timeout_s=3.0)
    assert problem is not None and "127.0.0.1:9" in problem
    assert len(tracer.spans()) == 1  # the trace file still gets everything


def test_the_jobs_traceparent_parents_the_agent_under_the_admitting_reconcile() -> None:
    """The operator's side (mlmodelscope.controller.tracing) and the agent's agree: the
    TRACEPARENT a Job carries makes the evaluation span a child of the reconcile that created
    the Job, in the trace of the run whose id is in .status.traceID."""
    from mlmodelscope.controller.tracing import Run, run_ids, traceparent

    run = Run("team-a", "e", "0f5e1c4a-1111-2222-3333-444455556666", 3)
    trace_id, span_id = run_ids(run.uid, run.generation)
    assert (run.trace_id, run.span_id) == (trace_id, span_id)
    tracer = make_tracer(TRACEPARENT=traceparent(trace_id, span_id))
    assert tracer.trace_id == trace_id
    tracer.end()
    [root] = tracer.spans()
    assert root["parent_span_id"] == span_id
