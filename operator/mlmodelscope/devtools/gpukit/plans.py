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
    rounds: int = 0
    """Interleaved rounds of SingleStream batch 1 (agent, bare alternating); 0: none. On the
    GPU a round is about 4.5 s (one ``mlms run`` at batch 1, one bare window): 3 add ~15 s."""

    @property
    def key(self) -> str:
        return f"{self.zoo}-{'small' if self.small else 'full'}"


GPU_PLANS = {
    "resnet50": Plan("resnet50", (1, 8, 32), (32, 128), False, "1s", 32, 256, 1.0, 3),
    "bert_base": Plan("bert_base", (1, 8, 32), (32, 128), False, "1s", 32, 256, 1.0, 3),
}
CPU_PLANS = {
    name: Plan(name, (1, 2), (4,), True, "100ms", 8, 8, 0.1, 3)
    for name in ("resnet50", "bert_base")
}
CPU_THREADS = {"intraOpThreads": 1, "interOpThreads": 1}
TRACE_QUERIES = {True: 20, False: 4}
"""Traced queries per level (MLMS_TRACE_QUERIES): on GPU, and in the CPU variant."""


@dataclass(frozen=True)
class NcuPlan:
    """The ``ncu-metrics`` step: which model and batch, how many warm-up forwards before the
    profiled one, which kernels (the trace step's top ``top_kernels`` by name) and at most
    how many launches of them, and the wall-clock limit of the ``ncu`` process."""

    zoo: str = "resnet50"
    batch_size: int = 1
    warmup: int = 5
    top_kernels: int = 5
    launch_count: int = 40
    timeout_s: float = 38.0
    step_s: float = 48.0
    """The step's own budget from its start-up on (its driver limit is 55 s): a second
    ``ncu`` run (without the name filter, when the first matched no kernel) starts only with
    20 s of it left."""


NCU_PLAN = NcuPlan()


@dataclass(frozen=True)
class LayerPlan:
    """A per-layer step (``benanza-gpu``, ``dlbricks-gpu``): which zoo models at which batch
    sizes, each brick and whole model timed ``runs`` times after ``warmup`` calls."""

    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    small: bool
    runs: int
    warmup: int


BENANZA_PLANS = {
    True: LayerPlan(("resnet50", "bert_base"), (1,), False, 20, 5),
    False: LayerPlan(("resnet50", "bert_base"), (1,), True, 3, 1),
}
"""Benanza's plan on the GPU (True) and in the CPU variant (False)."""
DLBRICKS_PLANS = {
    True: LayerPlan(("resnet50", "bert_base"), (1, 32), False, 20, 5),
    False: LayerPlan(("resnet50", "bert_base"), (1, 2), True, 3, 1),
}


@dataclass(frozen=True)
class NcuLayersPlan:
    """The ``ncu-layers`` step: every kernel of one forward of ``zoo`` (eager, torch's
    defaults) with its layer's NVTX range, at most ``launch_count`` launches."""

    zoo: str = "resnet50"
    batch_size: int = 1
    warmup: int = 5
    launch_count: int = 400
    timeout_s: float = 70.0
    step_s: float = 80.0
    """The step's own budget from its start-up on (its driver limit is 85 s)."""


NCU_LAYERS_PLAN = NcuLayersPlan()


ROUNDS = {True: 11, False: 3}
"""The ``rounds`` step's interleaved rounds per model on the GPU (True) and in the CPU variant."""
