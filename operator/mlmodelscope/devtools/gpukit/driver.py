"""Run the kit: unpack the bundle, then each step in its own process under its own timeout.

The whole run keeps to :data:`TOTAL_S`; a step gets its own limit or what is left, whichever
is smaller, and a step that overruns is stopped (its process group killed) and recorded as
``timeout`` with what it saved so far, so a slow step cannot starve the rest. After every step
``results.json`` and ``summary.txt`` are rewritten in OUT, so even a run cut off from outside
leaves its results. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from mlmodelscope.devtools.gpukit import bundle
from mlmodelscope.devtools.gpukit.record import StepRecord, problems, results_document

TOTAL_S: Final = 480.0
"""The kit's whole budget (8 minutes), under the remote call's 10-minute cap."""
MIN_STEP_S: Final = 15.0
"""A step is not started with less time left than this."""
MAX_ARTIFACT_BYTES: Final = 15 << 20
"""A step's file larger than this does not come back (the transfer takes up to 16 MiB)."""
LOG_TAIL: Final = 4000


@dataclass(frozen=True)
class Step:
    name: str
    timeout_s: float
    what: str


STEPS: Final = (
    Step("facts", 20, "device, driver, CUDA, cuDNN, torch; packages; the CLI imports"),
    Step("benanza-gpu", 45, "each layer alone in FP32/TF32/FP16, cuDNN search off/on; bound"),
    Step("dlbricks-gpu", 30, "DLBricks: the sum of bricks against the model, batch 1 and 32"),
    Step("eval-resnet50", 100, "mlms run ResNet-50 224 px, SingleStream and Offline, vs bare"),
    Step("eval-bert_base", 100, "mlms run BERT-base seq 128, SingleStream and Offline, vs bare"),
    Step("trace", 45, "library-level tracing (CUPTI kernels), leveled correction"),
    Step("ncu-metrics", 55, "Nsight Compute on ResNet-50 batch 1's top kernels"),
    Step("ncu-layers", 85, "Nsight Compute on every kernel of ResNet-50, under its layer"),
)


EXTRA_STEPS: Final = (
    Step("rounds", 150, "SingleStream batch 1 in 11 interleaved rounds, ResNet-50 and BERT"),
)
"""Steps a run makes only when ``--only`` names them (not within :data:`TOTAL_S`)."""


def chosen(only: str | None) -> tuple[Step, ...]:
    """The steps ``--only`` names, in the kit's order (:data:`EXTRA_STEPS` last), after
    ``facts`` (which every run needs: it says whether there is a GPU); without ``--only``
    the kit's steps."""
    if not only:
        return STEPS
    every = (*STEPS, *EXTRA_STEPS)
    names = {n.strip() for n in only.split(",") if n.strip()}
    unknown = names - {s.name for s in every}
    if unknown:
        raise SystemExit(f"--only: no step {sorted(unknown)}; the steps: {[s.name for s in every]}")
    return tuple(s for s in every if s.name == "facts" or s.name in names)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def step_env(root: Path, site: Path | None) -> dict[str, str]:
    """The steps' environment: the package from the tree, the unpacked wheels after it."""
    paths = [str(root / "operator"), *([str(site)] if site else [])]
    old = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*paths, *([old] if old else [])]),
        "PYTHONUNBUFFERED": "1",
    }


def run_step(
    step: Step, work: Path, gpu: bool, timeout_s: float, env: dict[str, str]
) -> tuple[StepRecord, str]:
    """One step in its own process group; its record (from its file) and its log's tail."""
    command = [sys.executable, "-m", "mlmodelscope.devtools.gpukit", "step", step.name]
    command += ["--work", str(work), *([] if gpu else ["--cpu"])]
    started = time.monotonic()
    log = work / f"{step.name}.log"
    with log.open("w") as handle:
        proc = subprocess.Popen(
            command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the step's own group: it and its children
            proc.wait()
            code = None
    seconds = round(time.monotonic() - started, 2)
    tail = log.read_text(errors="replace")[-LOG_TAIL:]
    saved = work / f"{step.name}.json"
    record = StepRecord(step.name, "failed", timeout_s=round(timeout_s, 1))
    if saved.is_file():
        data = json.loads(saved.read_text())
        record.environment, record.data = data["environment"], data["data"]
        record.status, record.reason = data["status"], data["reason"]
    record.seconds, record.timeout_s = seconds, round(timeout_s, 1)
    if code is None:
        record.status, record.reason = "timeout", f"stopped after {timeout_s:.1f} s"
    elif code != 0:
        last = [line for line in tail.splitlines() if line.strip()][-1:] or ["no output"]
        record.status, record.reason = "failed", f"exit {code}: {last[0][:300]}"
    return record, tail


def detect_gpu(facts: StepRecord) -> bool:
    """The facts step's answer; without it, whether the NVIDIA driver's device exists."""
    if facts.environment:
        return bool(facts.environment.get("cuda_available"))
    return Path("/dev/nvidiactl").exists()


def summary(document: dict[str, Any]) -> str:
    """A few lines per step: status, time, and the figures that matter."""
    env = document.get("environment", {})
    lines = [
        f"mlmodelscope GPU kit, {document['started_at']} → {document.get('finished_at')}",
        f"device {env.get('device')}, driver {env.get('driver')}, CUDA {env.get('cuda')} "
        f"(driver API {env.get('cuda_driver')}), cuDNN {env.get('cudnn')}, "
        f"torch {env.get('torch')}, Python {env.get('python')}",
        f"bundle: unpacked {document['install'].get('unpacked')}, "
        f"kept {document['install'].get('kept')}",
    ]
    for step in document["steps"]:
        reason = f" ({step['reason']})" if step.get("reason") else ""
        lines.append(f"- {step['name']}: {step['status']}{reason}, {step['seconds']} s")
        for row in step["data"].get("overhead", []):
            goal = row["goal_us"]
            verdict = "" if goal is None else f", goal {goal:.1f} µs: "
            verdict += "" if goal is None else ("met" if row["meets_goal"] else "NOT met")
            lines.append(
                f"    {row['scenario']} batch {row['batch_size']}: agent "
                f"{row['agent_p50_us']:.1f} µs, bare {row['bare_p50_us']:.1f} µs, overhead "
                f"{row['overhead_us']:+.1f} µs ({row['overhead_pct']:+.2f} %){verdict}"
            )
        lines += [_energy_line(row) for row in step["data"].get("energy", [])]
        if step["data"].get("interleaved", {}).get("overhead_median_us") is not None:
            lines.append(_interleaved_line(step["data"]["interleaved"]))
        for zoo, rounded in (
            step["data"].get("models", {}) if step["name"] == "rounds" else {}
        ).items():
            lines.append(f"    {zoo}:" + _interleaved_line(rounded).removeprefix("   "))
        if step["data"].get("suspects"):
            lines.append(_suspects_line(step["data"]["suspects"]))
        traced = step["data"].get("models", {}) if step["name"] == "trace" else {}
        for zoo, entry in traced.items():
            correction = (entry.get("tracing") or {}).get("levels", {})
            kernels = entry.get("top_kernels") or []
            head = kernels[0]["name"][:60] if kernels else "no kernels"
            lines.append(f"    {zoo}: levels {sorted(correction)}; top kernel {head}")
        lines += _ncu_lines(step["data"]) if step["name"] == "ncu-metrics" else []
        lines += _layers_lines(step["data"]) if step["name"] == "ncu-layers" else []
        lines += _benanza_lines(step["data"]) if step["name"] == "benanza-gpu" else []
        lines += [_dlbricks_line(e) for e in step["data"].get("estimates", [])]
    lines.append("not yet: " + (", ".join(n["name"] for n in document["not_yet"]) or "none"))
    problems_found = problems(document)
    lines.append("results.json: " + ("valid" if not problems_found else f"{problems_found}"))
    return "\n".join(lines) + "\n"


def _joules(energy: dict[str, Any] | None) -> str:
    if not energy:
        return "none"
    if energy.get("j_per_sample") is None:
        return f"none ({energy.get('reason')})"
    return f"{energy['j_per_sample']:.4g} J/sample over {energy['seconds']:.2f} s"


def _energy_line(row: dict[str, Any]) -> str:
    return (
        f"    energy {row['scenario']} batch {row['batch_size']}: agent "
        f"{_joules(row.get('agent'))}, bare {_joules(row.get('bare'))}"
    )


def _interleaved_line(data: dict[str, Any]) -> str:
    rounds = ", ".join(f"{r['overhead_us']:+.1f}" for r in data["rounds"])
    verdict = "met" if data["meets_goal"] else "NOT met"
    return (
        f"    interleaved {data['scenario']} batch {data['batch_size']}, {data['order']}: "
        f"overhead median {data['overhead_median_us']:+.1f} µs (rounds {rounds}; spread "
        f"{data['overhead_spread_us']:.1f} µs), goal {data['goal_us']:.1f} µs: {verdict}"
    )


def _suspects_line(data: dict[str, Any]) -> str:
    p50 = data["median_p50_us"]
    return (
        f"    suspects batch 1 ({data['order']}): bare p50 {p50['plain']:.1f} µs, with the "
        f"NVML sampler {data['sampler_minus_plain_us']:+.1f} µs"
        + ("" if data["sampler_ran"] else " (no NVML: not running)")
        + f", pinned staging {data['pinned_minus_plain_us']:+.1f} µs"
    )


def _ncu_lines(data: dict[str, Any]) -> list[str]:
    kernels = data.get("by_kernel") or []
    launches = sum(k["launches"] for k in kernels)
    lines = [f"    {data.get('source')}: {launches} launches of {len(kernels)} kernels"]
    for k in kernels[:3]:
        flops, rate = k.get("flop_per_s"), k.get("dram_bytes_per_s")
        intensity, occupancy = (
            k.get("arithmetic_intensity_flop_per_byte"),
            k.get("achieved_occupancy_pct"),
        )
        lines.append(
            f"    {k['kernel'][:60]}: {(k['duration_s'] or 0) * 1e6:.1f} µs, "
            + (f"{flops / 1e12:.2f} TFLOP/s, " if flops is not None else "FLOP/s none, ")
            + (f"{rate / 1e9:.0f} GB/s, " if rate is not None else "GB/s none, ")
            + (f"{intensity:.2f} FLOP/B, " if intensity is not None else "FLOP/B none, ")
            + (f"occupancy {occupancy:.0f} %" if occupancy is not None else "occupancy none")
        )
    return lines


def _layers_lines(data: dict[str, Any]) -> list[str]:
    rows = data.get("by_layer") or []
    lines = [
        f"    {data.get('source')}: {data.get('launches', len(rows))} launches under "
        f"{len(rows)} of {data.get('layers')} layers"
    ]
    roofs = data.get("rooflines")
    if roofs and roofs.get("seconds"):
        lines.append(
            f"    roofline: {roofs['memory_bound_pct']:.1f} % of {roofs['seconds'] * 1e6:.1f} µs "
            f"in memory-bound layers, {roofs['of_roof_pct_time_weighted']:.1f} % of the roof "
            "reached (time-weighted)"
        )
    for row in sorted(rows, key=lambda r: -(r["duration_s"] or 0.0))[:3]:
        flops, intensity = row.get("flop_per_s"), row.get("arithmetic_intensity_flop_per_byte")
        lines.append(
            f"    layer {row['layer']} {row.get('description')}: "
            f"{(row['duration_s'] or 0) * 1e6:.1f} µs in {row['launches']} kernels, "
            + (f"{flops / 1e12:.2f} TFLOP/s, " if flops is not None else "FLOP/s none, ")
            + (f"{intensity:.2f} FLOP/B" if intensity is not None else "FLOP/B none")
        )
    return lines


def _benanza_lines(data: dict[str, Any]) -> list[str]:
    lines = []
    for key, model in data.get("models", {}).items():
        bound = model["bound"]
        per = ", ".join(f"{p} {ms:.3f}" for p, ms in bound["bound_ms_per_precision"].items())
        wall = {v: e["wall_ms"] for v, e in model["end_to_end"].items()}
        best = min(wall, key=lambda v: wall[v])
        device = model["end_to_end"][best]["device_ms"]
        lines.append(
            f"    {key}: bound {bound['bound_ms']:.3f} ms ({per}); best end to end {best!r} "
            f"{wall[best]:.3f} ms, device {device:.3f} ms; {model['layers']} layers, "
            f"{model['bricks']} bricks"
        )
        shown = {next(iter(wall), best), best}  # per-variant kinds: the first and the best
        lines += [
            f"      {s['kind']}: {s['sentence']}"
            for s in model["suggestions"]
            if s.get("variant", best) in shown
        ]
    return lines


def _dlbricks_line(e: dict[str, Any]) -> str:
    return (
        f"    {e['model']} batch {e['batch_size']}: {e['layers']} layers, {e['bricks']} bricks, "
        f"estimate {e['estimate_ms']:.3f} ms (corrected {e['estimate_corrected_ms']:.3f}), "
        f"measured {e['measured_ms']:.3f} ms, error {e['error_pct']:+.1f} % "
        f"(corrected {e['error_corrected_pct']:+.1f} %); device: layers "
        f"{e['device']['layers_ms']:.3f} ms, model {e['device']['model_ms']:.3f} ms "
        f"({e['device']['error_pct']:+.1f} %)"
    )


def write(out: Path, document: dict[str, Any], logs: dict[str, str]) -> None:
    (out / "results.json").write_text(json.dumps(document, indent=1, default=str) + "\n")
    (out / "summary.txt").write_text(summary(document))
    (out / "steps.log").write_text("".join(f"==== {name}\n{tail}\n" for name, tail in logs.items()))


def run(
    out: Path,
    root: Path,
    work: Path | None = None,
    total_s: float = TOTAL_S,
    steps: tuple[Step, ...] = STEPS,
) -> int:
    """The whole kit; exit 0 when every step ran (ok, or skipped for want of a GPU). The
    steps' scratch (models, runs, traces) goes to ``work`` (default ``.gpukit/work``)."""
    deadline = time.monotonic() + total_s
    started = _now()
    out.mkdir(parents=True, exist_ok=True)
    work = work or root / ".gpukit" / "work"
    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("*.json"):
        old.unlink()
    wheels = root / bundle.WHEELS
    install: dict[str, Any] = {"unpacked": [], "kept": [], "note": "no bundle: this Python's own"}
    site = None
    if any(wheels.glob("*.whl")):
        site = work / "site"
        install = bundle.install(wheels, site)
    env = step_env(root, site)
    records: list[StepRecord] = []
    logs: dict[str, str] = {}
    gpu = False
    for step in steps:
        left = deadline - time.monotonic()
        if left < MIN_STEP_S:
            records.append(
                StepRecord(step.name, "not_run", reason=f"{left:.0f} s left of {total_s:.0f} s")
            )
            continue
        record, logs[step.name] = run_step(step, work, gpu, min(step.timeout_s, left), env)
        if step.name == "facts":
            gpu = detect_gpu(record)
        records.append(record)
        for name in record.data.get("artifacts", []):
            source = work / name
            if source.is_file() and source.stat().st_size <= MAX_ARTIFACT_BYTES:
                (out / name).write_bytes(source.read_bytes())
        document = results_document(
            started_at=started, finished_at=None, gpu=gpu, install=install, steps=records
        )
        write(out, document, logs)
    document = results_document(
        started_at=started, finished_at=_now(), gpu=gpu, install=install, steps=records
    )
    write(out, document, logs)
    sys.stdout.write(summary(document))
    bad = [r.name for r in records if r.status not in ("ok", "skipped")]
    return 1 if bad or problems(document) else 0
