"""The program ``ncu`` profiles in the ``ncu-layers`` step: one forward of a zoo model
(``nn.Module``, seeded random weights) with each layer's kernels inside an NVTX range named
for the layer's index, so Nsight Compute names the layer in every kernel's row.

``python ncu_layers_target.py ZOO BATCH WARMUP LAYERS.json [cpu]``: ``WARMUP`` forwards
first, then one recorded forward between ``cudaProfilerStart`` and ``cudaProfilerStop``; the
layers (index, signature, description) go to LAYERS.json. With ``cpu`` (the dry run) the
same on the CPU, one thread, without NVTX or the profiler calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch

    from mlmodelscope.devtools.gpukit import layerbench
    from mlmodelscope.devtools.gpukit.layersteps import example, zoo_module

    zoo, batch, warmup, out = argv[:4]
    gpu = argv[4:] != ["cpu"]
    device = "cuda:0" if gpu else "cpu"
    if not gpu:
        torch.set_num_threads(1)
    model, dims, dtype, _ = zoo_module(zoo, small=not gpu, device=device)
    x = example(dims, dtype, int(batch), device)
    with torch.inference_mode():
        for _ in range(int(warmup)):
            model(x)
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()  # type: ignore[no-untyped-call]
    recording = layerbench.record(model, x, nvtx=gpu)
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()  # type: ignore[no-untyped-call]
    bricks = recording.bricks
    layers = [
        {"layer": i, "signature": sig, "description": bricks[sig].description}
        for i, sig in enumerate(recording.layers)
    ]
    Path(out).write_text(json.dumps(layers, indent=1) + "\n")
    sys.stdout.write(f"profiled one forward of {zoo}, {len(layers)} layers, on {device}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
