"""One build of a Go tool at a time, across processes: an exclusive file lock per tool.

`make test` starts the Go builds in the background and the tests that need no cluster beside
them; a test that needs a tool still being built takes the tool's lock, waits for the build
in progress, and then finds the binary built instead of compiling it a second time. Standard
library only: the builds run before the project's venv exists.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mlmodelscope.devcluster.versions import cache_base

Log = Callable[[str], None]


def lock_path(name: str) -> Path:
    """``<cache>/locks/build-<name>.lock`` (the cache honours ``MLMS_CACHE_DIR``)."""
    return cache_base() / "locks" / f"build-{name}.lock"


@contextmanager
def build_lock(name: str, log: Log | None = None) -> Iterator[None]:
    """Hold ``name``'s build lock for the block; say so when another process holds it first.

    The lock is the kernel's (``flock``): it goes with the process that holds it, so a build
    killed mid-way never leaves a stale lock behind."""
    path = lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log is not None:
                log(f"waiting for the build of {name} that another process runs ({path})")
            started = time.monotonic()
            fcntl.flock(handle, fcntl.LOCK_EX)
            if log is not None:
                log(f"  {name}: waited {time.monotonic() - started:.0f}s for that build")
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
