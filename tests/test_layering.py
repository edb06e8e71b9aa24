"""The packages point one way: spec ← contract ← agent ← telemetry, and contract ← controller.

Read from the source (every ``import``, also inside functions and ``TYPE_CHECKING`` blocks), so
a lazy import cannot hide a dependency. ``cli`` and ``__main__`` are the composition root: the
only modules that may wire the sides together.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "operator" / "mlmodelscope"
ROOT_MODULES = {"cli", "__main__", "__init__"}

ALLOWED: dict[str, set[str]] = {
    "spec": set(),
    "contract": {"spec"},
    "agent": {"spec", "contract"},
    "telemetry": {"spec", "contract", "agent", "analysis"},  # the leveled correction
    "controller": {"spec", "contract", "store"},  # records finished runs (lazily: `store` extra)
    "devcluster": {"spec", "contract", "agent"},  # builds the example models it serves
    "devtools": {"spec", "contract", "agent", "telemetry", "devcluster", "zoo"},  # gpukit
    "report": {"spec", "contract", "store", "analysis"},
    "store": {"spec", "contract"},
    "server": {"spec", "contract", "store", "report", "analysis"},
    "analysis": set(),  # graph costs, DLBricks, Benanza, XSP correction and `mlms analyze`
    "zoo": {"spec", "contract", "agent", "analysis"},  # caches like agent.digits; cards: costs
}
"""Which other packages each package may import (the root ``mlmodelscope`` is always fine)."""


def imports_by_package() -> dict[str, dict[str, set[str]]]:
    """{package: {imported package: {'file.py: module', ...}}}."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            continue  # root modules
        package = rel.parts[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
                if node.module == "mlmodelscope":
                    modules = [f"mlmodelscope.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            for module in modules:
                parts = module.split(".")
                if parts[0] != "mlmodelscope" or len(parts) < 2:
                    continue
                target = parts[1]
                if target in ROOT_MODULES or target == package or not (PACKAGE / target).is_dir():
                    continue
                found[package][target].add(f"{rel}: {module}")
    return found


def test_every_package_is_declared() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(ALLOWED), "declare new packages in ALLOWED with their dependencies"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_what_their_layer_allows(package: str) -> None:
    wrong = {
        target: sorted(sites)
        for target, sites in imports_by_package()[package].items()
        if target not in ALLOWED[package]
    }
    assert not wrong, f"{package} may import only {sorted(ALLOWED[package])}; found {wrong}"


def test_no_circle_between_packages() -> None:
    graph = {p: set(targets) for p, targets in imports_by_package().items()}
    for package in graph:
        seen: set[str] = set()
        stack = list(graph[package])
        while stack:
            current = stack.pop()
            assert current != package, f"{package} reaches itself through {sorted(seen)}"
            if current not in seen:
                seen.add(current)
                stack.extend(graph.get(current, ()))


def test_the_agent_never_imports_the_controller_nor_the_controller_the_agent() -> None:
    """The issue's own words, as a grep would check them."""
    for folder, forbidden in (
        ("agent", "mlmodelscope.controller"),
        ("controller", "mlmodelscope.agent"),
    ):
        for path in (PACKAGE / folder).rglob("*.py"):
            assert forbidden not in path.read_text(), f"{path} mentions {forbidden}"
