"""Asking the dev cluster's real kube-apiserver about spec documents: strict server-side dry
runs, as a user's `kubectl apply` gets them, and `kubectl explain`."""

from __future__ import annotations

import time
from typing import Any

import yaml

from mlmodelscope.devcluster.cluster import Cluster


def server_dry_run(cluster: Cluster, namespace: str, document: dict[str, Any]) -> str:
    """kubectl's strict server-side validation, as a user's `kubectl apply` gets it."""
    proc = cluster.kubectl(
        "apply", "-n", namespace, "--dry-run=server", "--validate=strict", "-f", "-",
        input=yaml.safe_dump(document), check=False,
    )  # fmt: skip
    return "" if proc.returncode == 0 else proc.stderr


def explain(cluster: Cluster, path: str) -> str:
    """`kubectl explain`, retried while the API server publishes the new OpenAPI."""
    deadline = time.monotonic() + 30
    while True:
        proc = cluster.kubectl("explain", path, check=False)
        if proc.returncode == 0 or time.monotonic() > deadline:
            assert proc.returncode == 0, proc.stderr
            return " ".join(proc.stdout.split())
        time.sleep(1)
