"""Fixtures for the packaging tests: the pinned Helm binary (built once into the tool cache)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlmodelscope.devtools import helm as helm_tool


@pytest.fixture(scope="session")
def helm() -> Path:
    """``<cache>/tools/helm-<version>/bin/helm``, compiled from its Go module on first use
    (a few minutes on two cores, then cached)."""
    if shutil.which("go") is None and not helm_tool.is_built():
        pytest.skip(f"building helm {helm_tool.HELM_VERSION} needs Go >= 1.26 (or a built cache)")
    return helm_tool.ensure_helm()
