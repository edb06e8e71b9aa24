"""End to end against real servers: Prometheus and the Pushgateway (Debian packages) and
Jaeger (built from its pinned module), all started by fixtures on free loopback ports.

A real quick digits evaluation runs with MLMS_PUSHGATEWAY_URL and OTLP export set; PromQL over
Prometheus' HTTP API must return exactly the numbers in the result document, every dashboard
query must run, and Jaeger's query API must return the span tree at model and framework level
for each of the three frameworks.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from mlmodelscope.agent.runner import evaluate
from mlmodelscope.cli import app
from mlmodelscope.contract.schema import SCHEMA_PATH
from mlmodelscope.controller.metrics import OperatorMetrics
from mlmodelscope.devtools.telemetry_servers import Jaeger, Prometheus, Pushgateway
from mlmodelscope.spec import load_evaluations
from mlmodelscope.telemetry.agent import AgentTelemetry

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

DASHBOARD = (
    Path(__file__).parents[2] / "operator" / "mlmodelscope" / "telemetry" / "dashboards"
) / "mlmodelscope.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
NAMESPACE = "telemetry-test"
PARENT_SPAN = "00f067aa0ba902b7"
"""The operator's reconcile span the agent is parented under (via TRACEPARENT)."""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "MLMS_PUSHGATEWAY_URL", "TRACEPARENT", "OTEL_SDK_DISABLED"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture
def operator_endpoint(prometheus: Prometheus) -> Iterator[tuple[OperatorMetrics, str]]:
    """The operator's metrics server, in process, scraped by Prometheus."""
    metrics = OperatorMetrics()
    server = metrics.serve(0, addr="127.0.0.1")
    address = f"127.0.0.1:{server.port}"
    prometheus.scrape("mlmodelscope-operator", address)
    try:
        yield metrics, address
    finally:
        server.stop()


def one(result: list[dict[str, Any]]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def run(tmp_path: Path, make_evaluation: Any, models: Path, framework: str, name: str,
        **sections: Any) -> dict[str, Any]:  # fmt: skip
    path = make_evaluation(tmp_path, models, framework, name, **sections)
    [item] = load_evaluations(path)
    document: dict[str, Any] = evaluate(
        item, output=tmp_path / f"{name}.json", hooks=AgentTelemetry.start
    ).document
    assert document["status"] == "Succeeded", document.get("error")
    return document


def test_promql_returns_the_result_document_numbers(
    prometheus: Prometheus,
    pushgateway: Pushgateway,
    operator_endpoint: tuple[OperatorMetrics, str],
    digits_models: Path,
    make_evaluation: Any,
    tmp_path: Path,
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("MLMS_PUSHGATEWAY_URL", pushgateway.url)
    metrics, _ = operator_endpoint
    prometheus.scrape("pushgateway", pushgateway.address, honor_labels=True)
    name = "prom-digits"
    doc = run(tmp_path, make_evaluation, digits_models, "onnxruntime", name)
    # what the operator sees when the Job has finished: the results in the evaluation's status
    body = {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"model": {"name": "digits-cnn"}, "framework": {"name": "onnxruntime"}},
        "status": {"phase": "Succeeded", "results": doc["results"]},
    }
    metrics.observe(body)
    metrics.observe_reconcile("job", 0.05)

    ev = f'namespace="{NAMESPACE}", evaluation="{name}"'
    for m, row in zip(doc["measurements"], doc["results"], strict=True):
        b = m["batch_size"]
        for key, q in (("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99")):
            op = prometheus.wait_for(
                f'mlmodelscope_evaluation_latency_seconds{{{ev}, batch_size="{b}", quantile="{q}"}}'
            )
            assert one(op) == pytest.approx(row["latency_ms"][key] / 1e3, rel=1e-12, abs=0)
            pushed = prometheus.wait_for(
                f'mlmodelscope_agent_latency_seconds{{job="mlmodelscope-agent", {ev}, '
                f'batch_size="{b}", quantile="{q}"}}'
            )
            assert one(pushed) == m["latency"]["percentiles_s"][key]  # exact: same float
        throughput = prometheus.query(
            f'mlmodelscope_agent_throughput_samples_per_second{{{ev}, batch_size="{b}"}}'
        )
        assert one(throughput) == m["throughput_samples_per_s"]
        op_tp = prometheus.query(
            f'mlmodelscope_evaluation_throughput_samples_per_second{{{ev}, batch_size="{b}"}}'
        )
        assert one(op_tp) == row["throughput"]
    for metric in ("top1", "top5"):
        pushed = prometheus.query(f'mlmodelscope_agent_accuracy_ratio{{{ev}, metric="{metric}"}}')
        assert one(pushed) == doc["accuracy"][metric]
        op = prometheus.query(
            f'max(mlmodelscope_evaluation_accuracy_ratio{{{ev}, metric="{metric}"}})'
        )
        assert one(op) == doc["accuracy"][metric]
    overhead = prometheus.query(f'mlmodelscope_agent_tracing_overhead_ratio{{{ev}, level="model"}}')
    assert len(overhead) == 2  # both batch sizes
    assert one(prometheus.query(f"mlmodelscope_agent_success{{{ev}}}")) == 1
    assert (
        one(
            prometheus.query(
                f'mlmodelscope_evaluations{{namespace="{NAMESPACE}", phase="Succeeded"}}'
            )
        )
        == 1
    )

    # every dashboard query runs; the result panels have data
    empty = dashboard_queries(prometheus)
    assert not {"Latency p50 by batch size", "Throughput by batch size", "Top-1 accuracy",
                "Results table", "Evaluations by phase"} & set(empty), empty  # fmt: skip

    # a rerun replaces the pushed group (batch 8 is gone), forget() drops the operator series
    run(tmp_path, make_evaluation, digits_models, "onnxruntime", name, scenario={"batchSizes": [1]})
    prometheus.wait_for(
        f'mlmodelscope_agent_latency_seconds{{{ev}, batch_size="8"}}', lambda r: not r
    )
    prometheus.wait_for(f'mlmodelscope_agent_latency_seconds{{{ev}, batch_size="1"}}')
    prometheus.wait_for(
        f'mlmodelscope_agent_latency_seconds{{{ev}, batch_size="8"}}', lambda r: not r
    )
    metrics.forget(NAMESPACE, name)
    prometheus.wait_for(f"mlmodelscope_evaluation_latency_seconds{{{ev}}}", lambda r: not r)


def dashboard_queries(prometheus: Prometheus) -> list[str]:
    """Run every panel query (variables set to match all); return titles with no data."""
    dashboard = json.loads(DASHBOARD.read_text())
    substitutions = {
        "$__rate_interval": "1m",
        "${datasource}": "prometheus",
        "$namespace": ".*",
        "$evaluation": ".*",
        "$model": ".*",
        "$framework": ".*",
    }
    empty = []
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for panel in panels:
        results = []
        for target in panel["targets"]:
            expr = target["expr"]
            for key, val in substitutions.items():
                expr = expr.replace(key, val)
            assert "$" not in expr, f"{panel['title']}: unsubstituted variable in {expr}"
            results += prometheus.query(expr)  # raises on a PromQL error
        if not results:
            empty.append(panel["title"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["definition"])
            assert match, variable["definition"]
            selector = match.group(1).replace("$namespace", ".*")
            prometheus.query(f"count by ({match.group(2)}) ({selector})")
    return empty


# ------------------------------------------------------------------------------------ Jaeger


def tree(trace: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    [data] = trace["data"]
    spans = {s["spanID"]: s for s in data["spans"]}
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in data["spans"]:
        for ref in s.get("references", []):
            if ref["refType"] == "CHILD_OF":
                children[ref["spanID"]].append(s)
    return spans, children


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


@pytest.mark.parametrize("framework", ["onnxruntime", "pytorch", "tensorflow"])
def test_jaeger_holds_the_span_tree_at_model_and_framework_level(
    framework: str,
    jaeger: Jaeger,
    digits_models: Path,
    make_evaluation: Any,
    tmp_path: Path,
    clean_env: pytest.MonkeyPatch,
) -> None:
    parent_trace = hashlib.sha256(f"{framework}{time.time()}".encode()).hexdigest()[:32]
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_endpoint)
    clean_env.setenv("TRACEPARENT", f"00-{parent_trace}-{PARENT_SPAN}-01")
    clean_env.setenv("MLMS_NAMESPACE", NAMESPACE)
    clean_env.setenv("MLMS_POD_NAME", f"{framework}-job-abcde")
    clean_env.setenv("MLMS_TRACE_QUERIES", "8")
    name = f"trace-{framework}"
    doc = run(
        tmp_path, make_evaluation, digits_models, framework, name,
        scenario={"batchSizes": [1, 4]}, tracing={"level": "framework"},
    )  # fmt: skip
    assert doc["trace_id"] == parent_trace
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    levels = doc["tracing"]["levels"]
    assert levels["framework"]["profiled_spans"] > 0
    assert levels["framework"]["overhead_vs_untraced"] > -1
    assert doc["tracing"]["exported"] is True
    assert "export_error" not in doc["tracing"]
    written = json.loads((tmp_path / f"{name}.trace.json").read_text())
    trace = jaeger.trace(parent_trace, min_spans=len(written["spans"]))
    spans, children = tree(trace)
    assert len(spans) == len(written["spans"])
    [process] = trace["data"][0]["processes"].values()
    assert process["serviceName"] == "mlmodelscope-agent"
    resource = tags(process)
    assert resource["k8s.namespace.name"] == NAMESPACE
    assert resource["k8s.pod.name"] == f"{framework}-job-abcde"
    assert resource["mlmodelscope.framework"] == framework

    [root] = [s for s in spans.values() if s["operationName"] == f"evaluation {name}"]
    assert root["references"][0]["spanID"] == PARENT_SPAN  # parented under the operator's span
    stages = {s["operationName"]: s for s in children[root["spanID"]]}
    assert {"fetch model", "load dataset", "preprocess", "load model", "measure"} <= set(stages)
    scenarios = {s["operationName"]: s for s in children[stages["measure"]["spanID"]]}
    assert set(scenarios) == {"scenario SingleStream batch 1", "scenario SingleStream batch 4"}
    for scenario in scenarios.values():
        batch = tags(scenario)["mlmodelscope.batch_size"]
        passes = {s["operationName"]: s for s in children[scenario["spanID"]]}
        assert set(passes) == {"traced pass (model)", "traced pass (framework)"}
        for level, pass_span in passes.items():
            queries = children[pass_span["spanID"]]
            assert len(queries) == 8
            for query in queries:
                assert tags(query)["mlmodelscope.batch_size"] == batch
                parts = {s["operationName"]: s for s in children[query["spanID"]]}
                assert set(parts) == {"preprocess", "predict", "postprocess"}
                predict = parts["predict"]
                layers = children[predict["spanID"]]
                if "model" in level:
                    assert not layers
                    continue
                assert layers, f"{framework}: no layer spans under predict"
                start, end = predict["startTime"], predict["startTime"] + predict["duration"]
                for layer in layers:
                    assert tags(layer)["mlmodelscope.span.kind"] == "layer"
                    # anchored to the predict span: inside it (1 µs slack for rounding)
                    assert start <= layer["startTime"] <= end + 1

    # `mlms trace` reads the same trace back from Jaeger
    out = CliRunner().invoke(
        app, ["trace", parent_trace, "--jaeger", jaeger.query_url, "--json", "--top", "3"]
    )
    assert out.exit_code == 0, out.output
    passes = json.loads(out.output)["passes"]
    framework_passes = [p for p in passes if p["level"] == "framework"]
    assert [p["batch_size"] for p in framework_passes] == [1, 4]
    assert len(framework_passes[0]["layers"]) == 3
    assert 0 < sum(r["share_of_predict"] for r in framework_passes[0]["layers"]) <= 1


def test_a_new_pushgateway_starts_empty(pushgateway: Pushgateway, tmp_path: Path) -> None:
    """Debian's Pushgateway persists to /var/lib/prometheus by default (written on stop);
    the test servers must not, or a session reads the groups an earlier one pushed and
    PromQL returns an earlier run's numbers."""
    import urllib.request

    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
    first = Pushgateway(tmp_path / "first")
    try:
        request = urllib.request.Request(
            f"{first.url}/metrics/job/leftover", data=b"mlms_leftover_total 1\n", method="PUT"
        )
        urllib.request.urlopen(request, timeout=5).close()
    finally:
        first.stop()
    second = Pushgateway(tmp_path / "second")
    try:
        with urllib.request.urlopen(f"{second.url}/metrics", timeout=5) as response:
            assert b"mlms_leftover_total" not in response.read()
    finally:
        second.stop()
