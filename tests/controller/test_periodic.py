"""The operator's clock threads: ticks repeat, a failing tick is logged and retried, the
first tick waits an interval unless the kind asks for one at start, stop joins."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from mlmodelscope.controller.runtime.periodic import Periodic


class Counter(Periodic):
    name = "counter"

    def __init__(self, fail_first: bool = False, seconds: float = 0.01, acting: Any = None) -> None:
        super().__init__(acting)
        self.ticks = 0
        self.fail_first = fail_first
        self.seconds = seconds
        self.third = threading.Event()

    def interval(self) -> float:
        return self.seconds

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks == 3:
            self.third.set()
        if self.fail_first and self.ticks == 1:
            raise RuntimeError("the API server is away")


def test_a_failing_tick_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    counter = Counter(fail_first=True)
    with caplog.at_level(logging.WARNING, logger="mlmodelscope.controller.runtime.periodic"):
        counter.start()
        assert counter.third.wait(5)
        counter.stop()
    assert counter._thread is None
    assert "counter failed: the API server is away" in caplog.text


def test_the_first_tick_waits_unless_asked_at_start() -> None:
    waits = Counter(seconds=60)
    waits.start()
    waits.stop()
    assert waits.ticks == 0

    class AtStart(Counter):
        first_tick_at_start = True

    eager = AtStart(seconds=60)
    eager.start()
    threading.Event().wait(0.2)
    eager.stop()
    assert eager.ticks == 1


def test_a_standby_replica_skips_its_ticks_until_it_acts() -> None:
    """Kopf's peering pauses only Kopf's watches; the clock threads ask before every tick."""
    acting = threading.Event()
    counter = Counter(acting=acting.is_set)
    counter.start()
    threading.Event().wait(0.2)
    assert counter.ticks == 0
    acting.set()
    assert counter.third.wait(5)
    counter.stop()
