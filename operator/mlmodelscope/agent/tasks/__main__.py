"""`python -m mlmodelscope.agent.tasks [--link DIR]`: build (or reuse) the cached reference
task models and optionally point DIR at them (examples/tasks/build is where the examples'
relative URIs look)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from mlmodelscope.agent.digits import link_folder
from mlmodelscope.agent.tasks.reference import ensure_task_models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--link", type=Path, help="make this path a symlink to the models")
    args = parser.parse_args(argv)
    start = time.monotonic()
    folder = ensure_task_models()
    print(f"task models: {folder} ({time.monotonic() - start:.1f} s)")  # noqa: T201
    if args.link is not None:
        link_folder(args.link, folder)
        print(f"linked {args.link} -> {folder}")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
