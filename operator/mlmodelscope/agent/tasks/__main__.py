"""`python -m mlmodelscope.agent.tasks [--link DIR]`: build (or reuse) the cached reference
task models and optionally point DIR at them (examples/tasks/build is where the examples'
relative URIs look)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mlmodelscope.agent.digits import build_and_link
from mlmodelscope.agent.tasks.reference import ensure_task_models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--link", type=Path, help="make this path a symlink to the models")
    args = parser.parse_args(argv)
    return build_and_link("task models", ensure_task_models, args.link)


if __name__ == "__main__":
    raise SystemExit(main())
