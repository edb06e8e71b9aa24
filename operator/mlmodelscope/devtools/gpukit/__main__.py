"""``python -m mlmodelscope.devtools.gpukit prepare | run OUT [--work D] [--only A,B] | step N``.

``prepare`` downloads the bundle and prints the remote call; ``run`` is the command the GPU
machine runs (and CI's dry run); ``step`` is one step, started by ``run`` in its own process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
"""The repository (operator/mlmodelscope/devtools/gpukit/ is four levels down)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlmodelscope.devtools.gpukit")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prepare", help="download the wheels, check the size, print the call")
    run = commands.add_parser("run", help="run every step, results into OUT")
    run.add_argument("out", type=Path)
    run.add_argument("--work", type=Path, help="scratch folder (default .gpukit/work)")
    run.add_argument("--only", help="these steps (comma-separated names), after facts")
    step = commands.add_parser("step", help="one step (started by run)")
    step.add_argument("name")
    step.add_argument("--work", type=Path, required=True)
    step.add_argument("--cpu", action="store_true", help="no GPU: the tiny CPU variant")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        from mlmodelscope.devtools.gpukit.bundle import main_prepare

        return main_prepare(ROOT)
    if args.command == "run":
        from mlmodelscope.devtools.gpukit.driver import chosen
        from mlmodelscope.devtools.gpukit.driver import run as run_kit

        work = args.work.resolve() if args.work else None
        return run_kit(args.out.resolve(), ROOT, work, steps=chosen(args.only))
    from mlmodelscope.devtools.gpukit.steps import STEPS

    STEPS[args.name](args.work, not args.cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
