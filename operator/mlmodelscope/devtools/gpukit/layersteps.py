"""The kit's per-layer steps: ``benanza-gpu`` (each layer alone in six variants, the bound
as the best per layer, the suggestions it implies) and ``dlbricks-gpu`` (the model's latency
estimated from its bricks against the model measured). Measuring is :mod:`.layerbench`,
what the figures say :mod:`.layerreport`. The zoo's models, seeded random weights, as
``nn.Module`` (a TorchScript file would hide its layers from the dispatcher).
"""

from __future__ import annotations

import copy
import traceback
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from mlmodelscope.devtools.gpukit.layerreport import (
    BrickTime,
    bound,
    dlbricks_estimate,
    pointwise_share,
    suggestions,
)
from mlmodelscope.devtools.gpukit.plans import BENANZA_PLANS, DLBRICKS_PLANS, LayerPlan
from mlmodelscope.devtools.gpukit.writer import Writer, block_frameworks, fail_if

DEFAULT = "torch defaults"
"""DLBricks' variant: what ``mlms run`` runs, torch's own TF32 and cuDNN settings."""


def zoo_module(zoo: str, small: bool, device: str) -> tuple[Any, list[int], str, dict[str, Any]]:
    """The zoo model (seeded random weights, eval mode) on ``device``; its input's dims
    without the batch, dtype, and the zoo's parameters."""
    import torch

    from mlmodelscope.zoo import entry
    from mlmodelscope.zoo.architectures import randomize
    from mlmodelscope.zoo.build import SEED
    from mlmodelscope.zoo.registry import torch_factory

    zoo_entry = entry(zoo)
    params = zoo_entry.resolve(small=small)
    (spec,) = zoo_entry.inputs(params)
    torch.manual_seed(SEED)
    model = randomize(torch_factory(zoo)(params), SEED).eval().to(device)
    return model, [int(d) for d in spec.shape[1:]], spec.dtype, params


def example(dims: list[int], dtype: str, batch: int, device: str) -> Any:
    """A seeded batch: normal floats, or token id 0 for integer inputs."""
    import torch

    generator = torch.Generator().manual_seed(0)
    kind = getattr(torch, dtype)
    if kind.is_floating_point:
        return torch.randn([batch, *dims], generator=generator, dtype=kind).to(device)
    return torch.zeros([batch, *dims], dtype=kind, device=device)


def _setup(gpu: bool) -> tuple[str, bool]:
    import torch

    if not gpu:
        torch.set_num_threads(1)
    return ("cuda:0", True) if gpu else ("cpu", False)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def _fused(model: Any) -> Any:
    """Convolution and batch norm folded together by torch.fx (fails for a model torch.fx
    cannot trace symbolically)."""
    from torch.fx.experimental.optimization import fuse

    return fuse(model)


# ------------------------------------------------------------------------------ Benanza


def benanza_model(zoo: str, batch: int, plan: LayerPlan, device: str, cuda: bool) -> dict[str, Any]:
    """One model at one batch size: every brick and the whole model in every variant."""
    from mlmodelscope.devtools.gpukit import layerbench as lb

    model, dims, dtype, params = zoo_module(zoo, plan.small, device)
    inputs = {"fp32": example(dims, dtype, batch, device)}
    models = {"fp32": model, "fp16": lb.cast(copy.deepcopy(model), "fp16")}
    inputs["fp16"] = lb.cast(inputs["fp32"], "fp16")
    recordings = {p: lb.record(models[p], inputs[p]) for p in ("fp32", "fp16")}
    not_run: dict[str, str] = {}
    fused: dict[str, Any] = {}
    for precision in ("fp32", "fp16"):
        try:
            fused[precision] = _fused(models[precision])
        except Exception as exc:
            not_run[f"fused {precision}"] = _reason(exc)
    layers = recordings["fp32"].layers
    times: list[BrickTime] = []
    bricks: dict[str, dict[str, Any]] = {}
    end_to_end: dict[str, dict[str, float]] = {}
    graphs: dict[str, float] = {}
    fused_ms: dict[str, float] = {}
    not_timed: dict[str, dict[str, str]] = {}
    for variant in lb.VARIANTS:
        kind = "fp16" if variant.precision == "fp16" else "fp32"
        net, x = models[kind], inputs[kind]
        with lb.running(variant):  # the whole model first: kernels loaded, clocks up
            whole = lb.time_call(
                partial(net, x), plan.runs, plan.warmup, cuda, lb.MODEL_FILL_CYCLES
            )
            end_to_end[variant.label] = {"wall_ms": whole.wall_ms, "device_ms": whole.device_ms}
            for sig, brick in recordings[kind].bricks.items():
                row = bricks.setdefault(
                    sig, {"op": brick.op, "description": brick.description, "calls": brick.calls}
                )
                try:
                    t = lb.time_brick(brick, plan.runs, plan.warmup, cuda)
                except Exception as exc:
                    not_timed.setdefault(variant.label, {})[brick.op] = _reason(exc)
                    continue
                times.append(BrickTime(sig, variant.label, t.device_ms, t.wall_ms))
                row[variant.label] = {"device_ms": t.device_ms, "wall_ms": t.wall_ms}
            if kind in fused:
                f = lb.time_call(partial(fused[kind], x), plan.runs, plan.warmup, cuda)
                fused_ms[variant.label] = f.wall_ms
            if cuda:
                try:
                    replay = lb.cuda_graph(net, x)
                    replayed = lb.time_call(replay, plan.runs, plan.warmup, cuda)
                    graphs[variant.label] = replayed.wall_ms
                except Exception as exc:
                    not_run[f"cuda graph {variant.label}"] = _reason(exc)
    descriptions = {sig: row["description"] for sig, row in bricks.items()}
    conditions = {"runs": plan.runs, "warmup": plan.warmup, "device": device}
    conditions["not_timed"] = not_timed
    measured = bound(
        zoo,
        layers,
        descriptions,
        times,
        {v: e["wall_ms"] for v, e in end_to_end.items()},
        conditions,
    )
    default = lb.VARIANTS[0].label
    return {
        "model": zoo,
        "params": params,
        "batch_size": batch,
        "device": device,
        "layers": len(layers),
        "bricks": len(set(layers)),
        "views_left_out": recordings["fp32"].views,
        "fp16_layers_match": recordings["fp16"].layers == layers,
        "end_to_end": end_to_end,
        "cuda_graph_ms": graphs,
        "fused_ms": fused_ms,
        "not_run": not_run,
        "bound": measured,
        "suggestions": suggestions(layers, times, end_to_end, graphs, fused_ms),
        "pointwise": pointwise_share(layers, times, default),
        "bricks_timed": [{"signature": sig, **row} for sig, row in bricks.items()],
    }


def benanza_gpu(work: Path, gpu: bool) -> None:
    """Benanza on the GPU (:data:`BENANZA_PLANS`), each model in turn; in the CPU variant the
    same code on the zoo's test sizes."""
    writer = Writer(work, "benanza-gpu", gpu)
    block_frameworks()
    plan = BENANZA_PLANS[gpu]
    device, cuda = _setup(gpu)
    from mlmodelscope.devtools.gpukit import layerbench as lb

    writer.save(plan=asdict(plan), variants=[v.label for v in lb.VARIANTS])
    models: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for zoo in plan.models:
        for batch in plan.batch_sizes:
            key = f"{zoo}-b{batch}"
            try:
                models[key] = benanza_model(zoo, batch, plan, device, cuda)
            except Exception as exc:  # recorded; the next model still runs
                errors[key] = _reason(exc) + "\n" + traceback.format_exc()[-1500:]
            writer.save(models=models, errors=errors)
    fail_if(errors)


# ----------------------------------------------------------------------------- DLBricks


def dlbricks_gpu(work: Path, gpu: bool) -> None:
    """DLBricks on the GPU (:data:`DLBRICKS_PLANS`): per model and batch size, each brick's
    wall time alone in torch's default settings, summed, against the whole model."""
    writer = Writer(work, "dlbricks-gpu", gpu)
    block_frameworks()
    plan = DLBRICKS_PLANS[gpu]
    device, cuda = _setup(gpu)
    import torch

    from mlmodelscope.devtools.gpukit import layerbench as lb

    settings = {
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
    }
    overhead = lb.sync_overhead_ms(max(plan.runs, 50), cuda)
    writer.save(plan=asdict(plan), variant=DEFAULT, settings=settings, overhead_ms=overhead)
    estimates: list[dict[str, Any]] = []
    errors: dict[str, str] = {}
    signatures: set[str] = set()
    layers_total = 0
    for zoo in plan.models:
        try:
            model, dims, dtype, _ = zoo_module(zoo, plan.small, device)
        except Exception as exc:
            errors[zoo] = _reason(exc)
            continue
        for batch in plan.batch_sizes:
            try:
                x = example(dims, dtype, batch, device)
                recording = lb.record(model, x)
                whole = lb.time_call(
                    partial(model, x), plan.runs, plan.warmup, cuda, lb.MODEL_FILL_CYCLES
                )
                timed = {
                    sig: lb.time_brick(brick, plan.runs, plan.warmup, cuda)
                    for sig, brick in recording.bricks.items()
                }
                times = {sig: t.wall_ms for sig, t in timed.items()}
                estimate = dlbricks_estimate(
                    zoo, batch, recording.layers, times, whole.wall_ms, overhead
                )
                on_device = sum(timed[sig].device_ms for sig in recording.layers)
                estimate["device"] = {
                    "layers_ms": round(on_device, 4),
                    "model_ms": round(whole.device_ms, 4),
                    "error_pct": round(100 * (on_device - whole.device_ms) / whole.device_ms, 1),
                }
                estimates.append(estimate)
                signatures.update(recording.layers)
                layers_total += len(recording.layers)
            except Exception as exc:  # recorded; the next batch size still runs
                errors[f"{zoo}-b{batch}"] = _reason(exc)
            writer.save(
                estimates=estimates,
                errors=errors,
                unique_bricks=len(signatures),
                layers_total=layers_total,
            )
    fail_if(errors)
