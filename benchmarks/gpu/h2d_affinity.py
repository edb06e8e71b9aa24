"""Host-to-device copy time of one ResNet-50 batch-1 input (602,112 bytes) and of a batch of 8,
pageable and pinned, from a process bound to each NUMA node's CPUs in turn: does where the
process runs explain the agent-vs-bare spread of the GPU kit's ResNet-50 batch-1 rows?

    python3 benchmarks/gpu/h2d_affinity.py OUT.json    (on a GPU machine; about 20 s)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def cpus(node: Path) -> set[int]:
    found: set[int] = set()
    for part in (node / "cpulist").read_text().strip().split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def measure(label: str) -> dict[str, object]:
    import torch

    rows: dict[str, object] = {"label": label, "cpus": sorted(os.sched_getaffinity(0))}
    for batch in (1, 8):
        for pinned in (False, True):
            x = torch.rand(batch, 3, 224, 224)
            if pinned:
                x = x.pin_memory()
            for _ in range(50):
                x.to("cuda:0")
            torch.cuda.synchronize()
            ns = []
            for _ in range(500):
                t0 = time.perf_counter_ns()
                x.to("cuda:0")
                torch.cuda.synchronize()
                ns.append(time.perf_counter_ns() - t0)
            rows[f"batch{batch}_{'pinned' if pinned else 'pageable'}_p50_us"] = round(
                statistics.median(ns) / 1e3, 1
            )
    return rows


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(measure(sys.argv[2])))
        return 0
    out = Path(sys.argv[1])
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    report: dict[str, object] = {"nodes": {n.name: sorted(cpus(n)) for n in nodes}}
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True)
    report["nvidia_smi_topo"] = topo.stdout
    runs = []
    for label, mask in [("unbound", None), *((n.name, cpus(n)) for n in nodes)]:
        done = subprocess.run(
            [sys.executable, __file__, "--child", label],
            capture_output=True, text=True, timeout=120,
            preexec_fn=(lambda m=mask: os.sched_setaffinity(0, m)) if mask else None,
        )  # fmt: skip
        runs.append(
            json.loads(done.stdout)
            if done.returncode == 0
            else {"label": label, "error": done.stderr[-500:]}
        )
    report["runs"] = runs
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
