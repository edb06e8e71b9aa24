"""A ModelEvaluation is gone.

Nothing to clean up in the cluster: every child (spec and results ConfigMaps, Jobs and their
pods) carries an ownerReference, so the garbage collector removes them. That is why the
operator adds no finalizer: a stopped operator can never block deleting an evaluation. Only
the operator's in-memory per-evaluation lock is dropped here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlmodelscope.controller.context import Context


def evaluation_deleted(body: Mapping[str, Any], ctx: Context) -> str:
    meta = body.get("metadata") or {}
    ctx.forget(str(meta.get("namespace")), str(meta.get("name")))
    return "forgotten"
