"""The program ``ncu`` profiles in the ``ncu-metrics`` step, run by its path (torch only).

``python ncu_target.py MODEL.pt DIMS DTYPE BATCH WARMUP [cpu]``: loads the TorchScript file,
runs ``WARMUP`` forwards on one seeded batch (TorchScript's profiling runs and cuDNN's
algorithm choice happen there), then exactly one forward between ``cudaProfilerStart`` and
``cudaProfilerStop``, which ``ncu --profile-from-start off`` profiles. With ``cpu`` (the dry
run) the same on the CPU, one thread, without the profiler calls.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def main(argv: list[str]) -> int:
    import torch

    path, dims, dtype, batch, warmup = argv[:5]
    device = "cpu" if argv[5:] == ["cpu"] else "cuda:0"
    if device == "cpu":
        torch.set_num_threads(1)  # the dry run, on a busy CI machine
    shape = (int(batch), *(int(d) for d in dims.split(",")))
    generator = torch.Generator().manual_seed(0)
    kind = getattr(torch, dtype)
    if kind.is_floating_point:
        x = torch.rand(shape, generator=generator, dtype=kind)
    else:  # token ids: small enough for any vocabulary
        x = torch.randint(0, 1000, shape, generator=generator, dtype=kind)
    jit: Any = torch.jit
    module = jit.load(path, map_location=device).eval()
    x = x.to(device)
    cuda: Any = torch.cuda
    gpu = device != "cpu"
    with torch.inference_mode():
        for _ in range(int(warmup)):
            module(x)
        if gpu:
            cuda.synchronize()
            cuda.profiler.start()
        t0 = time.perf_counter()
        module(x)
        if gpu:
            cuda.synchronize()
            cuda.profiler.stop()
    seconds = time.perf_counter() - t0
    sys.stdout.write(f"profiled one forward of {path} on {device}: {seconds:.6f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
