"""The operator's glibc malloc settings (controller/memory.py) take effect on this platform."""

from __future__ import annotations

import subprocess
import sys

from mlmodelscope.controller import memory


def test_arena_cap_and_trim_take_effect_on_glibc() -> None:
    # In a fresh interpreter: mallopt must run before threads allocate, and must not change
    # the test process's allocator.
    code = (
        "from mlmodelscope.controller import memory\n"
        "print(memory.limit_arenas(), memory.trim() in (True, False))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


def test_trim_is_harmless_when_repeated() -> None:
    assert memory.trim() in (True, False)
    assert memory.trim() in (True, False)
