"""Waiting in tests for what other threads do, with a deadline instead of a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
