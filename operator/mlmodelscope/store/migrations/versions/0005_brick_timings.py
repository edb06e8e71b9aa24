"""brick_timings: DLBricks brick benchmarks, reused across estimates

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28

Written by hand; frozen once released: later changes go in a new revision, never here.

* ``brick_timings``: one row per DLBricks brick measured on one system and software stack,
  keyed by ``stack_key`` (sha256 of the stack: CPU model, cores, ONNX Runtime version,
  provider, threads, graph and optimization level, warm-up and timed runs) and ``brick_key``
  (sha256 of the brick's signature: op, input shapes and dtypes, attributes). It holds the
  readable signature and stack, the brick's p50, mean and min latency, its protocol, and
  ``measure_s``, the wall time measuring it took (what a later estimate saves by reusing it).
  The primary key answers the lookup (one stack, many bricks).

A new table only, the same on SQLite and PostgreSQL; downgrade drops it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "brick_timings",
        sa.Column("stack_key", sa.String(64), primary_key=True),
        sa.Column("brick_key", sa.String(64), primary_key=True),
        sa.Column("op_type", sa.String(128), nullable=False),
        sa.Column("signature", sa.Text, nullable=False),
        sa.Column("stack", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
        sa.Column("p50_ms", sa.Float, nullable=False),
        sa.Column("mean_ms", sa.Float, nullable=False),
        sa.Column("min_ms", sa.Float, nullable=False),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("warmup", sa.Integer, nullable=False),
        sa.Column("measure_s", sa.Float, nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("brick_timings")
