"""The operator's own telemetry against real parts: the control plane, `mlms operator
--standalone`, evaluations that really run on the exec node, Prometheus (Debian package)
scraping /metrics the way the chart's ServiceMonitor says, and Jaeger (built from its pinned
module) receiving the operator's and the agent's spans.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_evaluations import (
    apply,
    condition,
    evaluation,
    free_port,
    jobs,
    wait_phase,
)
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, job_path
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.devtools import helm as helm_tool
from mlmodelscope.devtools.telemetry_servers import Jaeger, Prometheus

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

CHART = Path(__file__).resolve().parents[2] / "helm" / "mlmodelscope"
SCRAPE_JOB = "mlmodelscope-operator"
HISTOGRAM = "mlmodelscope_operator_reconcile_duration_seconds"


@pytest.fixture(scope="session")
def helm() -> Path:
    if shutil.which("go") is None and not helm_tool.is_built():
        pytest.skip(f"building helm {helm_tool.HELM_VERSION} needs Go >= 1.26 (or a built cache)")
    return helm_tool.ensure_helm()


def render_chart(helm: Path, *sets: str) -> list[dict[str, Any]]:
    args = [str(helm), "template", "mlms", str(CHART), "--namespace", "mlmodelscope-system"]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def one(manifests: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    return found


def scrape_config(helm: Path, port: int) -> tuple[dict[str, str], dict[str, Any], int]:
    """The operator settings and the scrape the chart publishes for metrics on ``port``:
    (ConfigMap data, the ServiceMonitor's endpoint, the container port it resolves to)."""
    manifests = render_chart(
        helm,
        f"metrics.port={port}",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.interval=1s",
        "metrics.serviceMonitor.scrapeTimeout=1s",
    )
    settings = one(manifests, "ConfigMap", "mlms-mlmodelscope-operator")["data"]
    [endpoint] = one(manifests, "ServiceMonitor")["spec"]["endpoints"]
    service = one(manifests, "Service", "mlms-mlmodelscope-metrics")
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    [container] = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # ServiceMonitor port (a Service port name) -> the Service's targetPort -> container port
    target = container_ports[service_ports[endpoint["port"]]["targetPort"]]
    return settings, endpoint, target


def value(prometheus: Prometheus, promql: str) -> float:
    [sample] = prometheus.query(promql)
    return float(sample["value"][1])


def settles_at(prometheus: Prometheus, promql: str, expected: float) -> None:
    """Wait until the (single-sample) query reads ``expected``."""
    prometheus.wait_for(
        promql, lambda r: len(r) == 1 and float(r[0]["value"][1]) == expected, timeout_s=60
    )


def test_prometheus_scrapes_the_operator_as_the_chart_says_and_the_numbers_match(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    prometheus: Prometheus,
    helm: Path,
) -> None:
    """Two valid evaluations with room for one Job at a time (so one waits in Queued) and one
    whose spec cannot run; then PromQL over what Prometheus scraped says exactly that."""
    settings, endpoint, port = scrape_config(helm, free_port())
    assert settings["MLMS_OPERATOR_METRICS_PORT"] == str(port)
    start_operator(
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac,
        MLMS_OPERATOR_METRICS_PORT=settings["MLMS_OPERATOR_METRICS_PORT"],
        MLMS_OPERATOR_MAX_RUNNING="1",
    )
    prometheus.scrape(
        SCRAPE_JOB,
        f"127.0.0.1:{port}",
        honor_labels=endpoint["honorLabels"],
        path=endpoint["path"],
        interval=endpoint["interval"],
        timeout=endpoint["scrapeTimeout"],
    )
    ns = f'namespace="{namespace}"'
    apply(cluster, namespace, evaluation("first", digits_onnx, scenario={"minDuration": "3s"}))
    wait_for("the first Job", lambda: kube.get_or_none(job_path(namespace, "first-g1")), 60)
    apply(cluster, namespace, evaluation("second", digits_onnx))
    apply(cluster, namespace, evaluation("broken", digits_onnx, model={"format": "torchscript"}))
    queued = wait_phase(kube, namespace, "second", ("Queued",), 60)
    assert condition(queued, "Queued")["reason"] == "ConcurrencyLimit"
    settles_at(prometheus, "mlmodelscope_operator_queue_depth", 1)
    settles_at(prometheus, f'mlmodelscope_evaluations{{{ns}, phase="Queued"}}', 1)
    finished = {
        name: wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 150)
        for name in ("first", "second", "broken")
    }
    assert [finished[n]["status"]["phase"] for n in ("first", "second")] == ["Succeeded"] * 2
    assert condition(finished["broken"], "Failed")["reason"] == "InvalidSpec"
    assert sorted(j["metadata"]["name"] for j in jobs(kube, namespace)) == [
        "first-g1",
        "second-g1",
    ]

    # evaluations by phase: what the API server holds now
    for phase, count in (("Succeeded", 2), ("Failed", 1), ("Queued", 0), ("Running", 0),
                         ("Pending", 0)):  # fmt: skip
        settles_at(prometheus, f'mlmodelscope_evaluations{{{ns}, phase="{phase}"}}', count)
    settles_at(prometheus, "mlmodelscope_operator_queue_depth", 0)
    depth = f"max_over_time(mlmodelscope_operator_queue_depth{{job='{SCRAPE_JOB}'}}[10m])"
    assert value(prometheus, depth) == 1
    # Jobs created and results collected: two of each, none for the broken spec
    settles_at(prometheus, f"mlmodelscope_operator_jobs_created_total{{{ns}}}", 2)
    settles_at(prometheus, f"mlmodelscope_operator_results_collected_total{{{ns}}}", 2)
    # the operator's own requests: the two Jobs created, nothing refused
    requests = "mlmodelscope_operator_api_requests_total"
    settles_at(prometheus, f'sum({requests}{{verb="create", resource="jobs"}})', 2)
    assert value(prometheus, f'sum({requests}{{code="5xx"}}) or vector(0)') == 0
    assert value(prometheus, f'sum({requests}{{resource="modelevaluations/status"}})') >= 6
    # the reconcile histogram: every evaluation created once, the broken one a permanent error
    created = f'{HISTOGRAM}_count{{handler="created", outcome="%s"}}'
    settles_at(prometheus, created % "success", 2)
    settles_at(prometheus, created % "permanent_error", 1)
    jobs_seen = value(prometheus, f'sum({HISTOGRAM}_count{{handler="job"}})')
    assert jobs_seen >= 4  # each Job at least created, then complete
    assert value(prometheus, f'sum({HISTOGRAM}_bucket{{handler="job", le="+Inf"}})') == jobs_seen
    assert value(prometheus, f'sum({HISTOGRAM}_sum{{handler="job"}})') > 0
    p95 = value(
        prometheus,
        f"histogram_quantile(0.95, sum by (le) (rate({HISTOGRAM}_bucket[10m])))",
    )
    assert 0 < p95 < 60
    # the result gauges carry the numbers in .status.results, in seconds
    for name in ("first", "second"):
        [row] = finished[name]["status"]["results"]
        labels = f'{ns}, evaluation="{name}", batch_size="1", scenario="SingleStream"'
        p50 = value(
            prometheus, f'mlmodelscope_evaluation_latency_seconds{{{labels}, quantile="0.5"}}'
        )
        assert p50 == pytest.approx(row["latencyMs"]["p50"] / 1e3, rel=1e-12)
        top1 = value(
            prometheus, f'mlmodelscope_evaluation_accuracy_ratio{{{labels}, metric="top1"}}'
        )
        assert top1 == row["top1"]
    no_results = prometheus.query(f'mlmodelscope_evaluation_valid{{{ns}, evaluation="broken"}}')
    assert no_results == []


def spans_by_id(trace: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(spans by id, service name by process id) of a Jaeger /api/traces answer."""
    [data] = trace["data"]
    services = {pid: p["serviceName"] for pid, p in data["processes"].items()}
    return {s["spanID"]: s for s in data["spans"]}, services


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def parent_of(span: dict[str, Any]) -> str | None:
    refs = [r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
    return refs[0] if refs else None


def test_one_trace_in_jaeger_runs_from_the_admitting_reconcile_through_the_agent(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
    jaeger: Jaeger,
) -> None:
    start_operator(
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac,
        MLMS_OPERATOR_OTLP_ENDPOINT=jaeger.otlp_endpoint,
        MLMS_OPERATOR_METRICS_PORT="0",
        OTEL_BSP_SCHEDULE_DELAY="200",  # the SDK's batch delay (default 5 s)
    )
    manifest = evaluation("traced", digits_onnx, tracing={"level": "model"})
    apply(cluster, namespace, manifest)
    ev = wait_phase(kube, namespace, "traced", ("Succeeded", "Failed"), 150)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    trace_id = ev["status"]["traceID"]
    job = kube.get(job_path(namespace, "traced-g1"))
    env = {
        e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    version, job_trace, admitting, flags = env["TRACEPARENT"].split("-")
    assert (version, job_trace, flags) == ("00", trace_id, "01")

    def whole() -> tuple[dict[str, dict[str, Any]], dict[str, str]] | None:
        spans, services = spans_by_id(jaeger.trace(trace_id))
        names = {(services[s["processID"]], s["operationName"]) for s in spans.values()}
        collected = any(tags(s).get("mlmodelscope.results.collected") for s in spans.values())
        wanted = {("mlmodelscope-operator", "reconcile created"),
                  ("mlmodelscope-agent", "evaluation traced")}  # fmt: skip
        return (spans, services) if wanted <= names and collected else None

    spans, services = wait_for("the operator's and the agent's spans in one trace", whole, 60)
    assert set(services.values()) == {"mlmodelscope-operator", "mlmodelscope-agent"}
    assert {s["traceID"] for s in spans.values()} == {trace_id}
    # the span the Job's TRACEPARENT names is the reconcile that created the Job ...
    admission = spans[admitting]
    assert services[admission["processID"]] == "mlmodelscope-operator"
    assert admission["operationName"] == "reconcile created"
    assert tags(admission)["mlmodelscope.job.created"] == "traced-g1"
    assert tags(admission)["mlmodelscope.reconcile.outcome"] == "success"
    assert parent_of(admission) is None
    # ... and the agent's evaluation span is its child, with the agent's tree below it
    [root] = [s for s in spans.values() if s["operationName"] == "evaluation traced"]
    assert services[root["processID"]] == "mlmodelscope-agent"
    assert parent_of(root) == admitting
    children = {s["operationName"] for s in spans.values() if parent_of(s) == root["spanID"]}
    assert {"load model", "measure"} <= children
    assert any(s["operationName"] == "query" for s in spans.values())
    # the reconcile that read the results back is in the same trace; no parent is missing
    [collecting] = [s for s in spans.values() if tags(s).get("mlmodelscope.results.collected")]
    assert collecting["operationName"] == "reconcile job"
    assert tags(collecting)["k8s.job.name"] == "traced-g1"
    dangling = [s["operationName"] for s in spans.values() if parent_of(s) not in (None, *spans)]
    assert dangling == []
    warnings = [w for s in spans.values() for w in s.get("warnings") or [] if "parent" in w]
    assert warnings == []  # Jaeger's own check: "invalid parent span IDs"
