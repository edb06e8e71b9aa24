"""runs and run_results

Revision ID: 0001
Revises:
Create Date: 2026-11-23

Written by hand; frozen: later changes go in a new revision, never here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    uuid = sa.Uuid(as_uuid=False)
    op.create_table(
        "runs",
        sa.Column("run_id", uuid, primary_key=True),
        sa.Column("evaluation", sa.String(253), nullable=True),
        sa.Column("namespace", sa.String(63), nullable=True),
        sa.Column("generation", sa.Integer, nullable=True),
        sa.Column("spec_sha256", sa.String(64), nullable=True),
        sa.Column("model_name", sa.String(253), nullable=True),
        sa.Column("model_sha256", sa.String(64), nullable=True),
        sa.Column("framework", sa.String(64), nullable=True),
        sa.Column("framework_version", sa.String(64), nullable=True),
        sa.Column("device", sa.String(64), nullable=True),
        sa.Column("gpu_product", sa.String(128), nullable=True),
        sa.Column("scenario", sa.String(32), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("valid", sa.Boolean, nullable=True),
        sa.Column("top1", sa.Float, nullable=True),
        sa.Column("top5", sa.Float, nullable=True),
        sa.Column("error_type", sa.String(128), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("document", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    )
    op.create_index("ix_runs_model_name", "runs", ["model_name"])
    op.create_index("ix_runs_model_sha256", "runs", ["model_sha256"])
    op.create_index("ix_runs_framework", "runs", ["framework", "framework_version"])
    op.create_index("ix_runs_device", "runs", ["device", "gpu_product"])
    op.create_index("ix_runs_gpu_product", "runs", ["gpu_product"])
    op.create_index("ix_runs_evaluation", "runs", ["evaluation", "namespace"])
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
    op.create_table(
        "run_results",
        sa.Column(
            "run_id",
            uuid,
            sa.ForeignKey("runs.run_id", name="fk_run_results_run_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("batch_size", sa.Integer, primary_key=True),
        sa.Column("scenario", sa.String(32), nullable=False),
        sa.Column("p50_ms", sa.Float, nullable=True),
        sa.Column("p90_ms", sa.Float, nullable=True),
        sa.Column("p99_ms", sa.Float, nullable=True),
        sa.Column("mean_ms", sa.Float, nullable=True),
        sa.Column("throughput", sa.Float, nullable=True),
        sa.Column("qps", sa.Float, nullable=True),
        sa.Column("valid", sa.Boolean, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("run_results")
    op.drop_table("runs")
