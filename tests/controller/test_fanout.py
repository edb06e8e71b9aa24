"""controller/runtime/fanout.py: calls made at once, answers in order, failures after all."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest

from mlmodelscope.controller.runtime.fanout import Fanout

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_answers_come_in_the_items_order_and_the_calls_overlap() -> None:
    fanout = Fanout(4)
    together = threading.Barrier(4, timeout=10)

    def call(n: int) -> int:
        together.wait()  # four calls one after another would never pass it
        time.sleep(0.01 * (4 - n))
        return n * n

    try:
        assert fanout.map(call, range(4)) == [0, 1, 4, 9]
    finally:
        fanout.shutdown()


def test_the_first_failure_in_order_is_raised_once_every_call_ended() -> None:
    fanout = Fanout(4)
    ended: list[int] = []

    def call(n: int) -> int:
        if n in (1, 2):
            raise ValueError(f"item {n}")
        time.sleep(0.05)
        ended.append(n)
        return n

    try:
        with pytest.raises(ValueError, match="item 1"):
            fanout.map(call, range(4))
        assert sorted(ended) == [0, 3]
    finally:
        fanout.shutdown()


def test_calls_see_the_callers_context_and_one_item_runs_in_the_caller() -> None:
    fanout = Fanout(2)
    WHO.set("reconcile")
    try:
        assert fanout.map(lambda _: WHO.get(), range(3)) == ["reconcile"] * 3
        assert fanout.map(lambda _: threading.current_thread().name, [0]) == [
            threading.current_thread().name
        ]
    finally:
        fanout.shutdown()
