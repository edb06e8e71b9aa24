"""Keeping the operator's resident memory close to what it holds.

The operator's Python heap after a burst of 1,000 evaluations is about 100 MiB (measured with
tracemalloc, docs/benchmarks.md "Operator under load"), yet its resident size was more than
twice that: glibc's malloc gives each thread that allocates its own arena (up to 8 per core),
and memory freed in one arena is neither reused by another thread nor returned to the system.
Kopf's handler threads, the watch loop and the clock threads all decode JSON, so each of
them grows an arena to its own high-water mark. Two arenas and a trim after each resync tick
keep the resident size near the live heap. Both are glibc calls; elsewhere (musl, macOS) they
are skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import cache
from typing import Final

log = logging.getLogger(__name__)

M_ARENA_MAX: Final = -8
"""mallopt parameter number of M_ARENA_MAX (glibc malloc.h)."""
ARENAS: Final = 2


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas; call before the threads start. True if it took effect."""
    libc = _libc()
    if libc is None:
        return False
    done = bool(libc.mallopt(M_ARENA_MAX, arenas))
    log.debug("malloc arenas capped at %d: %s", arenas, done)
    return done


def trim() -> bool:
    """Return free heap memory to the system (glibc ``malloc_trim(0)``); True if any was."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False
