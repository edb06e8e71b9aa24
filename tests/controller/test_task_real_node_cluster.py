"""Tasks through the operator on the real node, in the project's agent images, under Pod
Security `restricted`: a detection ModelEvaluation whose mAP reaches its status and kubectl's
columns, and examples/sweeps/tasks-frameworks.yaml (detection, segmentation and text
classification x the three frameworks) with every child Succeeded and its task's metric in
the sweep's table.

Unlike test_task_cluster.py (the exec node: the agent from this venv), each pod runs the
framework's image, so this checks that the images carry the `tasks` extra, and it reads the
reference task models and their data from a PersistentVolumeClaim, as on any cluster.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_evaluations import (
    ENDED,
    QUICK_SCENARIO,
    REPO,
    apply,
    children,
    folder_claim,
    get,
    wait_sweep,
)
from operator_process import OperatorProcess

from mlmodelscope.agent.tasks.reference import ensure_task_models
from mlmodelscope.contract.kube import Kube, job_path
from mlmodelscope.controller import names
from mlmodelscope.controller.settings import image_variable
from mlmodelscope.devcluster import node
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.spec.evaluation import Device, FrameworkName

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
ON_REAL_NODE = {"nodeSelector": dict(node.SELECTOR), "tolerations": [dict(node.TOLERATION)]}
SWEEP = REPO / "examples" / "sweeps" / "tasks-frameworks.yaml"
EXAMPLE_CLAIM = "mlmodelscope-tasks"
METRICS = {"detector": ("map", 0.25), "segmenter": ("miou", 0.3), "text": ("accuracy", 0.9)}
"""Per models entry of the sweep: its primary metric and the least the reference model
scores on its data (test_task_runs.py holds the exact values against the libraries)."""


@contextmanager
def copied_claim(
    cluster: Cluster, namespace: str, source: Path, claim: str, volume: str
) -> Iterator[str]:
    """A claim in ``namespace`` on a hostPath volume holding a copy of ``source``, readable by
    the images' user 65532."""
    folder = cluster.run_dir / "volumes" / volume
    shutil.copytree(source, folder, symlinks=False, dirs_exist_ok=True)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    for manifest in folder_claim(folder, namespace, claim, volume):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    try:
        yield claim
    finally:
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tasks_claim(cluster: Cluster, namespace: str) -> Iterator[str]:
    """The reference task models and their data (``ensure_task_models``) on a claim."""
    source = ensure_task_models()
    with copied_claim(cluster, namespace, source, "task-models", f"{namespace}-tasks") as claim:
        yield claim


@pytest.fixture
def shapes_claim(cluster: Cluster, namespace: str) -> Iterator[str]:
    """The detection data alone (the shapes images and their COCO file) on a second claim."""
    source = ensure_task_models() / "shapes"
    with copied_claim(cluster, namespace, source, "shapes-data", f"{namespace}-shapes") as claim:
        yield claim


@pytest.fixture
def images(node_images: dict[str, str]) -> dict[str, str]:
    """The operator's image variables for the CPU agents: the references node_images gives
    (what a platform team sets through the chart's operator.images)."""
    return {
        image_variable(FrameworkName(f), Device.CPU): node_images[f"agent-{f}-cpu"]
        for f in FRAMEWORKS
    }


@pytest.fixture
def operator(
    cluster: Cluster,
    namespace: str,
    agent_rbac: str,
    images: dict[str, str],
    start_operator: Callable[..., OperatorProcess],
) -> OperatorProcess:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    return start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, **images)


def detection_spec(claim: str, data_claim: str | None = None) -> dict[str, Any]:
    """examples/tasks/detection.yaml's spec on the claim (its data on ``data_claim`` when
    given), run on the real node."""
    data = f"pvc://{data_claim}" if data_claim else f"pvc://{claim}/shapes"
    return {
        "model": {
            "name": "shapes-detector",
            "uri": f"pvc://{claim}/detector.onnx",
            "format": "onnx",
            "inputs": [{"name": "input", "shape": [-1, 3, 48, 48]}],
            "outputs": [
                {"name": "boxes", "shape": [-1, 36, 4]},
                {"name": "scores", "shape": [-1, 36]},
                {"name": "classes", "shape": [-1, 36]},
            ],
        },
        "preprocessing": [
            {"decode": {"mode": "RGB"}},
            {"toFloat": {}},
            {"scale": {"factor": 1 / 255}},
            {"layout": {"from": "HWC", "to": "CHW"}},
        ],
        "framework": {"name": "onnxruntime", "intraOpThreads": 1},
        "dataset": {
            "type": "coco",
            "path": f"{data}/images",
            "annotations": f"{data}/instances.json",
        },
        "task": {
            "type": "detection",
            "detection": {"boxFormat": "cxcywh", "normalized": True, "nmsIou": 0.5},
        },
        "scenario": QUICK_SCENARIO,
        "hardware": ON_REAL_NODE,
        "timeout": "5m",
    }


def image_of(kube: Kube, namespace: str, evaluation: str) -> str:
    """The image of the evaluation's Job."""
    selector = f"{names.LABEL_EVALUATION}={evaluation}"
    (job,) = kube.list(job_path(namespace), selector)
    return str(job["spec"]["template"]["spec"]["containers"][0]["image"])


def test_a_detection_evaluation_in_its_image_reports_its_map(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    tasks_claim: str,
    shapes_claim: str,
    images: dict[str, str],
    operator: OperatorProcess,
) -> None:
    """The model on one claim and its images and COCO file on another: both are mounted."""
    start = time.monotonic()
    manifest = {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": "detect"},
        "spec": detection_spec(tasks_claim, shapes_claim),
    }
    apply(cluster, namespace, manifest)

    def ended() -> dict[str, Any] | None:
        status = get(kube, namespace, "detect").get("status") or {}
        return status if status.get("phase") in ENDED else None

    status = wait_for("the detection to end", ended, 300, detail=lambda: operator.tail(40))
    assert status["phase"] == "Succeeded", status.get("message")
    assert status["stack"]["node"] == node.NAME
    summary = status["summary"]
    assert summary["metric"] == "map" and summary["metricValue"] > 0.25, summary
    assert all(row["metric"] == "map" for row in status["results"])
    table = cluster.kubectl("get", "meval", "detect", "-n", namespace).stdout.splitlines()
    header, row = table  # columns at the header's offsets (MODELREF is empty here)
    metric, value = row[header.index(" METRIC ") + 1 :].split()[:2]
    assert metric == "map", table
    assert float(value) == pytest.approx(summary["metricValue"], abs=1e-4), table
    onnxruntime = images[image_variable(FrameworkName.ONNXRUNTIME, Device.CPU)]
    assert image_of(kube, namespace, "detect") == onnxruntime
    print(f"detection on the real node: {time.monotonic() - start:.0f}s, {summary}")


def tasks_sweep(claim: str) -> dict[str, Any]:
    """examples/sweeps/tasks-frameworks.yaml on this test's claim, on the real node, with a
    quick scenario (one batch size) and every child at once: most of a child is its image's
    start-up, not the measurement."""
    text = SWEEP.read_text().replace(f"pvc://{EXAMPLE_CLAIM}/", f"pvc://{claim}/")
    document: dict[str, Any] = yaml.safe_load(text)
    template = document["spec"]["template"]
    template.update(scenario=dict(QUICK_SCENARIO), hardware=ON_REAL_NODE, timeout="8m")
    document["spec"]["parallelism"] = 9
    return document


def test_the_tasks_by_frameworks_sweep_succeeds_in_the_images(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    tasks_claim: str,
    images: dict[str, str],
    operator: OperatorProcess,
) -> None:
    start = time.monotonic()
    document = tasks_sweep(tasks_claim)
    name = document["metadata"]["name"]
    apply(cluster, namespace, document)
    st = wait_sweep(kube, namespace, name, lambda s: s.get("phase") in ENDED, "ended", 780)
    seconds = time.monotonic() - start
    assert st["phase"] == "Succeeded", (st.get("message"), operator.tail(40))
    assert st["progress"] == "9/9 Succeeded"
    values: dict[str, dict[str, float]] = {}
    for row in st["children"]:
        metric, floor = METRICS[row["model"]]
        assert row["phase"] == "Succeeded" and row["metric"] == metric, row
        assert row["metricValue"] > floor, row
        values.setdefault(row["model"], {})[row["framework"]] = row["metricValue"]
    for model, by_framework in values.items():  # the same weights in three frameworks
        assert set(by_framework) == set(FRAMEWORKS), model
        assert max(by_framework.values()) - min(by_framework.values()) <= 0.005, values
    for item in children(kube, namespace, name):
        status, labels = item["status"], item["metadata"]["labels"]
        assert status["stack"]["node"] == node.NAME, item["metadata"]["name"]
        framework = FrameworkName(labels["mlmodelscope.io/framework"])
        want = images[image_variable(framework, Device.CPU)]
        assert image_of(kube, namespace, item["metadata"]["name"]) == want
    print(f"tasks x frameworks sweep on the real node: {seconds:.0f}s, {values}")
