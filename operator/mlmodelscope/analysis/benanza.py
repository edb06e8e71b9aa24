"""A roofline from the graph (after Benanza, Li et al.), and the gap to what runs.

This is the roofline, not Benanza's bound: the paper's bound is the best *measured*
implementation of each layer across frameworks, which ``measuredbound`` composes from the
timings ``implementations`` takes (``mlms benanza``). The roofline stays beside it.

Per layer of the exported graph: bound = max(FLOPs / peak FLOP/s, bytes / bandwidth) on a
device from ``devices``; the measured layer time is its DLBricks brick (``graph="raw"``: the
layer alone, at ORT_ENABLE_ALL). The model's sequential bound is the sum of layer bounds; the
critical-path bound is the longest path of bounds through the DAG, what perfect overlap of
independent branches would reach. The gap between measured and bound names the optimization
opportunities: layers far from their bound, layers that could run in parallel, fusion
candidates (Conv->BatchNormalization->Relu, Conv/Gemm->activation, MatMul->Add, chains of
elementwise ops), each with the bytes a fusion would avoid moving.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlmodelscope.analysis.devices import Device
from mlmodelscope.analysis.graph import ELEMENTWISE, LayerCost, layer_costs

ACTIVATIONS = frozenset(
    {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu", "Erf"}
)


@dataclass(frozen=True)
class LayerBound:
    name: str
    op_type: str
    flops: int
    bytes: int
    bound_ms: float
    limit: str
    """'compute' or 'memory': which roof sets the bound."""
    measured_ms: float | None = None

    @property
    def gap_ms(self) -> float | None:
        return None if self.measured_ms is None else self.measured_ms - self.bound_ms


@dataclass(frozen=True)
class Opportunity:
    kind: str
    """'far-from-bound', 'parallel' or 'fusion'."""
    layers: tuple[str, ...]
    detail: str
    saving_ms: float | None = None
    """What the opportunity could save at most, where measured times allow saying."""


@dataclass(frozen=True)
class BoundReport:
    model: str
    device: Device
    batch_size: int
    flops: int
    bytes: int
    sequential_bound_ms: float
    critical_path_bound_ms: float
    layers_measured_ms: float | None
    measured_ms: float | None
    layers: list[LayerBound]
    opportunities: list[Opportunity] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for row, layer in zip(out["layers"], self.layers, strict=True):
            row["gap_ms"] = layer.gap_ms
        return out


def layer_bound(cost: LayerCost, dev: Device) -> tuple[float, str]:
    """(bound in ms, the limiting roof) for one layer on ``dev``."""
    compute = cost.flops / dev.peak_flops
    memory = cost.bytes_total / dev.bandwidth
    return 1e3 * max(compute, memory), "compute" if compute >= memory else "memory"


def _producers(costs: Sequence[LayerCost]) -> dict[str, int]:
    return {out: i for i, c in enumerate(costs) for out in c.outputs if out}


def critical_path_ms(costs: Sequence[LayerCost], weights: Sequence[float]) -> float:
    """Longest path of ``weights`` through the DAG (nodes are in topological order)."""
    producer = _producers(costs)
    finish = [0.0] * len(costs)
    for i, cost in enumerate(costs):
        start = max((finish[producer[x]] for x in cost.inputs if x in producer), default=0.0)
        finish[i] = start + weights[i]
    return max(finish, default=0.0)


def parallel_groups(costs: Sequence[LayerCost], bounds: Sequence[LayerBound]) -> list[Opportunity]:
    """Layers with work at the same DAG depth, none an ancestor of another: independent
    branches (e.g. ResNet's downsampling shortcut beside its block) a runtime could overlap."""
    producer = _producers(costs)
    depth = [0] * len(costs)
    ancestors = [0] * len(costs)
    for i, cost in enumerate(costs):
        parents = [producer[x] for x in cost.inputs if x in producer]
        depth[i] = 1 + max((depth[p] for p in parents), default=0)
        for p in parents:
            ancestors[i] |= ancestors[p] | (1 << p)
    by_depth: dict[int, list[int]] = defaultdict(list)
    for i, cost in enumerate(costs):
        if cost.flops > 0:
            by_depth[depth[i]].append(i)
    groups = []
    for members in by_depth.values():
        independent = [
            i
            for i in members
            if not any(ancestors[i] >> j & 1 or ancestors[j] >> i & 1 for j in members if j != i)
        ]
        if len(independent) < 2:
            continue
        times = [bounds[i].measured_ms for i in independent]
        ops = {costs[i].op_type for i in independent}
        saving = None
        if all(t is not None for t in times):
            measured = [float(t) for t in times if t is not None]
            saving = sum(measured) - max(measured)
        groups.append(
            Opportunity(
                "parallel",
                tuple(costs[i].name for i in independent),
                f"{len(independent)} independent {'/'.join(sorted(ops))} layers",
                saving,
            )
        )
    return groups


def fusion_candidates(
    costs: Sequence[LayerCost], bounds: Sequence[LayerBound]
) -> list[Opportunity]:
    """Producer->consumer chains a fused kernel would run in one pass: the intermediate has one
    consumer. Saving: the intermediates' write+read time at the device bandwidth is not
    claimed; the detail states the bytes avoided and the measured time of the chain."""
    producer = _producers(costs)
    consumers: dict[str, list[int]] = defaultdict(list)
    for i, cost in enumerate(costs):
        for x in cost.inputs:
            consumers[x].append(i)
    heads = {"Conv", "Gemm", "MatMul", "BatchNormalization", *ELEMENTWISE}
    chains: list[list[int]] = []
    used: set[int] = set()
    for i, cost in enumerate(costs):
        if i in used or cost.op_type not in heads:
            continue
        if any(
            x in producer and len(consumers[x]) == 1 and _fusable(costs[producer[x]], cost)
            for x in cost.inputs[:1]
        ):
            continue  # not the start of a chain
        chain = [i]
        while True:
            tail = costs[chain[-1]]
            nxt = consumers.get(tail.outputs[0], []) if tail.outputs else []
            if len(nxt) != 1 or not _fusable(tail, costs[nxt[0]]):
                break
            chain.append(nxt[0])
        if len(chain) > 1:
            chains.append(chain)
            used.update(chain)
    out = []
    for chain in chains:
        avoided = sum(costs[j].bytes_written for j in chain[:-1]) * 2
        times = [bounds[j].measured_ms for j in chain]
        total = (
            sum(float(t) for t in times if t is not None)
            if all(t is not None for t in times)
            else None
        )
        ops = "->".join(costs[j].op_type for j in chain)
        detail = f"{ops}: fusing avoids {avoided / 1e6:.2f} MB of intermediate traffic"
        if total is not None:
            detail += f"; the chain measures {total:.3f} ms as separate layers"
        out.append(Opportunity("fusion", tuple(costs[j].name for j in chain), detail, None))
    return out


def _fusable(first: LayerCost, second: LayerCost) -> bool:
    a, b = first.op_type, second.op_type
    if a == "Conv" and b in {"BatchNormalization", "Add", *ACTIVATIONS}:
        return True
    if a == "BatchNormalization" and b in ACTIVATIONS:
        return True
    if a in ("Gemm", "MatMul") and b in {"Add", *ACTIVATIONS}:
        return True
    return a in ELEMENTWISE and b in ELEMENTWISE


MIN_ROOF_SAMPLE_MS = 0.05
"""Only layers measured at or above this time may raise a roof (shorter ones are timer noise)."""


def effective_device(
    dev: Device, costs: Sequence[LayerCost], measured: Mapping[str, float]
) -> Device:
    """``dev`` with each roof raised to the fastest rate a measured layer reached: a lower bound
    must not exceed what ran, and a micro-benchmark on a shared machine (or a DRAM copy, beside
    layers whose tensors sit in cache) can read below what layers reach."""
    flops, bandwidth = dev.peak_flops, dev.bandwidth
    for cost in costs:
        ms = measured.get(cost.name)
        if ms is None or ms < MIN_ROOF_SAMPLE_MS:
            continue
        flops = max(flops, cost.flops / (ms / 1e3))
        bandwidth = max(bandwidth, cost.bytes_total / (ms / 1e3))
    if (flops, bandwidth) == (dev.peak_flops, dev.bandwidth):
        return dev
    conditions = {
        **dev.conditions,
        "raisedFrom": {"peak_flops": dev.peak_flops, "bandwidth": dev.bandwidth},
        "raisedBy": "the fastest measured layer (benanza.effective_device)",
    }
    return Device(dev.name, flops, bandwidth, dev.source, conditions)


def bound(
    model: str | Path,
    dev: Device,
    batch_size: int = 1,
    measured_layers: Mapping[str, float] | None = None,
    measured_ms: float | None = None,
    top: int = 10,
) -> BoundReport:
    """The lower bound of ``model`` on ``dev``; with ``measured_layers`` (layer name -> ms,
    e.g. raw-graph DLBricks per-layer times) and ``measured_ms`` the gaps and opportunities.
    Measured layers may raise ``dev``'s roofs (``effective_device``); the report's device says."""
    costs = [c for c in layer_costs(model, batch_size) if c.op_type != "Constant"]
    if measured_layers:
        dev = effective_device(dev, costs, measured_layers)
    bounds = []
    for cost in costs:
        ms, limit = layer_bound(cost, dev)
        measured = measured_layers.get(cost.name) if measured_layers else None
        bounds.append(
            LayerBound(cost.name, cost.op_type, cost.flops, cost.bytes_total, ms, limit, measured)
        )
    opportunities = []
    with_gap = sorted((b for b in bounds if b.gap_ms is not None), key=lambda b: -(b.gap_ms or 0.0))
    for b in with_gap[:top]:
        ratio = (b.measured_ms or 0.0) / b.bound_ms if b.bound_ms else float("inf")
        opportunities.append(
            Opportunity(
                "far-from-bound",
                (b.name,),
                f"{b.op_type} measures {b.measured_ms:.3f} ms vs bound {b.bound_ms:.3f} ms "
                f"({ratio:.1f}x, {b.limit}-bound)",
                b.gap_ms,
            )
        )
    parallel = sorted(parallel_groups(costs, bounds), key=lambda o: -(o.saving_ms or 0.0))
    opportunities += parallel[:top]
    opportunities += fusion_candidates(costs, bounds)[:top]
    layer_sum = (
        sum(b.measured_ms for b in bounds if b.measured_ms is not None) if measured_layers else None
    )
    return BoundReport(
        model=Path(model).stem if isinstance(model, (str, Path)) else "model",
        device=dev,
        batch_size=batch_size,
        flops=sum(c.flops for c in costs),
        bytes=sum(c.bytes_total for c in costs),
        sequential_bound_ms=sum(b.bound_ms for b in bounds),
        critical_path_bound_ms=critical_path_ms(costs, [b.bound_ms for b in bounds]),
        layers_measured_ms=layer_sum,
        measured_ms=measured_ms,
        layers=bounds,
        opportunities=opportunities,
    )
