"""The handler wrapper and the operator's reconcile spans, recorded by the real OpenTelemetry SDK
into its in-memory exporter: which trace and span id each reconcile gets, what the hooks add,
and when tracing stays off."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import kopf
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client.parser import text_string_to_metric_families

from mlmodelscope.controller import builders, instrument
from mlmodelscope.controller.instrument import Instruments
from mlmodelscope.controller.metrics import OperatorMetrics
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.controller.tracing import OperatorTracer, Run
from mlmodelscope.spec import ModelEvaluation, parse_evaluation

SETTINGS = OperatorSettings.from_env({"MLMS_OPERATOR_OTLP_ENDPOINT": "http://otel:4318"})
OTHER_UID = "9a8b7c6d-0000-1111-2222-333344445555"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.shutdown()


@pytest.fixture
def instruments(exporter: InMemorySpanExporter) -> Instruments:
    env = {"POD_NAMESPACE": "mlmodelscope-system", "POD_ID": "operator-abc"}
    tracer = OperatorTracer.with_processor(SimpleSpanProcessor(exporter), env)
    return Instruments(OperatorMetrics(), tracer)


def ids(span: Any) -> tuple[str, str]:
    ctx = span.get_span_context()
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def metric(instruments: Instruments, name: str, **labels: str) -> float:
    assert instruments.metrics is not None
    text = instruments.metrics.render().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no {name}{labels}")


def wrapped(instruments: Instruments, name: str, run_of: Any, action: Callable[[], None]) -> Any:
    @instruments.handler(name, run_of)
    def handler(body: dict[str, Any], **_: Any) -> None:
        action()

    return handler


def test_the_reconcile_that_creates_the_job_is_the_parent_the_traceparent_names(
    instruments: Instruments, exporter: InMemorySpanExporter, make_doc: Any
) -> None:
    doc = make_doc()
    evaluation = parse_evaluation(doc)
    handler = wrapped(
        instruments, "created", Run.of_evaluation, lambda: instrument.job_created(evaluation)
    )
    handler(body=doc, logger=None)
    [span] = exporter.get_finished_spans()
    trace_id, traceparent = builders.trace_context(evaluation)
    env = {e["name"]: e.get("value") for e in builders.build_job(evaluation, SETTINGS)[
        "spec"]["template"]["spec"]["containers"][0]["env"]}  # fmt: skip
    assert env["TRACEPARENT"] == traceparent == f"00-{'-'.join(ids(span))}-01"
    assert ids(span)[0] == trace_id
    assert span.parent is None
    assert span.name == "reconcile created"
    assert dict(span.attributes or {}) == {
        "k8s.namespace.name": "team-a",
        "mlmodelscope.evaluation": "digits-cpu",
        "mlmodelscope.generation": 1,
        "mlmodelscope.reconcile.handler": "created",
        "mlmodelscope.reconcile.outcome": "success",
        "mlmodelscope.job.created": "digits-cpu-g1",
    }
    assert span.start_time < span.end_time
    resource = span.resource.attributes
    assert resource["service.name"] == "mlmodelscope-operator"
    assert resource["k8s.pod.name"] == "operator-abc"
    histogram = "mlmodelscope_operator_reconcile_duration_seconds_count"
    assert metric(instruments, histogram, handler="created", outcome="success") == 1
    assert metric(instruments, "mlmodelscope_operator_jobs_created_total", namespace="team-a") == 1


def test_other_reconciles_of_the_run_are_spans_of_its_trace_with_their_own_ids(
    instruments: Instruments, exporter: InMemorySpanExporter, make_doc: Any
) -> None:
    doc = make_doc(generation=2)
    evaluation = parse_evaluation(doc)
    job = builders.build_job(evaluation, SETTINGS)
    assert Run.of_job(job) == Run.of_evaluation(doc)

    def collect_then_fail() -> None:
        instrument.results_collected("team-a")
        raise kopf.TemporaryError("the API server is busy", delay=1)

    handler = wrapped(instruments, "job", Run.of_job, collect_then_fail)
    with pytest.raises(kopf.TemporaryError):
        handler(body=job)
    wrapped(instruments, "resumed", Run.of_evaluation, lambda: None)(body=doc)
    failed, resumed = exporter.get_finished_spans()
    trace_id, traceparent = builders.trace_context(evaluation)
    admitting = traceparent.split("-")[2]
    for span in (failed, resumed):
        assert ids(span)[0] == trace_id and ids(span)[1] != admitting
        assert span.parent is None
        assert "mlmodelscope.job.created" not in (span.attributes or {})
    assert failed.attributes is not None
    assert failed.attributes["k8s.job.name"] == "digits-cpu-g2"
    assert failed.attributes["mlmodelscope.reconcile.outcome"] == "temporary_error"
    assert failed.attributes["mlmodelscope.results.collected"] is True
    assert failed.status.status_code == StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]
    histogram = "mlmodelscope_operator_reconcile_duration_seconds_count"
    assert metric(instruments, histogram, handler="job", outcome="temporary_error") == 1
    assert metric(instruments, histogram, handler="resumed", outcome="success") == 1
    collected = "mlmodelscope_operator_results_collected_total"
    assert metric(instruments, collected, namespace="team-a") == 1


def test_a_slot_freed_by_one_job_admits_a_queued_run_in_that_runs_trace(
    instruments: Instruments, exporter: InMemorySpanExporter, make_doc: Any
) -> None:
    ending = parse_evaluation(make_doc("first"))
    queued_doc = make_doc("second")
    queued_doc["metadata"]["uid"] = OTHER_UID
    queued = parse_evaluation(queued_doc)
    job = builders.build_job(ending, SETTINGS)
    wrapped(instruments, "job", Run.of_job, lambda: instrument.job_created(queued))(body=job)
    reconcile, admit = exporter.get_finished_spans()
    assert ids(reconcile)[0] == builders.trace_context(ending)[0]
    assert f"00-{'-'.join(ids(admit))}-01" == builders.trace_context(queued)[1]
    assert admit.name == "admit" and admit.parent is None
    assert admit.attributes is not None
    assert admit.attributes["mlmodelscope.evaluation"] == "second"
    assert admit.attributes["mlmodelscope.job.created"] == "second-g1"
    [link] = admit.links
    assert link.context.span_id == reconcile.get_span_context().span_id


def test_handlers_without_a_run_and_hooks_outside_a_reconcile_record_no_span(
    instruments: Instruments, exporter: InMemorySpanExporter, make_evaluation: Any
) -> None:
    evaluation: ModelEvaluation = make_evaluation()
    instrument.job_created(evaluation)  # a handler function called directly: nothing happens
    instrument.results_collected("team-a")
    wrapped(instruments, "pod", None, lambda: None)(body={"kind": "Pod", "metadata": {}})
    assert exporter.get_finished_spans() == ()
    histogram = "mlmodelscope_operator_reconcile_duration_seconds_count"
    assert metric(instruments, histogram, handler="pod", outcome="success") == 1
    text = instruments.metrics.render().decode() if instruments.metrics else ""
    assert "mlmodelscope_operator_jobs_created_total{" not in text


def test_tracing_is_off_without_an_endpoint_or_when_the_otel_variables_say_so() -> None:
    assert OperatorTracer.create(None, {}) is None
    assert OperatorTracer.create("http://otel:4318", {"OTEL_SDK_DISABLED": "true"}) is None
    assert OperatorTracer.create("http://otel:4318", {"OTEL_TRACES_EXPORTER": "none"}) is None
    tracer = OperatorTracer.create("http://otel:4318", {})
    assert tracer is not None
    tracer.shutdown(timeout_s=0.1)  # nothing queued: no connection is made
    off = Instruments.start(OperatorSettings.from_env({"MLMS_OPERATOR_METRICS_PORT": "0"}), {})
    assert (off.metrics, off.tracer, off.server) == (None, None, None)
    off.stop()
