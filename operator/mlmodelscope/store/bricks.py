"""DLBricks brick timings in the results store (``brick_timings``, revision 0005).

A row is one brick measured on one system and software stack: ``stack_key`` and ``brick_key``
are hashes the caller computes (``mlmodelscope.analysis.brickstore``), so the store knows
nothing of ONNX. Writes are idempotent (insert ... on conflict do nothing): the first
measurement of a brick on a stack is kept.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import sqlalchemy as sa

from mlmodelscope.store.schema import brick_timings

LOOKUP_CHUNK = 500
"""Brick keys per ``IN`` list: well under SQLite's bound-parameter limit."""


class BrickRecord(Protocol):
    """What is stored of a measured brick (the analysis side's ``MeasuredBrick``)."""

    @property
    def brick_key(self) -> str: ...
    @property
    def signature(self) -> str: ...
    @property
    def op_type(self) -> str: ...
    @property
    def p50_ms(self) -> float: ...
    @property
    def mean_ms(self) -> float: ...
    @property
    def min_ms(self) -> float: ...
    @property
    def runs(self) -> int: ...
    @property
    def warmup(self) -> int: ...
    @property
    def measure_s(self) -> float: ...


@dataclass(frozen=True)
class StoredBrick:
    """A stored brick timing, as :meth:`Store.brick_timings` returns it."""

    brick_key: str
    signature: str
    op_type: str
    p50_ms: float
    mean_ms: float
    min_ms: float
    runs: int
    warmup: int
    measure_s: float
    """Wall time measuring the brick took (session creation, warm-up and timed runs)."""
    measured_at: datetime


def select_bricks(
    conn: sa.Connection, stack_key: str, brick_keys: Collection[str]
) -> dict[str, StoredBrick]:
    """The stored timings of ``brick_keys`` on ``stack_key``, by brick key (missing: absent)."""
    keys = sorted(set(brick_keys))
    found: dict[str, StoredBrick] = {}
    columns = [brick_timings.c[name] for name in StoredBrick.__dataclass_fields__]
    for start in range(0, len(keys), LOOKUP_CHUNK):
        query = sa.select(*columns).where(
            brick_timings.c.stack_key == stack_key,
            brick_timings.c.brick_key.in_(keys[start : start + LOOKUP_CHUNK]),
        )
        for row in conn.execute(query).mappings():
            at = row["measured_at"]
            fields = {**row, "measured_at": at if at.tzinfo else at.replace(tzinfo=UTC)}
            found[row["brick_key"]] = StoredBrick(**fields)
    return found


def brick_rows(
    stack_key: str, stack: Mapping[str, Any], bricks: Iterable[BrickRecord]
) -> list[dict[str, Any]]:
    """``brick_timings`` rows for ``bricks`` measured now on ``stack``."""
    now = datetime.now(UTC)
    return [
        {
            "stack_key": stack_key,
            "brick_key": b.brick_key,
            "op_type": b.op_type,
            "signature": b.signature,
            "stack": dict(stack),
            "p50_ms": b.p50_ms,
            "mean_ms": b.mean_ms,
            "min_ms": b.min_ms,
            "runs": b.runs,
            "warmup": b.warmup,
            "measure_s": b.measure_s,
            "measured_at": now,
        }
        for b in bricks
    ]
