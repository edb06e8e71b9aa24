"""What each step runs: per zoo model, the batch sizes, windows and data on the GPU, and
the tiny CPU variant of the dry run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """One zoo model's evaluation: batch sizes per scenario and window sizes."""

    zoo: str
    single_stream: tuple[int, ...]
    offline: tuple[int, ...]
    small: bool
    min_duration: str
    min_queries: int
    """The agent's minQueryCount, and the bare loop's least calls per window."""
    samples: int
    bare_s: float

    @property
    def key(self) -> str:
        return f"{self.zoo}-{'small' if self.small else 'full'}"


GPU_PLANS = {
    "resnet50": Plan("resnet50", (1, 8, 32), (32, 128), False, "1s", 32, 256, 1.0),
    "bert_base": Plan("bert_base", (1, 8, 32), (32, 128), False, "1s", 32, 256, 1.0),
}
CPU_PLANS = {
    name: Plan(name, (1, 2), (4,), True, "100ms", 8, 8, 0.1) for name in ("resnet50", "bert_base")
}
CPU_THREADS = {"intraOpThreads": 1, "interOpThreads": 1}
TRACE_QUERIES = {True: 20, False: 4}
"""Traced queries per level (MLMS_TRACE_QUERIES): on GPU, and in the CPU variant."""
