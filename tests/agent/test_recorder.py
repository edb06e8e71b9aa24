"""`mlms run`'s recorder with stand-in stores: what each document became, and a store that
fails costing a warning, never the run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlmodelscope.agent.recorder import Recorder, Recording


class FakeStore:
    """Records run ids in memory; ``fail`` makes ``record`` raise."""

    url = "sqlite:///fake.db"

    def __init__(self, fail: Exception | None = None) -> None:
        self.run_ids: set[str] = set()
        self.fail = fail
        self.closed = False

    def record(self, document: Mapping[str, Any]) -> bool:
        if self.fail is not None:
            raise self.fail
        new = document["run_id"] not in self.run_ids
        self.run_ids.add(document["run_id"])
        return new

    def close(self) -> None:
        self.closed = True


class Opener:
    """Opens ``store`` (or raises ``fail``), counting the calls and keeping the URLs."""

    def __init__(self, store: FakeStore | None = None, fail: Exception | None = None) -> None:
        self.store, self.fail, self.urls = store or FakeStore(), fail, list[str | None]()

    def __call__(self, url: str | None) -> FakeStore:
        self.urls.append(url)
        if self.fail is not None:
            raise self.fail
        return self.store


def test_each_document_is_recorded_once_in_the_default_store() -> None:
    opener = Opener()
    recorder = Recorder("", opener)
    first = recorder.record("a", {"run_id": "1"})
    again = recorder.record("a", {"run_id": "1"})
    assert first == Recording(url="sqlite:///fake.db", inserted=True)
    assert first.summary == "recorded in sqlite:///fake.db"
    assert again.summary == "already recorded in sqlite:///fake.db"
    assert opener.urls == [None]  # opened once; "" is the default store
    recorder.close()
    assert opener.store.closed


def test_no_store_records_nothing_and_opens_nothing() -> None:
    opener = Opener()
    recorder = Recorder(None, opener)
    assert recorder.record("a", {"run_id": "1"}) == Recording()
    assert Recording().summary is None
    assert opener.urls == []
    recorder.close()


def test_without_the_store_extra_it_warns_once_and_stops_trying() -> None:
    opener = Opener(fail=ModuleNotFoundError("No module named 'sqlalchemy'"))
    recorder = Recorder("runs.db", opener)
    warned = recorder.record("a", {"run_id": "1"})
    assert warned.warning is not None and warned.summary is None
    assert "install mlmodelscope[store], or pass --no-store" in warned.warning
    assert recorder.record("b", {"run_id": "2"}) == Recording()
    assert opener.urls == ["runs.db"]


def test_a_store_that_cannot_be_opened_is_not_tried_again() -> None:
    opener = Opener(fail=OSError("disk full"))
    recorder = Recorder("runs.db", opener)
    warned = recorder.record("a", {"run_id": "1"})
    assert warned.warning == "a: not recorded in the results store: disk full"
    assert recorder.record("b", {"run_id": "2"}) == Recording()
    assert len(opener.urls) == 1


def test_a_document_the_store_refuses_costs_a_warning_and_the_next_is_recorded() -> None:
    store = FakeStore(fail=ValueError("not a result document"))
    recorder = Recorder("runs.db", Opener(store))
    warned = recorder.record("a", {})
    assert warned.warning == "a: not recorded in the results store: not a result document"
    store.fail = None
    assert recorder.record("b", {"run_id": "2"}).inserted
