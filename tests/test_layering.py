"""The packages point one way: spec ← contract ← agent ← telemetry, and contract ← controller;
and no module reaches itself through its imports.

Read from the source (every ``import``, also inside functions and ``TYPE_CHECKING`` blocks), so
a lazy import cannot hide a dependency. ``cli`` and ``__main__`` are the composition root: the
only modules that may wire the sides together.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
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
    "devtools": {"spec", "contract", "agent", "telemetry", "devcluster", "zoo", "analysis"},
    "report": {"spec", "contract", "store", "analysis"},
    "store": {"spec", "contract"},
    "server": {"spec", "contract", "store", "report", "analysis", "agent"},  # Try: agent.trial
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


def module_of(path: Path) -> str:
    """``mlmodelscope.controller.builders`` for ``controller/builders.py``; a package's
    ``__init__.py`` is the package itself."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> Iterator[tuple[str, int]]:
    """(module, line) for every import in ``path`` of a module in ``modules``, wherever it is
    written. ``from a import b`` imports the module ``a.b`` when there is one, else ``a``'s
    ``__init__``; relative imports are resolved against ``path``'s package."""
    here = module_of(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = [node.module] if node.module else []
            if node.level:  # `from . import x` is the package itself, `from .. import x` its parent
                above = package.split(".")
                parts = above[: len(above) - node.level + 1] + parts
            base = ".".join(parts)
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in modules:  # a module outside the package: ''
                name = name.rpartition(".")[0]
            if name and name != here:
                yield name, node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """{module: {module it imports: a line that imports it}} over the whole package."""
    paths = {module_of(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        graph[module] = {}
        for target, line in imported_modules(path, set(paths)):
            graph[module].setdefault(target, line)
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative, so a deep import chain cannot exhaust Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif target not in index:
                index[target] = low[target] = len(index)
                stack.append(target)
                on_stack.add(target)
                work.append((target, iter(graph[target])))
            elif target in on_stack:
                low[node] = min(low[node], index[target])
    return found


def test_circles_finds_every_circle_and_only_circles() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {"e": 1}, "e": {"d": 1}}
    graph |= {"f": {"a": 1}, "g": {}}
    assert sorted(circles(graph)) == [["a", "b", "c"], ["d", "e"]]


def test_no_circle_between_modules() -> None:
    """No module reaches itself through imports, counting those inside functions (a lazy
    import only hides a circle) and inside ``if TYPE_CHECKING:`` (a circle of types is still
    two modules that cannot be understood apart). Packages' ``__init__`` count where an import
    names the package; the parent packages Python also initialises do not, or every package
    whose ``__init__`` re-exports a submodule would be a circle."""
    graph = import_graph()
    assert "mlmodelscope.controller.builders" in graph["mlmodelscope.controller.main"]
    found = []
    for component in circles(graph):
        edges = [
            f"{source} line {line} imports {target}"
            for source in component
            for target, line in graph[source].items()
            if target in component
        ]
        found.append(f"{', '.join(component)}: {'; '.join(edges)}")
    assert not found, "import circles:\n" + "\n".join(found)


def test_no_test_module_imports_another() -> None:
    """What tests share lives in helper modules and conftest.py (tests as a library): a test
    module imported by another would also run its tests' module-level code there, and couples
    two suites through names that look private to one."""
    tests = Path(__file__).parent
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            found += [
                f"{path.relative_to(tests)} line {node.lineno} imports {name}"
                for name in names
                if name.split(".")[-1].startswith("test_")
            ]
    assert not found, "\n".join(found)
