"""What the operator's tests on the real control plane share: digits ModelEvaluations that
run for real on the exec node, applying them, and reading their phase, Jobs, Events and
conditions; and EvaluationSweeps' status and children."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from meval_docs import merge

from mlmodelscope.contract.kube import Kube, evaluation_path, job_path, sweep_path
from mlmodelscope.controller import names
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.spec.sweep import LABEL_SWEEP

REPO = Path(__file__).resolve().parents[2]
EXEC_CPU = {"mlmodelscope.io/simulation": "exec", "mlmodelscope.io/pool": "cpu"}
SIMULATED_TOLERATION = {
    "key": "mlmodelscope.io/simulation",
    "operator": "Equal",
    "value": "kwok",
    "effect": "NoSchedule",
}
ENDED = ("Succeeded", "Failed")
QUICK_SCENARIO: dict[str, Any] = {
    "batchSizes": [1],
    "warmup": 2,
    "minQueryCount": 20,
    "minDuration": "20ms",
    "stability": {"maxWindows": 2},
}


def evaluation(name: str, digits_onnx: Path, **spec: Any) -> dict[str, Any]:
    """A digits ModelEvaluation that runs for real on the CPU exec node in about a second
    (``hardware``, when given, replaces the exec node selector instead of merging with it)."""
    hardware = spec.pop("hardware", {"nodeSelector": EXEC_CPU})
    base = {
        "model": {
            "name": "digits",
            "uri": f"file://{digits_onnx}",
            "format": "onnx",
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
            "outputs": [{"name": "logits", "shape": [-1, 10]}],
        },
        "preprocessing": [{"scale": {"factor": 0.0625}}, {"layout": {"from": "HWC", "to": "CHW"}}],
        "framework": {"name": "onnxruntime", "intraOpThreads": 1},
        "dataset": {"type": "digits"},
        "scenario": QUICK_SCENARIO,
        "hardware": hardware,
        "timeout": "5m",
    }
    metadata: dict[str, Any] = {"name": name}
    if "labels" in spec:
        metadata["labels"] = spec.pop("labels")
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": metadata,
        "spec": merge(base, spec),
    }


def apply(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> str:
    return cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest)
    ).stdout


def get(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(evaluation_path(namespace, name))


def phase_of(kube: Kube, namespace: str, name: str) -> str | None:
    phase = (get(kube, namespace, name).get("status") or {}).get("phase")
    return str(phase) if phase else None


def wait_phase(
    kube: Kube, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 120.0
) -> dict[str, Any]:
    """Wait until the evaluation reaches one of ``phases`` and return it."""
    wait_for(
        f"{namespace}/{name} to reach {'/'.join(phases)}",
        lambda: phase_of(kube, namespace, name) in phases,
        timeout,
    )
    return get(kube, namespace, name)


def jobs(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return kube.list(job_path(namespace), names.MANAGED_SELECTOR)


def events(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list(f"/api/v1/namespaces/{namespace}/events")
        if e["involvedObject"].get("kind") == "ModelEvaluation"
        and e["involvedObject"].get("name") == name
    ]


def events_with(
    kube: Kube, namespace: str, name: str, *reasons: str, timeout: float = 15.0
) -> list[dict[str, Any]]:
    """The evaluation's events once every one of ``reasons`` is among them. The operator posts
    an event right after the status patch it describes, so a test that has just seen the new
    status may list the events a moment before that one is created."""
    found: list[dict[str, Any]] = []

    def present() -> bool:
        found[:] = events(kube, namespace, name)
        return set(reasons) <= {e["reason"] for e in found}

    wait_for(f"events {', '.join(reasons)} on {namespace}/{name}", present, timeout)
    return found


def condition(ev: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (ev.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    raise AssertionError(f"no {kind} condition in {ev.get('status')}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gone(kube: Kube, path: str) -> bool:
    return kube.get_or_none(path) is None


def get_sweep(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(sweep_path(namespace, name))


def sweep_status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_sweep(kube, namespace, name).get("status") or {})


def wait_sweep(
    kube: Kube,
    namespace: str,
    name: str,
    done: Callable[[dict[str, Any]], bool],
    what: str,
    timeout: float = 300.0,
) -> dict[str, Any]:
    wait_for(f"sweep {name}: {what}", lambda: done(sweep_status(kube, namespace, name)), timeout)
    return sweep_status(kube, namespace, name)


def children(kube: Kube, namespace: str, sweep: str) -> list[dict[str, Any]]:
    return kube.list(evaluation_path(namespace), f"{LABEL_SWEEP}={sweep}")


def sweep_manifest(name: str, matrix: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A sweep whose children run on the CPU exec node in a second or two each."""
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "EvaluationSweep",
        "metadata": {"name": name},
        "spec": {
            "matrix": matrix,
            "template": {
                "preprocessing": [
                    {"scale": {"factor": 0.0625}},
                    {"layout": {"from": "HWC", "to": "CHW"}},
                ],
                "dataset": {"type": "digits"},
                "scenario": dict(QUICK_SCENARIO),
                "hardware": {"nodeSelector": EXEC_CPU},
                "timeout": "5m",
            },
            **spec,
        },
    }


def examples_claim(
    cluster: Cluster, namespace: str, claim: str, volume: str
) -> list[dict[str, Any]]:
    """A PersistentVolume ``volume`` on the dev cluster's example models folder (the digits
    CNN in every format) and the claim ``claim`` in ``namespace`` bound to it, as a platform
    team provides models."""
    return folder_claim(cluster.examples_dir, namespace, claim, volume)


def folder_claim(folder: Path, namespace: str, claim: str, volume: str) -> list[dict[str, Any]]:
    """A read-only hostPath PersistentVolume ``volume`` on a host ``folder`` and the claim
    ``claim`` in ``namespace`` bound to it (reserved both ways)."""
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
                "claimRef": {"namespace": namespace, "name": claim},
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
