"""Kernels and layers on the roofline: where each sits against the device's peaks.

A row (a kernel name or a layer, :func:`.ncu.by_kernel` / :func:`.ncu.by_layer`) has its
FLOPs, DRAM bytes and time; its arithmetic intensity (FLOP per byte) times the memory
bandwidth, or the compute peak when that is lower, is what the device could attain at that
intensity; the row's achieved FLOP/s as a share of it says how far it is from its roof, and
the side of the ridge whether memory or compute bounds it. The compute roof is the TF32
Tensor Core peak when most of the row's FLOPs ran on the tensor path, else FP32; compute
peaks are scaled from the datasheet's boost clock to the SM clock ``ncu`` measured (it locks
clocks to base while profiling). Pure: records in, records out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mlmodelscope.analysis.devices import GPUS, Device

TOP = 10


def gpu(device_name: str | None) -> Device | None:
    """The datasheet row for a device as torch names it (``NVIDIA H100 80GB HBM3``)."""
    return GPUS.get((device_name or "").replace(" ", "-"))


def place(row: dict[str, Any], device: Device) -> dict[str, Any]:
    """``row`` with its roof: ``roof``, ``peak_flop_per_s``, ``ridge_flop_per_byte``,
    ``attainable_flop_per_s``, ``bound`` (memory, compute) and ``of_roof_pct`` (memory-bound:
    the DRAM bandwidth's share reached, which is achieved FLOP/s over intensity x bandwidth and
    holds for a row without FLOPs too; compute-bound: the compute peak's share); None where the
    row lacks bytes or time."""
    flops: float = row.get("flops") or 0.0
    tensor: float = row.get("flops_tensor_tf32") or 0.0
    tf32 = device.tensor_tf32_flops
    on_tensor = tf32 is not None and flops > 0 and tensor > flops / 2
    peak: float = tf32 if tf32 is not None and on_tensor else device.peak_flops
    clock = row.get("sm_clock_hertz")
    if clock and device.boost_clock_hz:
        peak = peak * clock / device.boost_clock_hz
    intensity, achieved = row.get("arithmetic_intensity_flop_per_byte"), row.get("flop_per_s")
    if intensity is None and row.get("dram_bytes") and row.get("flops") == 0:
        intensity, achieved = 0.0, 0.0  # no FP32 or tensor operation counted (max, copies)
    placed = {
        **row,
        "roof": "tf32 tensor" if on_tensor else "fp32",
        "peak_flop_per_s": peak,
        "ridge_flop_per_byte": peak / device.bandwidth,
        "attainable_flop_per_s": None,
        "bound": None,
        "of_roof_pct": None,
    }
    if intensity is None or achieved is None:
        return placed
    memory = intensity * device.bandwidth < peak
    placed["attainable_flop_per_s"] = min(peak, intensity * device.bandwidth)
    placed["bound"] = "memory" if memory else "compute"
    bytes_per_s = row.get("dram_bytes_per_s")
    if memory:  # achieved / (intensity x bandwidth) is the bandwidth's share, FLOPs or none
        placed["of_roof_pct"] = (
            None if bytes_per_s is None else 100.0 * bytes_per_s / device.bandwidth
        )
    else:
        placed["of_roof_pct"] = 100.0 * achieved / peak
    return placed


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Time on each side of the ridge, and the time-weighted share of the roof reached."""
    placed = [r for r in rows if r.get("of_roof_pct") is not None and r.get("duration_s")]
    total = sum(r["duration_s"] for r in placed)
    memory = sum(r["duration_s"] for r in placed if r["bound"] == "memory")
    reached = sum(r["duration_s"] * r["of_roof_pct"] for r in placed)
    return {
        "rows": len(rows),
        "placed": len(placed),
        "seconds": total,
        "memory_bound_seconds": memory,
        "memory_bound_pct": 100.0 * memory / total if total else None,
        "of_roof_pct_time_weighted": reached / total if total else None,
    }


def table(rows: Sequence[dict[str, Any]], name: str, top: int = TOP) -> list[str]:
    """Markdown: the ``top`` rows by time with their place on the roofline, then the total."""
    lines = [
        f"| {name} | µs | launches | FLOP/B | TFLOP/s | roof | bound | % of roof |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: -(r.get("duration_s") or 0.0))[:top]:
        label = r.get("description") or r.get("kernel") or r.get("layer")
        if "layer" in r and r.get("description"):
            label = f"{r['layer']}: {r['description']}"
        lines.append(
            f"| {str(label)[:60]} | {(r.get('duration_s') or 0) * 1e6:.1f} | {r['launches']} "
            f"| {_num(r.get('arithmetic_intensity_flop_per_byte'), 1, 2)} "
            f"| {_num(r.get('flop_per_s'), 1e-12, 2)} | {r['roof']} | {r.get('bound') or '-'} "
            f"| {_num(r.get('of_roof_pct'), 1, 1)} |"
        )
    s = summary(rows)
    lines += [
        "",
        f"{s['placed']} of {s['rows']} {name}s placed, {s['seconds'] * 1e6:.1f} µs in all: "
        f"{_num(s['memory_bound_pct'], 1, 1)} % of the time in memory-bound {name}s; "
        f"{_num(s['of_roof_pct_time_weighted'], 1, 1)} % of the roof reached, time-weighted.",
    ]
    return lines


def _num(value: float | None, scale: float, digits: int) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"
