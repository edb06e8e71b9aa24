"""Deterministic names and labels of everything the operator creates for a ModelEvaluation.

Names depend only on the evaluation's name and generation, never on time or randomness, so a
retried or restarted handler finds (409) what an earlier attempt created instead of making a
second Job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from mlmodelscope import API_GROUP
from mlmodelscope.contract.kube import JOB_NAME_LABEL as JOB_NAME_LABEL  # pods of a Job

MAX_NAME: Final = 63
"""Job names end up in the pod label ``batch.kubernetes.io/job-name`` (a label value, <= 63)."""
HASH_LENGTH: Final = 8

APP_NAME: Final = "mlmodelscope"
COMPONENT: Final = "evaluation"
MANAGED_BY: Final = "mlmodelscope-operator"
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_EVALUATION: Final = f"{API_GROUP}/evaluation"
LABEL_GENERATION: Final = f"{API_GROUP}/generation"
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"
"""On an evaluation: submit its Job to this Kueue LocalQueue (created suspended, see builders)."""
MANAGED_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
"""Server-side label selector for the Jobs and Pods the operator watches."""


def child_name(base: str, suffix: str, limit: int = MAX_NAME) -> str:
    """``base + suffix``, or when that is too long, a truncated base plus a short hash of the
    full base, so two long names that share a prefix still get different children."""
    name = base + suffix
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(base.encode()).hexdigest()[:HASH_LENGTH]
    keep = limit - len(suffix) - HASH_LENGTH - 1
    return f"{base[:keep].rstrip('-.')}-{digest}{suffix}"


def spec_configmap_name(evaluation: str) -> str:
    return child_name(evaluation, "-spec")


def results_configmap_name(evaluation: str) -> str:
    return child_name(evaluation, "-results")


def agent_service_account_name(evaluation: str) -> str:
    """The evaluation's own ServiceAccount, which its pods run as (per-evaluation results
    access, :mod:`.agent_access`)."""
    return child_name(evaluation, "-agent")


def results_writer_name(evaluation: str) -> str:
    """Role and RoleBinding that let that ServiceAccount patch the results ConfigMap alone."""
    return child_name(evaluation, "-results-writer")


def job_name(evaluation: str, generation: int) -> str:
    return child_name(evaluation, f"-g{generation}")


def labels(evaluation: str, generation: int) -> dict[str, str]:
    """Labels on every child (and the evaluation pod): how the operator finds them, and how a
    user selects them with kubectl."""
    return {
        LABEL_NAME: APP_NAME,
        LABEL_COMPONENT: COMPONENT,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_INSTANCE: evaluation,
        LABEL_EVALUATION: evaluation,
        LABEL_GENERATION: str(generation),
    }


def owned_by(child: Mapping[str, Any] | None, uid: str | None) -> bool:
    """``child`` has an ownerReference to the object with ``uid``: it is that evaluation's, not
    a leftover of an earlier evaluation of the same name waiting to be garbage-collected
    (names and labels are the same for both; only the owner's UID tells them apart)."""
    if child is None or not uid:
        return False
    refs = (child.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def kueue_queue(labels: Mapping[str, str] | None) -> str | None:
    """The Kueue LocalQueue an evaluation (or its Job) names in its labels, if any."""
    return (labels or {}).get(LABEL_KUEUE_QUEUE) or None


def owner_of(obj: Mapping[str, Any]) -> tuple[str, str, int] | None:
    """(namespace, evaluation, generation) from the labels the operator put on an evaluation's
    Job (and its pod template, so on each of its pods)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = labels.get(LABEL_EVALUATION)
    try:
        generation = int(labels.get(LABEL_GENERATION, ""))
    except ValueError:
        return None
    if not name or not meta.get("namespace"):
        return None
    return str(meta["namespace"]), str(name), generation
