"""Per-namespace policy: ``policy.mlmodelscope.io/*`` annotations on a Namespace narrow the
operator-wide policy there (issue #15, defect 9).

A platform team annotates a Namespace, e.g. ``policy.mlmodelscope.io/allow-pvcs: "false"``;
evaluations in it must pass both the operator's settings and the annotations
(:func:`.policy.denials`). Annotations rather than a namespaced object because whoever may edit
a Namespace's annotations needs ``patch`` on ``namespaces`` (cluster-scoped, normally cluster
administrators only), while a tenant who may edit objects in their own namespace could edit a
policy object living there. Failing closed: a malformed or unknown ``policy.mlmodelscope.io/``
annotation, or a Namespace the operator may not read (403), denies every evaluation of the
namespace with a message saying what to fix. A Namespace is read once per
:data:`TTL_SECONDS` at most, however many decisions are made there, so admission costs no
listing and an annotation change takes effect within that time.
"""

from __future__ import annotations

import difflib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from mlmodelscope.contract.kube import Kube, KubeError
from mlmodelscope.controller.policy import (
    ANNOTATION_PREFIX,
    IMAGES,
    PVCS,
    RULES,
    SECRET_REFS,
    TOLERATIONS,
    NamespaceRules,
    Policy,
    parse_allowance,
    parse_prefixes,
)

TTL_SECONDS: Final = 10.0
_ACCEPTS: Final = {
    IMAGES.annotation: "comma-separated image prefixes (e.g. ghcr.io/acme/), or *",
    SECRET_REFS.annotation: "true, false, or comma-separated Secret names",
    PVCS.annotation: "true, false, or comma-separated claim names",
    TOLERATIONS.annotation: "true, false, or comma-separated taint keys",
}


def namespace_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}"


def rules_from_annotations(namespace: str, annotations: Mapping[str, str]) -> NamespaceRules:
    """Parse the ``policy.mlmodelscope.io/*`` annotations of one Namespace; other annotations
    are ignored. Every bad one becomes a problem (the namespace then denies everything)."""
    fields: dict[str, Any] = {}
    problems: list[str] = []
    known = [rule.annotation for rule in RULES]
    for key, raw in sorted(annotations.items()):
        if not key.startswith(ANNOTATION_PREFIX):
            continue
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(
                f"Namespace {namespace!r} has annotation {key}, which is not an operator "
                f"policy annotation{hint}; whoever may edit the Namespace must rename or remove "
                f"it (known: {', '.join(known)}). Until then every evaluation in the namespace "
                "is denied"
            )
            continue
        rule = next(r for r in RULES if r.annotation == key)
        parse = parse_prefixes if rule is IMAGES else parse_allowance
        try:
            fields[rule.attr] = parse(raw)
        except ValueError:
            problems.append(
                f"Namespace {namespace!r} has annotation {key}={raw!r}, which is malformed "
                f"(expected {_ACCEPTS[key]}); whoever may edit the Namespace must fix or remove "
                "it. Until then every evaluation in the namespace is denied"
            )
    return NamespaceRules(namespace=namespace, problems=tuple(problems), **fields)


def read_rules(kube: Kube, namespace: str) -> NamespaceRules:
    """The Namespace's rules, read now. A Namespace the operator may not read (403) or that
    is gone (404) denies everything there; other errors (the API server away) propagate, so
    the decision is retried instead of failing a run for a passing fault."""
    try:
        body = kube.get(namespace_path(namespace))
    except KubeError as exc:
        if exc.status == 403:
            why = (
                f"the operator may not read Namespace {namespace!r} (403 Forbidden), so it "
                f"cannot apply its {ANNOTATION_PREFIX}* policy annotations; grant the "
                "operator's ServiceAccount get on namespaces (the Helm chart's ClusterRole "
                "does)"
            )
        elif exc.status == 404:
            why = f"Namespace {namespace!r} does not exist (deleted?)"
        else:
            raise
        return NamespaceRules(namespace=namespace, problems=(why,))
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    return rules_from_annotations(namespace, annotations)


class NamespacePolicies:
    """Namespace rules by namespace, each kept :data:`TTL_SECONDS` (thread-safe; Kopf's
    handlers, the Job retries and the resync thread decide concurrently)."""

    def __init__(
        self, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[str, tuple[float, NamespaceRules]] = {}
        self._lock = threading.Lock()

    def rules(self, kube: Kube, namespace: str) -> NamespaceRules:
        now = self.clock()
        with self._lock:
            hit = self._cache.get(namespace)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        rules = read_rules(kube, namespace)  # outside the lock: one slow read blocks no other
        with self._lock:
            self._cache[namespace] = (now, rules)
        return rules

    def effective(self, policy: Policy, kube: Kube, namespace: str) -> Policy:
        """``policy`` narrowed by ``namespace``'s annotations."""
        return replace(policy, namespace=self.rules(kube, namespace))
