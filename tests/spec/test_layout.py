"""Project layout rules from the design card."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_operator_is_not_a_package() -> None:
    """`operator/` holds the source root; it must never shadow the standard library."""
    assert not (ROOT / "operator" / "__init__.py").exists()
    spec = importlib.util.find_spec("operator")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).parent == Path(sysconfig.get_paths()["stdlib"])


def test_operator_module_from_repo_root_is_stdlib() -> None:
    """Even with the repo root first on sys.path, `import operator` is the standard library."""
    out = subprocess.run(
        [sys.executable, "-c", "import operator; print(operator.__file__)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out.endswith("operator.py") and "lib/python" in out


def test_top_level_layout() -> None:
    for name in ("pyproject.toml", "README.md", "operator", "crds", "images", "helm", "tests",
                 "examples", ".ci/run"):  # fmt: skip
        assert (ROOT / name).exists(), name
    assert (ROOT / "operator" / "mlmodelscope" / "__init__.py").is_file()
