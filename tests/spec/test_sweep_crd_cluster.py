"""The EvaluationSweep CRD on a real kube-apiserver: it installs next to ModelEvaluation, the
example sweeps are admitted, every hostile sweep the Python validation refuses is refused by
admission naming the same field (the cap with the same words), printer columns read the
status, and `kubectl explain` reads the models' docstrings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from crd_server import explain, server_dry_run
from spec_cases import HOSTILE, SWEEP, sweep

from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.spec import MAX_CHILDREN, SpecValidationError, parse_sweep
from mlmodelscope.spec.sweep import CAP_MESSAGE

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).parents[2]
SWEEP_EXAMPLES = sorted((ROOT / "examples" / "sweeps").glob("*.yaml"))


@pytest.fixture(scope="module")
def sweep_cluster(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for crd in ("modelevaluations", "evaluationsweeps"):
        cluster.wait_established(f"{crd}.mlmodelscope.io")
    return cluster


@pytest.mark.parametrize("example", SWEEP_EXAMPLES, ids=lambda p: p.name)
def test_example_sweeps_are_admitted(sweep_cluster: Cluster, namespace: str, example: Path) -> None:
    for document in yaml.safe_load_all(example.read_text()):
        assert server_dry_run(sweep_cluster, namespace, document) == ""


def test_admission_refuses_what_python_refuses(sweep_cluster: Cluster, namespace: str) -> None:
    for case in HOSTILE:
        document, expected = case.values
        path = expected.split(":", 1)[0]
        with pytest.raises(SpecValidationError):
            parse_sweep(document)
        error = server_dry_run(sweep_cluster, namespace, document)
        assert error, f"{case.id}: admitted by the API server, refused by parse_sweep"
        assert path in error, f"{case.id}: expected {path} in {error}"


def test_the_cap_is_refused_with_the_same_message(sweep_cluster: Cluster, namespace: str) -> None:
    models = [{"name": f"m{i}", "model": SWEEP["spec"]["matrix"]["models"][0]["model"]}
              for i in range(MAX_CHILDREN // 8 + 1)]  # fmt: skip
    over = sweep(models=models, batchSizes=[1, 2, 4, 8, 16, 32, 64, 128])
    error = server_dry_run(sweep_cluster, namespace, over)
    assert CAP_MESSAGE in " ".join(error.split()), error
    at_cap = sweep(models=models[:-1], batchSizes=[1, 2, 4, 8, 16, 32, 64, 128])
    assert server_dry_run(sweep_cluster, namespace, at_cap) == ""


def test_defaults_columns_and_status(sweep_cluster: Cluster, namespace: str) -> None:
    document = yaml.safe_load((ROOT / "examples/sweeps/digits-frameworks.yaml").read_text())
    sweep_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(document))
    name = document["metadata"]["name"]
    stored = yaml.safe_load(
        sweep_cluster.kubectl("get", "sweep", "-n", namespace, name, "-o", "yaml").stdout
    )
    assert stored["spec"]["suspend"] is False
    assert stored["spec"]["template"]["scenario"]["minQueryCount"] == 200
    assert stored["spec"]["template"]["hardware"]["device"] == "cpu"  # server-side defaults
    parse_sweep({k: v for k, v in stored.items() if k != "status"})  # what the operator reads

    status = {
        "phase": "Running", "total": 12, "created": 9, "succeeded": 7, "failed": 0,
        "active": 2, "progress": "7/12 Succeeded",
        "children": [{"name": "digits-frameworks-digits-onnxruntime-b1", "phase": "Succeeded",
                      "p50Ms": 0.2, "p99Ms": 0.9, "throughput": 5000.5, "top1": 0.97}],
    }  # fmt: skip
    sweep_cluster.kubectl(
        "patch", "sweep", name, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    table = sweep_cluster.kubectl("get", "sweep", "-n", namespace).stdout.splitlines()
    header = table[0].split()
    assert header == ["NAME", "PHASE", "PROGRESS", "ACTIVE", "FAILED", "PARALLELISM", "AGE"]
    assert "Running   7/12 Succeeded   2" in " ".join(table[1].split("  ")) or (
        "7/12 Succeeded" in table[1] and "Running" in table[1]
    )
    wide = sweep_cluster.kubectl("get", "evaluationsweeps", "-n", namespace, "-o", "wide").stdout
    assert "SUSPENDED" in wide and "POLICY" in wide and "Continue" in wide
    listed = sweep_cluster.kubectl("get", "mlmodelscope", "-n", namespace).stdout
    assert "evaluationsweep" in listed  # the category lists both kinds


def test_kubectl_explain_reads_well(sweep_cluster: Cluster) -> None:
    top = explain(sweep_cluster, "evaluationsweep")
    assert "runs a matrix of ModelEvaluations" in top
    matrix = explain(sweep_cluster, "evaluationsweep.spec.matrix")
    assert "Every combination of one entry per axis becomes one child ModelEvaluation" in matrix
    for field in ("models", "frameworks", "hardware", "scenarios", "batchSizes"):
        assert field in matrix
    models = explain(sweep_cluster, "evaluationsweep.spec.matrix.models")
    assert "exports" in models and "replacing spec.template.preprocessing" in models
    assert "at most" in explain(sweep_cluster, "evaluationsweep.spec.parallelism") or (
        "running" in explain(sweep_cluster, "evaluationsweep.spec.parallelism")
    )
    policy = explain(sweep_cluster, "evaluationsweep.spec.failurePolicy")
    assert "Stop: create no further children" in policy
    phase = explain(sweep_cluster, "evaluationsweep.status.phase")
    for word in ("Pending", "Running", "Suspended", "Succeeded", "Failed", "Stopped"):
        assert word in phase
    template = explain(sweep_cluster, "evaluationsweep.spec.template.scenario.targetQPS")
    assert "FindPeakPerformance" in template  # the ModelEvaluation's own words, reused
