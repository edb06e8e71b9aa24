"""What a brick Job's worker prints, and reading it back from the pod's log.

The worker (``analysis/brick_worker.py``) writes one JSON object per line on stdout, each
tagged ``{"dlbricks": <record>}``: ``stack`` first (the system and software stack its timings
hold for), then either ``suite`` (the suite it read, for planning) or one ``timing`` per brick
as soon as it is measured, so a worker that dies mid-batch still leaves what it measured in
its log. Anything else in the log (ONNX Runtime's warnings, a traceback) is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from mlmodelscope.analysis.brickstore import MeasuredBrick
from mlmodelscope.analysis.bricksuite import Suite

TAG = "dlbricks"


def stack_line(stack: Mapping[str, Any]) -> str:
    return json.dumps({TAG: "stack", "stack": dict(stack)}, sort_keys=True)


def suite_line(suite: Suite) -> str:
    return json.dumps({TAG: "suite", "suite": suite.to_dict()})


def timing_line(brick: MeasuredBrick) -> str:
    return json.dumps({TAG: "timing", **asdict(brick)})


@dataclass(frozen=True)
class WorkerOutput:
    """The records of one worker's log."""

    stack: dict[str, Any] | None
    suite: Suite | None
    timings: tuple[MeasuredBrick, ...]


TIMING_FIELDS = tuple(f.name for f in fields(MeasuredBrick))


def parse_output(log: str) -> WorkerOutput:
    """The stack, suite and timings in ``log``; lines that are not records are skipped, and
    so is a record cut short (a worker killed mid-line)."""
    stack: dict[str, Any] | None = None
    suite: Suite | None = None
    timings: list[MeasuredBrick] = []
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        kind = record.get(TAG) if isinstance(record, dict) else None
        if kind == "stack" and isinstance(record.get("stack"), dict):
            stack = record["stack"]
        elif kind == "suite":
            suite = Suite.from_dict(record.get("suite"))
        elif kind == "timing" and all(name in record for name in TIMING_FIELDS):
            timings.append(MeasuredBrick(**{name: record[name] for name in TIMING_FIELDS}))
    return WorkerOutput(stack, suite, tuple(timings))
