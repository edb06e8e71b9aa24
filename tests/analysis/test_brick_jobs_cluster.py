"""DLBricks bricks as Kubernetes Jobs on the real node (`mlms dlbricks-jobs`).

The bricks of a small zoo model are exported (`mlms dlbricks --export`) onto a claim, and
measured by two Jobs in the onnxruntime agent image, from the dev registry, in a namespace
that enforces Pod Security `restricted`. Their timings land in a SQLite store under the stack
the node's worker printed; a second run reuses every brick and starts no measuring Job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mlmodelscope.analysis.brick_jobs import JOB_NAME_LABEL, RUN_LABEL
from mlmodelscope.analysis.brick_lines import parse_output
from mlmodelscope.analysis.brickstore import stack_key
from mlmodelscope.analysis.bricksuite import read_suite
from mlmodelscope.cli import app
from mlmodelscope.contract.kube import Kube
from mlmodelscope.devcluster import node
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.store import open_store
from mlmodelscope.zoo import ensure_zoo_model

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

ON_REAL_NODE = [
    "--node-selector",
    "{}={}".format(*next(iter(node.SELECTOR.items()))),
    "--toleration",
    f"{node.TAINT['key']}={node.TAINT['value']}:{node.TAINT['effect']}",
]


@pytest.fixture
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster.api_client())


@pytest.fixture
def suite_claim(cluster: Cluster, namespace: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """resnet18 (zoo, test size) exported as a brick suite into ``suite/`` of a claim on a
    hostPath volume, readable by the image's user: the claim's name and the suite folder."""
    model = tmp_path / "resnet18.onnx"  # the suite names a model by its file's stem
    shutil.copyfile(ensure_zoo_model("resnet18", small=True).path, model)
    volume = f"{namespace}-bricks"
    folder = cluster.run_dir / "volumes" / volume
    exported = CliRunner().invoke(
        app, ["dlbricks", str(model), "--export", str(folder / "suite"), "--no-store"]
    )
    assert exported.exit_code == 0, exported.output
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    claim = "bricks"
    for manifest in claim_manifests(folder, namespace, claim, volume):
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    try:
        yield claim, folder / "suite"
    finally:
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)
        shutil.rmtree(folder, ignore_errors=True)


def claim_manifests(folder: Path, namespace: str, claim: str, volume: str) -> list[dict[str, Any]]:
    """A read-only hostPath PersistentVolume on ``folder`` and a claim bound to it."""
    reserved = {"namespace": namespace, "name": claim}
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "claimRef": reserved,
                "hostPath": {"path": str(folder), "type": "Directory"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def mlms(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`mlms ARGS` in a child process that reaches the cluster through $KUBECONFIG."""
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    command = [sys.executable, "-m", "mlmodelscope", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)


def jobs_command(namespace: str, image: str, store: Path, jobs: int) -> list[str]:
    """`mlms dlbricks-jobs` on the test's claim, on the real node, with a quick protocol."""
    return [
        "dlbricks-jobs",
        "pvc://bricks/suite",
        "--namespace",
        namespace,
        "--jobs",
        str(jobs),
        "--image",
        image,
        *ON_REAL_NODE,
        "--runs",
        "3",
        "--warmup",
        "1",
        "--store",
        str(store),
    ]


def pods_of_runs(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{namespace}/pods", RUN_LABEL)


def test_bricks_run_as_jobs_on_the_real_node_and_a_second_run_reuses_them(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    node_images: dict[str, str],
    suite_claim: tuple[str, Path],
    tmp_path: Path,
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    _, folder = suite_claim
    suite = read_suite(folder)
    store = tmp_path / "bricks.db"
    command = jobs_command(namespace, node_images["agent-onnxruntime-cpu"], store, jobs=2)

    start = time.monotonic()
    first = mlms(cluster, *command, "--out", str(tmp_path / "first.json"))
    first_s = time.monotonic() - start
    assert first.returncode == 0, first.stdout + first.stderr
    print(first.stdout)
    report = json.loads((tmp_path / "first.json").read_text())
    assert len(report["jobs"]) == 2
    assert report["unique_bricks"] == len(suite.bricks) == 24
    assert (report["bricks_measured"], report["bricks_reused"]) == (24, 0)
    assert report["brick_bench_s"] > 0 and report["problems"] == []
    (model,) = report["models"]
    assert model["model"] == "resnet18" and model["layers"] == 34 and model["estimate_ms"] > 0
    assert "24 measured in 2 Jobs" in first.stdout and "0 reused" in first.stdout

    pods = pods_of_runs(kube, namespace)
    assert len(pods) == 3  # the plan Job's and the two measuring Jobs'
    assert {p["spec"]["nodeName"] for p in pods} == {node.NAME}
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    (plan,) = [p for p in pods if p["metadata"]["labels"][JOB_NAME_LABEL].endswith("-plan")]
    plan_log = kube.text(f"/api/v1/namespaces/{namespace}/pods/{plan['metadata']['name']}/log")
    node_stack = parse_output(plan_log).stack
    assert node_stack is not None and node_stack["runs"] == 3
    assert report["stack_key"] == stack_key(node_stack)  # the stack the node printed

    opened = open_store(str(store))
    try:
        stored = opened.brick_timings(stack_key(node_stack), [b.key for b in suite.bricks])
    finally:
        opened.close()
    assert set(stored) == {b.key for b in suite.bricks}
    assert all(t.p50_ms > 0 and t.runs == 3 and t.warmup == 1 for t in stored.values())

    start = time.monotonic()
    second = mlms(cluster, *command, "--out", str(tmp_path / "second.json"))
    second_s = time.monotonic() - start
    assert second.returncode == 0, second.stdout + second.stderr
    print(second.stdout)
    again = json.loads((tmp_path / "second.json").read_text())
    assert again["jobs"] == [] and again["stack_key"] == report["stack_key"]
    assert (again["bricks_measured"], again["bricks_reused"]) == (0, 24)
    assert again["reuse_saved_s"] == pytest.approx(sum(t.measure_s for t in stored.values()))
    assert again["models"][0]["estimate_ms"] == pytest.approx(
        sum(stored[k].p50_ms for k in suite.models[0].layers)
    )
    assert "0 measured in 0 Jobs" in second.stdout and "24 reused" in second.stdout
    assert len(pods_of_runs(kube, namespace)) == 4  # one more plan Job, no measuring Job
    print(f"bricks as Jobs on the real node: first run {first_s:.0f}s, second {second_s:.0f}s")


def test_a_job_that_measures_less_than_asked_fails_the_run_naming_it_and_keeps_the_rest(
    cluster: Cluster,
    namespace: str,
    node_images: dict[str, str],
    suite_claim: tuple[str, Path],
    tmp_path: Path,
) -> None:
    """One brick's file is gone from the claim: its Job measures the other 23, fails, and is
    named; the 23 timings are in the store."""
    _, folder = suite_claim
    suite = read_suite(folder)
    lost = suite.bricks[5]
    (folder / lost.file).unlink()
    store = tmp_path / "bricks.db"
    command = jobs_command(namespace, node_images["agent-onnxruntime-cpu"], store, jobs=1)

    run = mlms(cluster, *command, "--out", str(tmp_path / "report.json"))
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    (job,) = report["jobs"]
    assert report["bricks_measured"] == 23 and report["models"][0]["estimate_ms"] is None
    assert f"Job {job} failed" in run.stderr and f"brick {lost.key}: NoSuchFile" in run.stderr
    assert f"Job {job} measured 23 of 24 bricks (missing {lost.key[:12]})" in run.stderr
    opened = open_store(str(store))
    try:
        stored = opened.brick_timings(report["stack_key"], [b.key for b in suite.bricks])
    finally:
        opened.close()
    assert set(stored) == {b.key for b in suite.bricks} - {lost.key}


def test_a_job_whose_image_cannot_be_pulled_ends_the_run_and_is_deleted(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    real_node: str,
    suite_claim: tuple[str, Path],
    tmp_path: Path,
) -> None:
    image = "registry.mlmodelscope.local/mlmodelscope/no-such-image:0"
    run = mlms(cluster, *jobs_command(namespace, image, tmp_path / "bricks.db", jobs=1))
    assert run.returncode == 1, run.stdout + run.stderr
    assert re.search(r"Job dlbricks-\w+-plan stuck: (ErrImagePull|ImagePullBackOff)", run.stderr)
    assert kube.list(f"/apis/batch/v1/namespaces/{namespace}/jobs", RUN_LABEL) == []
