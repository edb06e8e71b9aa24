"""Hostile specs the CRD admits, run by the operator on the real control plane (issue 15,
hostile input): each ends Failed naming the field at fault (or Succeeded where it is valid),
the operator neither crashes nor retries in a loop, and no credential from a URI reaches its
log, a status, a condition or an Event.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_evaluations import condition, evaluation, events_with, get, wait_phase
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube
from mlmodelscope.devcluster.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

SECRETS = ("s3cr3t-Pa55", "SIGn4ture-S3CRET", "t0k3n-S3CRET")
RETRY_LINES = ("Will retry", "failed with an exception", "Traceback")
"""What Kopf and Python log when a handler fails: a hostile spec may cause a few, not a loop."""


def hostile_cases(digits_onnx: Path) -> dict[str, tuple[dict[str, Any], str, str]]:
    """name -> (spec change, the phase it ends in, the field its message names)."""
    return {
        "creds-metadata": (
            {
                "model": {
                    "uri": f"http://alice:{SECRETS[0]}@169.254.169.254/latest/meta-data/"
                    f"digits.onnx?X-Amz-Signature={SECRETS[1]}"
                }
            },
            "Failed",
            "spec.model.uri",
        ),
        "creds-query": (
            {"model": {"uri": f"https://models.invalid/digits.onnx?token={SECRETS[2]}"}},
            "Failed",
            "spec.model.uri",
        ),
        "traversal": (
            {"model": {"uri": "file:///../../../etc/passwd"}},
            "Failed",
            "spec.model.uri",
        ),
        "semantic": (
            {"framework": {"name": "pytorch", "intraOpThreads": 1}},
            "Failed",
            "spec.model.format",
        ),
        "unicode": (
            {"model": {"version": "\u202e\U0001f4a9 v1\u0301"}},
            "Succeeded",
            "",
        ),
    }


def apply_json(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def published(kube: Kube, namespace: str, name: str) -> str:
    """Everything the operator wrote about an evaluation: status, conditions and Events."""
    ev = get(kube, namespace, name)
    events = events_with(kube, namespace, name)
    return json.dumps([ev.get("status"), [e.get("message") for e in events]])


def test_hostile_specs_end_failed_naming_the_field_without_a_loop_or_a_leaked_secret(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    agent_rbac: str,
    digits_onnx: Path,
) -> None:
    operator = start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)
    cases = hostile_cases(digits_onnx)
    for name, (change, _, _) in cases.items():
        apply_json(cluster, namespace, evaluation(name, digits_onnx, **change))
    for name, (_, phase, field) in cases.items():
        ev = wait_phase(kube, namespace, name, ("Succeeded", "Failed"), 180)
        status = ev["status"]
        assert status["phase"] == phase, (name, status.get("message"))
        if phase == "Failed":
            message = condition(ev, "Failed")["message"]
            assert field in message, (name, message)
        text = published(kube, namespace, name)
        assert not any(secret in text for secret in SECRETS), (name, text)

    # still alive, and still working: a fresh valid evaluation succeeds
    apply_json(cluster, namespace, evaluation("after", digits_onnx))
    ev = wait_phase(kube, namespace, "after", ("Succeeded", "Failed"), 120)
    assert ev["status"]["phase"] == "Succeeded", ev["status"].get("message")
    assert operator.proc is not None and operator.proc.poll() is None

    log = operator.log.read_text(errors="replace")
    assert not any(secret in log for secret in SECRETS), "a credential reached the log"
    retries = [line for line in log.splitlines() if any(w in line for w in RETRY_LINES)]
    assert len(retries) <= len(cases), "\n".join(retries[-20:])
