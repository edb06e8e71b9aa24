"""Under load the operator stays responsive, its memory bounded and its admission cost flat:
benchmarks/operator_load.py at a size CI affords (the 1,000-evaluation figures are in
docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "operator_load.py"
EVALUATIONS = 150
LIMIT = 30
RESYNC_SECONDS = 10.0


def load_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("operator_load", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def probe_namespace(cluster: Cluster, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-probe"
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def serves_metrics(load: Any, port: int) -> bool:
    try:
        return "mlmodelscope_operator" in load.scrape(port)
    except OSError:
        return False


def test_a_backlog_of_evaluations_drains_with_the_operator_responsive_and_lists_flat(
    cluster: Cluster,
    namespace: str,
    probe_namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
) -> None:
    load = load_module()
    port = load.free_port()
    operator = start_operator(
        MLMS_OPERATOR_NAMESPACES=f"{namespace},{probe_namespace}",
        MLMS_OPERATOR_MAX_RUNNING_PER_NAMESPACE=str(LIMIT),
        MLMS_OPERATOR_RESYNC_SECONDS=str(RESYNC_SECONDS),
        MLMS_OPERATOR_METRICS_PORT=str(port),
    )
    assert operator.proc is not None
    wait_for("the operator's /metrics", lambda: serves_metrics(load, port), 60)
    report = load.run_load(
        kube,
        lambda: cluster.kubectl("get", "--raw", "/metrics").stdout,
        lambda: load.scrape(port),
        operator.proc.pid,
        namespace,
        probe_namespace,
        EVALUATIONS,
        LIMIT,
        timeout_s=600,
    )
    print(report.table())
    assert operator.proc.poll() is None, operator.tail()
    remaining = EVALUATIONS - report.deleted
    # kwok "runs" every pod: each remaining evaluation ends its current generation Failed
    # naming the simulated node, with exactly one Job per run generation.
    assert report.phases == {"Failed": remaining}, report.phases
    assert report.reasons == {"SimulatedNode": remaining}, report.reasons
    assert report.duplicate_jobs == []
    # Responsive: once the burst is ingested, a probe in another namespace gets its Job within
    # 5 s while the backlog drains.
    assert report.probe_job_s and max(report.probe_job_s) < load.PROBE_TARGET_S, report.probe_job_s
    # Admission reads the ledger: the LISTs come from the resync (two per tick) and Kopf's
    # watches, not from each of the hundreds of decisions.
    # Each resync tick lists each kind once per watched namespace (two here), Kopf's watches
    # list once per namespace when they (re)start, and only an edited evaluation's new
    # generation lists its own Jobs (to replace the old run): nothing grows with N.
    per_kind = 2 * (math.ceil(report.drain_s / RESYNC_SECONDS) + 2) + 2 * 2
    assert report.lists["modelevaluations"] <= per_kind, report.lists
    assert report.lists["jobs"] <= per_kind + report.edited, report.lists
    assert per_kind + report.edited < EVALUATIONS / 2
    # The operator's own requests, counted by its client: a Job created per run, and the
    # evaluation read once per reconcile and once more per admission from the queue, plus
    # what conflicts cost (the watch feeds every other read).
    own = report.operator_requests_per_run
    assert 0.9 <= own["create jobs"] <= 1.2, own
    assert own.get("get modelevaluations", 0) <= 5, own
    # Bounded: the backlog costs the operator little memory.
    assert report.rss_mib_peak - report.rss_mib_start < 150, report.table()
