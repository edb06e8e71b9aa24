"""`--cluster-tests only|none` (tests/cluster_split.py): `make test` runs the tests that need
the dev cluster in one process and the others beside it in a second."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from cluster_split import keep_half


@dataclass
class _Item:
    nodeid: str
    fixturenames: tuple[str, ...] = ()
    marked_cluster: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "cluster" and self.marked_cluster else None


@dataclass
class _Config:
    choice: str
    deselected: list[Any] = field(default_factory=list)

    def getoption(self, name: str, default: str) -> str:
        assert name == "cluster_tests"
        return self.choice

    @property
    def hook(self) -> SimpleNamespace:
        return SimpleNamespace(pytest_deselected=lambda items: self.deselected.extend(items))


def _items() -> list[_Item]:
    return [
        _Item("tests/agent/test_a.py::test_one"),
        _Item("tests/controller/test_c_cluster.py::test_marked", marked_cluster=True),
        _Item("tests/server/test_s.py::test_uses_fixture", fixturenames=("namespace", "cluster")),
        _Item("tests/server/test_s.py::test_plain", fixturenames=("tmp_path",)),
    ]


def _names(items: list[_Item]) -> list[str]:
    return [i.nodeid.split("::")[1] for i in items]


@pytest.mark.parametrize(
    ("choice", "kept", "deselected"),
    [
        ("all", ["test_one", "test_marked", "test_uses_fixture", "test_plain"], []),
        ("only", ["test_marked", "test_uses_fixture"], ["test_one", "test_plain"]),
        ("none", ["test_one", "test_plain"], ["test_marked", "test_uses_fixture"]),
    ],
)
def test_the_choice_keeps_one_half_in_order_and_reports_the_rest_deselected(
    choice: str, kept: list[str], deselected: list[str]
) -> None:
    config, items = _Config(choice), _items()
    keep_half(cast(pytest.Config, config), cast(list[pytest.Item], items))
    assert _names(items) == kept
    assert _names(config.deselected) == deselected


def test_a_half_runs_the_files_that_need_a_late_tool_last_and_whole() -> None:
    config = _Config("none")
    items = [
        _Item("tests/telemetry/test_t.py::test_traces", fixturenames=("jaeger",)),
        _Item("tests/agent/test_a.py::test_one"),
        _Item("tests/telemetry/test_t.py::test_plain", fixturenames=("tmp_path",)),
        _Item("tests/controller/test_k.py::test_queued", fixturenames=("kueue", "tmp_path")),
        _Item("tests/agent/test_b.py::test_two"),
    ]
    keep_half(cast(pytest.Config, config), cast(list[pytest.Item], items))
    assert _names(items) == ["test_one", "test_two", "test_traces", "test_plain", "test_queued"]
