"""Tasks through the operator on the real control plane: a detection ModelEvaluation and a
detection EvaluationSweep over the three frameworks, run by the CPU exec node (the agent from
this venv, so the task extra is there) on the reference detector of examples/tasks, with the
primary metric in status, in kubectl's columns and in the sweep's children."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_evaluations import (
    ENDED,
    EXEC_CPU,
    QUICK_SCENARIO,
    apply,
    children,
    get,
    sweep_status,
    wait_phase,
    wait_sweep,
)
from operator_process import OperatorProcess

from mlmodelscope.agent.tasks.reference import ensure_task_models
from mlmodelscope.contract.kube import Kube
from mlmodelscope.devcluster.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def models() -> Path:
    return ensure_task_models()


@pytest.fixture
def operator(start_operator: Callable[..., OperatorProcess], agent_rbac: str) -> OperatorProcess:
    return start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)


def detection_spec(models: Path) -> dict[str, Any]:
    """examples/tasks/detection.yaml's spec with the cached models' absolute paths."""
    return {
        "preprocessing": [
            {"decode": {"mode": "RGB"}},
            {"toFloat": {}},
            {"scale": {"factor": 1 / 255}},
            {"layout": {"from": "HWC", "to": "CHW"}},
        ],
        "dataset": {
            "type": "coco",
            "path": str(models / "shapes" / "images"),
            "annotations": str(models / "shapes" / "instances.json"),
        },
        "task": {
            "type": "detection",
            "detection": {"boxFormat": "cxcywh", "normalized": True, "nmsIou": 0.5},
        },
        "scenario": QUICK_SCENARIO,
        "hardware": {"nodeSelector": EXEC_CPU},
        "timeout": "5m",
    }


def detector(models: Path, suffix: str = ".onnx", fmt: str = "onnx") -> dict[str, Any]:
    return {
        "name": "shapes-detector",
        "uri": f"file://{models / ('detector' + suffix)}",
        "format": fmt,
        "inputs": [{"name": "input", "shape": [-1, 3, 48, 48]}],
        "outputs": [
            {"name": "boxes", "shape": [-1, 36, 4]},
            {"name": "scores", "shape": [-1, 36]},
            {"name": "classes", "shape": [-1, 36]},
        ],
    }


def test_a_detection_evaluation_reports_its_map_in_status_and_in_kubectl(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, models: Path
) -> None:
    manifest = {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": "detect"},
        "spec": {
            "model": detector(models),
            "framework": {"name": "onnxruntime", "intraOpThreads": 1},
            **detection_spec(models),
        },
    }
    apply(cluster, namespace, manifest)
    wait_phase(kube, namespace, "detect", ("Succeeded", "Failed"), timeout=240)
    status = get(kube, namespace, "detect")["status"]
    assert status["phase"] == "Succeeded", status.get("message")
    summary = status["summary"]
    assert summary["metric"] == "map" and summary["metricValue"] > 0.25, summary
    assert all(row["metric"] == "map" for row in status["results"])
    assert f"map {summary['metricValue']:.4f}" in status["message"]
    table = cluster.kubectl("get", "meval", "detect", "-n", namespace).stdout.splitlines()
    assert "METRIC" in table[0].split() and "map" in table[1].split(), table


def test_a_detection_sweep_over_three_frameworks_agrees_on_map(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, models: Path
) -> None:
    template = detection_spec(models)
    template["scenario"] = {k: v for k, v in QUICK_SCENARIO.items() if k != "batchSizes"}
    manifest = {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "EvaluationSweep",
        "metadata": {"name": "tasks"},
        "spec": {
            "matrix": {
                "models": [
                    {
                        "name": "detector",
                        "model": detector(models),
                        "exports": [
                            {
                                "format": "torchscript",
                                "uri": f"file://{models / 'detector.torchscript.pt'}",
                            },
                            {
                                "format": "savedmodel",
                                "uri": f"file://{models / 'detector.savedmodel'}",
                            },
                        ],
                    }
                ],
                "frameworks": ["onnxruntime", "pytorch", "tensorflow"],
                "batchSizes": [1],
            },
            "template": template,
            "parallelism": 2,
        },
    }
    apply(cluster, namespace, manifest)
    st = wait_sweep(kube, namespace, "tasks", lambda s: s.get("phase") in ENDED, "ended")
    assert st["phase"] == "Succeeded", st.get("message")
    assert st["progress"] == "3/3 Succeeded"
    values = {
        c["metadata"]["name"]: c["status"]["summary"]["metricValue"]
        for c in children(kube, namespace, "tasks")
    }
    metrics = {c["status"]["summary"]["metric"] for c in children(kube, namespace, "tasks")}
    assert len(values) == 3 and metrics == {"map"}, metrics
    assert max(values.values()) - min(values.values()) <= 0.005, values
    assert sweep_status(kube, namespace, "tasks")["succeeded"] == 3
