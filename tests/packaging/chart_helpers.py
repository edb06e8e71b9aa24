"""Rendering the Helm chart for tests: `helm template` into a list of manifests."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "mlmodelscope"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "mlms"
NAMESPACE = "mlmodelscope-system"

Manifest = dict[str, Any]


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run helm, failing with its output (not just the exit code)."""
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def render(
    helm: Path,
    values: Sequence[Path] = (),
    sets: Sequence[str] = (),
    *,
    include_crds: bool = False,
    kube_version: str | None = None,
) -> list[Manifest]:
    """Every object `helm template` renders, in order (empty documents dropped)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for file in values:
        args += ["--values", str(file)]
    for item in sets:
        args += ["--set", item]
    if include_crds:
        args.append("--include-crds")
    if kube_version:
        args += ["--kube-version", kube_version]
    out = run_helm(helm, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    """Objects of a kind (and name, if given)."""
    return [
        m
        for m in manifests
        if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
    ]


def one(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = find(manifests, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def granted(
    manifests: Sequence[Manifest], sa_namespace: str, sa_name: str, namespace: str | None
) -> set[tuple[str, str, str]]:
    """(API group, resource[/subresource], verb) the rendered RBAC grants the ServiceAccount
    for a request in ``namespace`` (None: cluster scope or all namespaces at once), as the RBAC
    authorizer would: ClusterRoleBindings count everywhere, RoleBindings in their namespace.
    Only literal names: the chart uses no wildcards and no resourceNames (test_chart.py)."""
    roles = {
        (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): m
        for m in manifests
        if m["kind"] in ("Role", "ClusterRole")
    }
    found: set[tuple[str, str, str]] = set()
    for binding in manifests:
        if binding["kind"] == "ClusterRoleBinding":
            applies = True
        elif binding["kind"] == "RoleBinding":
            applies = namespace is not None and binding["metadata"]["namespace"] == namespace
        else:
            continue
        subjects = [(s["kind"], s["namespace"], s["name"]) for s in binding.get("subjects") or []]
        if not applies or ("ServiceAccount", sa_namespace, sa_name) not in subjects:
            continue
        ref = binding["roleRef"]
        role_ns = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']}: no {ref}"
        for rule in role["rules"]:
            assert not rule.get("resourceNames"), rule
            found.update(
                (group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            )
    return found
