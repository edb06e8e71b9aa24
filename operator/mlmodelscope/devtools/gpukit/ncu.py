"""Nsight Compute (``ncu``) for the ``ncu-metrics`` step: the command, its CSV, the records.

``ncu`` profiles one forward pass of a TorchScript model (:mod:`.ncu_target`, between
``cudaProfilerStart`` and ``cudaProfilerStop``, after a warm-up), only the kernels the trace
step ranked highest (by function name) and at most ``launch_count`` launches of them, with
:data:`METRICS`. Its CSV (``--csv --page raw --print-units base``: one row per launch, a row
of units under the header; the long form, one row per metric, is read too) becomes one record
per launch: duration, FLOPs (2 × FFMA + FADD + FMUL thread instructions, plus the tensor
path's TF32 operations where the device has that counter), DRAM bytes, arithmetic intensity,
achieved FLOP/s and bytes/s, achieved occupancy; and one summary per kernel name.

Standard library only: the CPU dry run parses :data:`SAMPLE_CSV` through the same code.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

DURATION: Final = "gpu__time_duration.sum"
OCCUPANCY: Final = "sm__warps_active.avg.pct_of_peak_sustained_active"
DRAM_BYTES: Final = "dram__bytes.sum"
FFMA: Final = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
FADD: Final = "sm__sass_thread_inst_executed_op_fadd_pred_on.sum"
FMUL: Final = "sm__sass_thread_inst_executed_op_fmul_pred_on.sum"
TENSOR_TF32: Final = "sm__ops_path_tensor_src_tf32_dst_fp32.sum"
SM_CLOCK: Final = "sm__cycles_elapsed.avg.per_second"
METRICS: Final = (DURATION, OCCUPANCY, DRAM_BYTES, FFMA, FADD, FMUL)
"""Collected always: documented for every architecture since Volta."""
OPTIONAL_METRICS: Final = (TENSOR_TF32, SM_CLOCK)
"""Collected only where ``ncu --query-metrics`` lists them (an unknown metric fails the run):
the tensor path's TF32 operations (ResNet-50's convolutions run there with torch's default
``allow_tf32`` for cuDNN) and the SM clock during the kernel (ncu locks it to base)."""
PERMISSION: Final = "ERR_NVGPUCTRPERM"

_UNIT_SCALE: Final = {
    "nsecond": 1e-9,
    "ns": 1e-9,
    "usecond": 1e-6,
    "us": 1e-6,
    "msecond": 1e-3,
    "ms": 1e-3,
    "second": 1.0,
    "s": 1.0,
}
_PREFIX: Final = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_BASE_UNITS: Final = {DURATION: "nsecond", DRAM_BYTES: "byte"}
"""What ``--print-units base`` prints, for a CSV that came without its row of units."""


def base_name(metric: str) -> str:
    """``dram__bytes.sum`` -> ``dram__bytes`` (what ``--query-metrics`` lists)."""
    return metric.split(".", 1)[0]


def available_metrics(query_output: str) -> set[str]:
    """The base metric names in ``ncu --query-metrics`` output (first word of each line)."""
    names = set()
    for line in query_output.splitlines():
        word = line.split(maxsplit=1)[0] if line.strip() else ""
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+", word):
            names.add(word)
    return names


def choose_metrics(query_output: str | None) -> tuple[list[str], list[str]]:
    """(metrics to collect, optional ones left out): :data:`METRICS`, plus each optional
    metric the query lists; without a usable query, none of the optional ones."""
    listed = available_metrics(query_output or "")
    usable = len(listed) >= 10  # a real listing has hundreds
    chosen = list(METRICS)
    left_out = []
    for metric in OPTIONAL_METRICS:
        if usable and base_name(metric) in listed:
            chosen.append(metric)
        else:
            left_out.append(metric)
    return chosen, left_out


def function_name(kernel: str) -> str | None:
    """The function's own name in a demangled kernel name, what ``--kernel-name-base
    function`` matches: ``void ns::k<T>(args)`` -> ``k``; None when it is no identifier."""
    head = kernel.split("<", 1)[0].split("(", 1)[0].split()
    name = head[-1].rsplit("::", 1)[-1] if head else ""
    return name if re.fullmatch(r"\w+", name) else None


def kernel_filter(kernels: Iterable[str], count: int) -> str | None:
    """A ``--kernel-name regex:`` alternation of the first ``count`` distinct function
    names (None without any)."""
    names: list[str] = []
    for kernel in kernels:
        name = function_name(kernel)
        if name and name not in names:
            names.append(name)
        if len(names) == count:
            break
    return "|".join(names) or None


def command(
    ncu: str,
    log: Path,
    metrics: list[str],
    launch_count: int,
    name_regex: str | None,
    program: list[str],
    nvtx: bool = False,
) -> list[str]:
    """The ``ncu`` command line: CSV of the raw page in base units to ``log``, profiling only
    between cudaProfilerStart and Stop, at most ``launch_count`` launches."""
    line = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(log)]
    line += ["--profile-from-start", "off", "--launch-count", str(launch_count)]
    line += ["--metrics", ",".join(metrics), *(["--nvtx"] if nvtx else [])]
    if name_regex:
        line += ["--kernel-name-base", "function", "--kernel-name", f"regex:{name_regex}"]
    return [*line, *program]


def problem(output: str) -> str | None:
    """Why ``ncu`` measured nothing, from its output: no permission for the performance
    counters (ERR_NVGPUCTRPERM), or its first ``==ERROR==`` line."""
    if PERMISSION in output:
        return f"ncu: {PERMISSION}: no permission to read the GPU performance counters"
    for line in output.splitlines():
        if line.startswith("==ERROR=="):
            return "ncu: " + line.removeprefix("==ERROR==").strip()[:300]
    return None


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None  # "n/a", "", a non-numeric value


def _scale(unit: str) -> float:
    unit = unit.strip()
    if unit in _UNIT_SCALE:
        return _UNIT_SCALE[unit]
    for suffix in ("byte", "inst", "B"):
        if unit.endswith(suffix) and unit[: -len(suffix)] in _PREFIX:
            return _PREFIX[unit[: -len(suffix)]]
    return 1.0  # %, cycle/second, counts


def parse_csv(text: str) -> list[dict[str, Any]]:
    """Launches in ``ncu --csv`` output, in order: ``{"id", "kernel", "metrics": {name:
    value in base units (s, bytes, counts, %)}}``. Lines that are not CSV rows (``==PROF==``
    messages) are skipped; wide (``--page raw``) and long (one metric per row) forms."""
    rows = list(csv.reader(line for line in text.splitlines() if line.startswith('"')))
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header:
        return _parse_long(header, rows[1:])
    return _parse_wide(header, rows[1:])


def _parse_wide(header: list[str], rows: list[list[str]]) -> list[dict[str, Any]]:
    columns = [i for i, name in enumerate(header) if "__" in name]
    units = [""] * len(header)
    launches = []
    for row in rows:
        cells = dict(zip(header, row, strict=False))
        if not cells.get("ID", "").strip().isdigit():  # the units row under the header
            units = [*row, *[""] * (len(header) - len(row))]
            continue
        metrics = {}
        for i in columns:
            value = _number(row[i]) if i < len(row) else None
            unit = units[i] or _BASE_UNITS.get(header[i], "")
            metrics[header[i]] = None if value is None else value * _scale(unit)
        launches.append(
            {
                "id": int(cells["ID"]),
                "kernel": cells.get("Kernel Name", ""),
                "metrics": metrics,
                "layer": layer_of(row),
            }
        )
    return launches


LAYER = re.compile(r"mlms-layer-(\d+)")


def layer_of(cells: Iterable[str]) -> int | None:
    """The layer index of the innermost ``mlms-layer-N`` NVTX range a row names (None)."""
    found = [int(m) for cell in cells for m in LAYER.findall(cell)]
    return found[-1] if found else None


def _parse_long(header: list[str], rows: list[list[str]]) -> list[dict[str, Any]]:
    launches: dict[int, dict[str, Any]] = {}
    for row in rows:
        cells = dict(zip(header, row, strict=False))
        if not cells.get("ID", "").strip().isdigit():
            continue
        launch = launches.setdefault(
            int(cells["ID"]),
            {
                "id": int(cells["ID"]),
                "kernel": cells.get("Kernel Name", ""),
                "metrics": {},
                "layer": layer_of(row),
            },
        )
        value = _number(cells.get("Metric Value", ""))
        scaled = None if value is None else value * _scale(cells.get("Metric Unit", ""))
        launch["metrics"][cells.get("Metric Name", "")] = scaled
    return [launches[k] for k in sorted(launches)]


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def kernel_record(launch: dict[str, Any]) -> dict[str, Any]:
    """One launch: duration, FLOPs, DRAM bytes, arithmetic intensity, FLOP/s, bytes/s."""
    m = launch["metrics"]
    seconds = m.get(DURATION)
    ffma, fadd, fmul = m.get(FFMA), m.get(FADD), m.get(FMUL)
    fp32 = None if None in (ffma, fadd, fmul) else 2 * ffma + fadd + fmul
    tensor = m.get(TENSOR_TF32)
    flops = None if fp32 is None else fp32 + (tensor or 0.0)
    dram = m.get(DRAM_BYTES)
    return {
        "id": launch["id"],
        "kernel": launch["kernel"],
        "layer": launch.get("layer"),
        "duration_s": seconds,
        "flops": flops,
        "flops_fp32": fp32,
        "flops_tensor_tf32": tensor,
        "dram_bytes": dram,
        "arithmetic_intensity_flop_per_byte": _ratio(flops, dram),
        "flop_per_s": _ratio(flops, seconds),
        "dram_bytes_per_s": _ratio(dram, seconds),
        "achieved_occupancy_pct": m.get(OCCUPANCY),
        "sm_clock_hertz": m.get(SM_CLOCK),
    }


def _weighted(group: list[dict[str, Any]], key: str, seconds: float | None) -> float | None:
    """``key``'s mean over the group's launches, weighted by their durations."""
    return _ratio(
        _sum(
            None if r.get(key) is None or r["duration_s"] is None else r[key] * r["duration_s"]
            for r in group
        ),
        seconds,
    )


def _sum(values: Iterable[float | None]) -> float | None:
    items = list(values)
    return None if any(v is None for v in items) else sum(v for v in items if v is not None)


def by_kernel(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Launches of one kernel name together, most total time first: sums of duration, FLOPs
    and bytes, and the ratios of the sums; occupancy weighted by duration."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(record["kernel"], []).append(record)
    return _grouped(groups, "kernel")


def by_layer(records: list[dict[str, Any]], layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Launches under one layer's NVTX range together (the same sums and ratios as
    :func:`by_kernel`), each named by ``layers[i]`` (``description``, ``signature``), in
    layer order; the kernels of a layer are listed by name."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("layer") is not None:
            groups.setdefault(record["layer"], []).append(record)
    rows = _grouped(groups, "layer")
    for row in rows:
        named = layers[row["layer"]] if row["layer"] < len(layers) else {}
        row["description"] = named.get("description")
        row["signature"] = named.get("signature")
        row["kernels"] = sorted({r["kernel"] for r in groups[row["layer"]]})
    return sorted(rows, key=lambda r: r["layer"])


def _grouped(groups: dict[Any, list[dict[str, Any]]], key: str) -> list[dict[str, Any]]:
    out = []
    for name, group in groups.items():
        seconds = _sum(r["duration_s"] for r in group)
        flops = _sum(r["flops"] for r in group)
        dram = _sum(r["dram_bytes"] for r in group)
        out.append(
            {
                key: name,
                "launches": len(group),
                "duration_s": seconds,
                "flops": flops,
                "dram_bytes": dram,
                "arithmetic_intensity_flop_per_byte": _ratio(flops, dram),
                "flop_per_s": _ratio(flops, seconds),
                "dram_bytes_per_s": _ratio(dram, seconds),
                "achieved_occupancy_pct": _weighted(group, "achieved_occupancy_pct", seconds),
                "flops_tensor_tf32": _sum(r.get("flops_tensor_tf32") for r in group),
                "sm_clock_hertz": _weighted(group, "sm_clock_hertz", seconds),
            }
        )
    return sorted(out, key=lambda r: -(r["duration_s"] or 0.0))


SAMPLE_CSV: Final = """\
==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "nchwToNhwcKernel": 0%....50%....100% - 3 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",\
"Grid Size","Device","CC","dram__bytes.sum","gpu__time_duration.sum",\
"sm__ops_path_tensor_src_tf32_dst_fp32.sum",\
"sm__sass_thread_inst_executed_op_fadd_pred_on.sum",\
"sm__sass_thread_inst_executed_op_ffma_pred_on.sum",\
"sm__sass_thread_inst_executed_op_fmul_pred_on.sum",\
"sm__warps_active.avg.pct_of_peak_sustained_active"
"","","","","","","","","","","","byte","nsecond","","inst","inst","inst","%"
"0","4242","python3.12","gpu","void cudnn::engines_precompiled::nchwToNhwcKernel<float, \
float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::\
nchw2nhwc_params_t<float>, float const*, float*)","1","7","(256, 1, 1)","(196, 1, 1)","0",\
"9.0","1,204,224","4,128","0","0","0","150,528","61.5"
"1","4242","python3.12","gpu","sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_\
nchw_tilesize64x32x64_stage5_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel__5x_cudnn",\
"1","7","(128, 1, 1)","(98, 2, 1)","0","9.0","2,408,448","11,296","231,211,008","12,544",\
"25,088","0","20.1"
"2","4242","python3.12","gpu","void cudnn::engines_precompiled::nchwToNhwcKernel<float, \
float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::\
nchw2nhwc_params_t<float>, float const*, float*)","1","7","(256, 1, 1)","(98, 1, 1)","0",\
"9.0","602,112","2,976","0","0","0","75,264","n/a"
==PROF== Disconnected from process 4242
"""
"""What ``ncu --csv --page raw --print-units base`` writes (its shape; made-up figures):
the CPU dry run's input to :func:`parse_csv`, so the parser runs in CI."""
