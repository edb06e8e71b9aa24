"""The store's tables (SQLAlchemy Core): ``runs``, one row per run, ``run_results``, one row
per batch size, ``launches``, the evaluations `mlms serve` was asked to run, and
``brick_timings``, DLBricks brick benchmarks reused across estimates. The migrations
in ``migrations/versions`` create exactly these (a test compares them); change both together,
in a new revision."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

metadata = sa.MetaData()

Document = sa.JSON().with_variant(JSONB(), "postgresql")
"""The full result document: JSON on SQLite, JSONB on PostgreSQL."""

Labels = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
"""Tags of a run (e.g. a sweep name), a JSON object; None is SQL NULL, not JSON null."""

RunId = sa.Uuid(as_uuid=False)
"""The agent's run UUID: native uuid on PostgreSQL, 32 hex characters on SQLite."""

runs: Final = sa.Table(
    "runs",
    metadata,
    sa.Column("run_id", RunId, primary_key=True),
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
    # Which data the numbers came from: "digits/test (360 samples)" (revision 0008).
    sa.Column("dataset", sa.String(253), nullable=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("valid", sa.Boolean, nullable=True),
    sa.Column("top1", sa.Float, nullable=True),
    sa.Column("top5", sa.Float, nullable=True),
    # The task's primary metric: top1 (classification), miou, accuracy (revision 0003).
    sa.Column("metric", sa.String(32), nullable=True),
    sa.Column("metric_value", sa.Float, nullable=True),
    sa.Column("error_type", sa.String(128), nullable=True),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("trace_id", sa.String(32), nullable=True),
    sa.Column("labels", Labels, nullable=True),
    # Last: on SQLite, columns stored after a large document are slow to read (revision 0002).
    sa.Column("document", Document, nullable=False),
    # Listings filter by one column and read newest first: (filter, started_at) answers them
    # from one index range, without sorting every match (revision 0002).
    sa.Index("ix_runs_model_name_started_at", "model_name", "started_at"),
    sa.Index("ix_runs_framework_started_at", "framework", "started_at"),
    sa.Index("ix_runs_status_started_at", "status", "started_at"),
    sa.Index("ix_runs_evaluation_started_at", "evaluation", "namespace", "started_at"),
    sa.Index("ix_runs_gpu_product_started_at", "gpu_product", "started_at"),
    sa.Index("ix_runs_metric_started_at", "metric", "started_at"),
    # The leaderboard of one dataset reads its Succeeded runs of one primary metric from one
    # index range (revision 0008).
    sa.Index("ix_runs_dataset_status_metric", "dataset", "status", "metric"),
    sa.Index("ix_runs_model_sha256", "model_sha256"),
    sa.Index("ix_runs_framework", "framework", "framework_version"),
    sa.Index("ix_runs_device", "device", "gpu_product"),
    sa.Index("ix_runs_started_at", "started_at"),
)

run_results: Final = sa.Table(
    "run_results",
    metadata,
    sa.Column(
        "run_id",
        RunId,
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
    # The row's efficiency, as the document's row has it (revision 0008): J per sample from
    # the hardware's energy counter (nvml or rapl), USD per 1,000 samples from a price per
    # node-hour; NULL when not measured.
    sa.Column("joules_per_inference", sa.Float, nullable=True),
    sa.Column("energy_method", sa.String(16), nullable=True),
    sa.Column("cost_per_1000", sa.Float, nullable=True),
)

launches: Final = sa.Table(
    "launches",
    metadata,
    sa.Column("launch_id", RunId, primary_key=True),
    sa.Column("evaluation", sa.String(253), nullable=False),
    sa.Column("model_name", sa.String(253), nullable=True),
    sa.Column("framework", sa.String(64), nullable=True),
    # queued, running, succeeded, failed, cancelled, interrupted (server/launch_queue.py)
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),  # the ModelEvaluation YAML it runs
    sa.Column("run_id", RunId, nullable=True),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
    # where a cluster launch created its ModelEvaluation (revision 0006); NULL when run locally
    sa.Column("namespace", sa.String(63), nullable=True),
    sa.Column("resource_uid", sa.String(64), nullable=True),
    # the launched EvaluationSweep it is a child of (revision 0007); NULL for a lone launch
    sa.Column("sweep_id", RunId, nullable=True),
    sa.Index("ix_launches_state_created_at", "state", "created_at"),
    sa.Index("ix_launches_created_at", "created_at"),
    sa.Index("ix_launches_sweep_id", "sweep_id"),
)
"""The launch queue of `mlms serve` (revision 0004): one row per ModelEvaluation launched from
the API or the dashboard, its state, and the run it recorded (no foreign key: a run is
recorded, and may be deleted, on its own); for a cluster launch (revision 0006), the namespace
and uid of the ModelEvaluation it created."""

launch_sweeps: Final = sa.Table(
    "launch_sweeps",
    metadata,
    sa.Column("sweep_id", RunId, primary_key=True),
    sa.Column("name", sa.String(253), nullable=False),
    sa.Column("spec", sa.Text, nullable=False),  # the EvaluationSweep YAML
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # where a cluster launch created the EvaluationSweep (revision 0009); NULL when run locally
    sa.Column("namespace", sa.String(63), nullable=True),
    sa.Column("resource_uid", sa.String(64), nullable=True),
    sa.Index("ix_launch_sweeps_created_at", "created_at"),
)
"""EvaluationSweeps launched on `mlms serve` (revision 0007): the document, no state of its
own; its children are ``launches`` rows with its ``sweep_id``, and its state is summed up
from theirs when read; for a cluster launch (revision 0009), the namespace and uid of the
EvaluationSweep it created."""

brick_timings: Final = sa.Table(
    "brick_timings",
    metadata,
    sa.Column("stack_key", sa.String(64), primary_key=True),  # sha256 of ``stack``
    sa.Column("brick_key", sa.String(64), primary_key=True),  # sha256 of ``signature``
    sa.Column("op_type", sa.String(128), nullable=False),
    sa.Column("signature", sa.Text, nullable=False),
    sa.Column("stack", Document, nullable=False),
    sa.Column("p50_ms", sa.Float, nullable=False),
    sa.Column("mean_ms", sa.Float, nullable=False),
    sa.Column("min_ms", sa.Float, nullable=False),
    sa.Column("runs", sa.Integer, nullable=False),
    sa.Column("warmup", sa.Integer, nullable=False),
    sa.Column("measure_s", sa.Float, nullable=False),
    sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
)
"""DLBricks brick benchmarks (revision 0005): one row per brick measured on one system and
software stack; ``measure_s`` is the wall time measuring it took, which reusing it saves."""
