"""`make test`'s two pytest-xdist workers: the tests that need the dev cluster form one work
unit, first and in their order; every other file is its own unit (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from conftest import pytest_collection_modifyitems


@dataclass
class _Item:
    nodeid: str
    fixturenames: tuple[str, ...] = ()
    marked_cluster: bool = False
    added: list[Any] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "cluster" and self.marked_cluster else None

    def add_marker(self, mark: Any) -> None:
        self.added.append(mark)

    def group(self) -> str:
        (mark,) = self.added
        return str(mark.args[0])


def _items() -> list[_Item]:
    return [
        _Item("tests/agent/test_a.py::test_one"),
        _Item("tests/controller/test_c_cluster.py::test_marked", marked_cluster=True),
        _Item("tests/agent/test_a.py::test_two"),
        _Item("tests/server/test_s.py::test_uses_fixture", fixturenames=("namespace", "cluster")),
        _Item("tests/server/test_s.py::test_plain", fixturenames=("tmp_path",)),
    ]


def _modify(dist: str, items: list[_Item]) -> None:
    config = SimpleNamespace(option=SimpleNamespace(dist=dist))
    pytest_collection_modifyitems(cast(pytest.Config, config), cast(list[pytest.Item], items))


def test_under_loadgroup_the_cluster_tests_are_one_unit_first_and_in_order() -> None:
    items = _items()
    _modify("loadgroup", items)
    assert [i.nodeid.split("::")[1] for i in items] == [
        "test_marked",
        "test_uses_fixture",
        "test_one",
        "test_two",
        "test_plain",
    ]
    assert [i.group() for i in items] == [
        "cluster",
        "cluster",
        "tests/agent/test_a.py",
        "tests/agent/test_a.py",
        "tests/server/test_s.py",
    ]


@pytest.mark.parametrize("dist", ["no", "load", "loadfile"])
def test_otherwise_order_and_marks_are_unchanged(dist: str) -> None:
    items = _items()
    _modify(dist, items)
    assert [i.nodeid for i in items] == [i.nodeid for i in _items()]
    assert not any(i.added for i in items)
