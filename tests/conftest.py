"""Fixtures every test folder may use (the real control plane, Prometheus, Pushgateway, Jaeger),
and strict mode for the full suite.

Fixtures for real parts skip when a part is missing, so a developer can run a subset on a bare
machine. `make test` installs every part and sets MLMS_STRICT_TESTS=1: there such a skip fails,
so a green run cannot hide a missing install step. Skips that describe the machine itself (a GPU
present or absent) stay skips.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = [
    "mlmodelscope.devcluster.pytest_plugin",
    "mlmodelscope.devtools.telemetry_servers",
    "mlmodelscope.devtools.postgres",
]

MACHINE_SKIPS = ("GPU", "CUDA", "gpu", "cuda")


def _strict() -> bool:
    return os.environ.get("MLMS_STRICT_TESTS") == "1"


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_if_strict(report: Any) -> None:
    if not (_strict() and report.skipped) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if any(word in reason for word in MACHINE_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = f"skipped under MLMS_STRICT_TESTS=1 (make test installs every part): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[Any]:
    outcome = yield
    _fail_if_strict(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[Any]:
    outcome = yield
    _fail_if_strict(outcome.get_result())


@pytest.fixture(autouse=True, scope="session")
def _private_results_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`mlms run` records every run in the user's store by default: point this session (and
    the processes it starts) at its own data directory, never the user's."""
    saved = {k: os.environ.get(k) for k in ("MLMS_DATA_DIR", "MLMS_STORE_URL")}
    os.environ["MLMS_DATA_DIR"] = str(tmp_path_factory.mktemp("data"))
    os.environ.pop("MLMS_STORE_URL", None)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def digits_models() -> Path:
    """The example CNN in every format, built on first use into $MLMS_CACHE_DIR (or the user
    cache), so later sessions reuse it; building takes ~15 s on two cores."""
    from mlmodelscope.agent.digits import ensure_digits_models

    return ensure_digits_models()
