"""Read-side queries over the results store beyond :meth:`Store.list_runs`: paging and
counting, a leaderboard per model and hardware, a model's history, and one flat row per run
and batch size (CSV export). `mlms serve` answers its API and dashboard with them.

Plain SQLAlchemy Core over the tables of :mod:`mlmodelscope.store.schema` (window functions
included), so every query runs the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

import sqlalchemy as sa

from mlmodelscope.store.schema import run_results, runs
from mlmodelscope.store.store import (
    NEWEST_FIRST,
    SUMMARY_COLUMNS,
    RunFilter,
    RunSummary,
    Store,
    as_utc,
    summaries_of,
)

SUCCEEDED: Final = "Succeeded"
ANY_RUN: Final = RunFilter()
"""The filter that matches every run."""
Metric = Literal["p50_ms", "p99_ms", "throughput", "top1", "metric_value"]
LOWER_IS_BETTER: Final[dict[str, bool]] = {
    "p50_ms": True,
    "p99_ms": True,
    "throughput": False,
    "top1": False,
    "metric_value": False,
}
"""Each leaderboard metric, and whether its best run has the lowest value. ``metric_value`` is
the task's primary metric (top1, miou, accuracy: higher is better for each); it ranks only
runs whose primary metric has the name the filter gives (:attr:`RunFilter.metric`), so an
mIoU is never ranked against an accuracy."""


def count_runs(store: Store, where: RunFilter = ANY_RUN) -> int:
    """How many recorded runs match ``where``."""
    query = where.apply(sa.select(sa.func.count()).select_from(runs))
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def page_runs(
    store: Store, where: RunFilter = ANY_RUN, *, limit: int = 100, offset: int = 0
) -> list[RunSummary]:
    """The matching runs, newest first (ties by run id), ``limit`` of them after skipping
    ``offset``: :meth:`Store.list_runs` with paging and the scenario filter."""
    query = where.apply(sa.select(*SUMMARY_COLUMNS))
    query = query.order_by(*NEWEST_FIRST).limit(limit).offset(offset)
    with store.engine.connect() as conn:
        return summaries_of(conn, conn.execute(query).mappings().all())


@dataclass(frozen=True)
class LeaderboardEntry:
    """The best Succeeded run of one model on one framework, device and GPU product."""

    model_name: str | None
    framework: str | None
    device: str | None
    gpu_product: str | None
    framework_version: str | None
    """Of the best run (the group spans every version)."""
    run_id: str
    evaluation: str | None
    started_at: datetime
    batch_size: int
    value: float
    """The ranked metric of the best run."""
    p50_ms: float | None
    p99_ms: float | None
    throughput: float | None
    top1: float | None
    metric: str | None
    """The name of the best run's primary metric (top1, miou, accuracy)."""
    metric_value: float | None
    valid: bool | None
    """The verdict of the best run at this batch size."""
    runs: int
    """Succeeded runs in the group that measured this batch size."""


def leaderboard(
    store: Store,
    *,
    metric: Metric = "p50_ms",
    batch_size: int = 1,
    where: RunFilter = ANY_RUN,
) -> list[LeaderboardEntry]:
    """Per (model, framework, device, GPU product), the Succeeded run with the best
    ``metric`` at ``batch_size`` (lowest latency, highest throughput, top-1 or primary metric;
    ties: the newer run). Runs that did not measure ``batch_size``, or lack the metric, take no
    part. Sorted by model, then best value first. ``metric_value`` needs ``where.metric``, the
    primary metric's name."""
    if metric not in LOWER_IS_BETTER:
        raise ValueError(f"metric {metric!r}: one of {', '.join(LOWER_IS_BETTER)}")
    if metric == "metric_value" and where.metric is None:
        raise ValueError(
            "metric 'metric_value' ranks one primary metric: name it (top1, miou, accuracy)"
        )
    value = runs.c[metric] if metric in ("top1", "metric_value") else run_results.c[metric]
    best = value.asc() if LOWER_IS_BETTER[metric] else value.desc()
    group = (runs.c.model_name, runs.c.framework, runs.c.device, runs.c.gpu_product)
    ranked = (
        where.apply(
            sa.select(
                runs.c.model_name,
                runs.c.framework,
                runs.c.device,
                runs.c.gpu_product,
                runs.c.framework_version,
                runs.c.run_id,
                runs.c.evaluation,
                runs.c.started_at,
                run_results.c.batch_size,
                value.label("value"),
                run_results.c.p50_ms,
                run_results.c.p99_ms,
                run_results.c.throughput,
                runs.c.top1,
                runs.c.metric,
                runs.c.metric_value,
                run_results.c.valid,
                sa.func.count().over(partition_by=group).label("runs"),
                sa.func.row_number()
                .over(partition_by=group, order_by=(best, *NEWEST_FIRST))
                .label("rank"),
            ).select_from(runs.join(run_results, run_results.c.run_id == runs.c.run_id))
        )
        .where(
            runs.c.status == SUCCEEDED,
            run_results.c.batch_size == batch_size,
            value.is_not(None),
        )
        .subquery()
    )
    order = ranked.c.value.asc() if LOWER_IS_BETTER[metric] else ranked.c.value.desc()
    query = (
        sa.select(*(c for c in ranked.c if c.name != "rank"))
        .where(ranked.c.rank == 1)
        .order_by(
            # NULLs last on both dialects, without NULLS LAST
            ranked.c.model_name.is_(None),
            ranked.c.model_name,
            order,
            ranked.c.run_id,
        )
    )
    with store.engine.connect() as conn:
        found = conn.execute(query).mappings().all()
    return [LeaderboardEntry(**{**row, "started_at": as_utc(row["started_at"])}) for row in found]


def best_first(entries: list[LeaderboardEntry], metric: Metric) -> list[LeaderboardEntry]:
    """:func:`leaderboard`'s entries ranked across models: best ``metric`` first (lowest
    latency, highest throughput or metric); ties keep :func:`leaderboard`'s order."""
    return sorted(entries, key=lambda entry: entry.value, reverse=not LOWER_IS_BETTER[metric])


def metric_names(store: Store) -> list[str]:
    """The primary metrics' names of the Succeeded runs, sorted: one leaderboard each, since
    only runs of the same metric (the same task) rank against each other."""
    query = (
        sa.select(runs.c.metric)
        .where(runs.c.status == SUCCEEDED, runs.c.metric.is_not(None))
        .distinct()
        .order_by(runs.c.metric)
    )
    with store.engine.connect() as conn:
        return [str(name) for name in conn.execute(query).scalars()]


@dataclass(frozen=True)
class HistoryPoint:
    """One run of a model, with its numbers at one batch size (None where the run did not
    measure it, e.g. a Failed run)."""

    run_id: str
    evaluation: str | None
    started_at: datetime
    framework: str | None
    framework_version: str | None
    device: str | None
    gpu_product: str | None
    status: str
    batch_size: int | None
    p50_ms: float | None
    p99_ms: float | None
    throughput: float | None
    top1: float | None
    metric: str | None
    """The name of the run's primary metric (top1, miou, accuracy)."""
    metric_value: float | None
    valid: bool | None
    """The verdict at this batch size."""


def history(
    store: Store,
    model: str,
    *,
    batch_size: int | None = None,
    where: RunFilter = ANY_RUN,
    limit: int = 1000,
) -> list[HistoryPoint]:
    """The runs of ``model``, oldest first (the newest ``limit`` of them), each with its
    numbers at ``batch_size`` (None: the run's smallest batch size)."""
    if batch_size is None:
        sizes = run_results.alias("sizes")
        smallest = (
            sa.select(sa.func.min(sizes.c.batch_size))
            .where(sizes.c.run_id == runs.c.run_id)
            .correlate(runs)
            .scalar_subquery()
        )
        joined = sa.and_(
            run_results.c.run_id == runs.c.run_id, run_results.c.batch_size == smallest
        )
    else:
        joined = sa.and_(
            run_results.c.run_id == runs.c.run_id, run_results.c.batch_size == batch_size
        )
    newest = (
        where.apply(
            sa.select(
                runs.c.run_id,
                runs.c.evaluation,
                runs.c.started_at,
                runs.c.framework,
                runs.c.framework_version,
                runs.c.device,
                runs.c.gpu_product,
                runs.c.status,
                run_results.c.batch_size,
                run_results.c.p50_ms,
                run_results.c.p99_ms,
                run_results.c.throughput,
                runs.c.top1,
                runs.c.metric,
                runs.c.metric_value,
                run_results.c.valid,
            ).select_from(runs.outerjoin(run_results, joined))
        )
        .where(runs.c.model_name == model)
        .order_by(*NEWEST_FIRST)
        .limit(limit)
        .subquery()
    )
    query = sa.select(newest).order_by(newest.c.started_at, newest.c.run_id)
    with store.engine.connect() as conn:
        found = conn.execute(query).mappings().all()
    return [HistoryPoint(**{**row, "started_at": as_utc(row["started_at"])}) for row in found]


def model_known(store: Store, model: str) -> bool:
    """Whether any run of ``model`` is recorded: an empty :func:`history` of a known model
    means its filters matched nothing, of an unknown one that there is no such model."""
    return count_runs(store, RunFilter(model=model)) > 0


CSV_COLUMNS: Final = (
    "run_id",
    "started_at",
    "finished_at",
    "evaluation",
    "namespace",
    "model_name",
    "model_sha256",
    "framework",
    "framework_version",
    "device",
    "gpu_product",
    "scenario",
    "status",
    "error_type",
    "top1",
    "top5",
    "metric",
    "metric_value",
    "batch_size",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "mean_ms",
    "throughput",
    "qps",
    "valid",
)
"""The columns of :func:`flat_rows`; ``valid`` is the verdict of the batch size."""
BATCH_COLUMNS: Final = CSV_COLUMNS[CSV_COLUMNS.index("batch_size") :]


def flat_rows(summaries: list[RunSummary]) -> list[dict[str, Any]]:
    """One dict per run and batch size (a run without any: one, its batch columns None),
    keyed by :data:`CSV_COLUMNS`."""
    rows = []
    for run in summaries:
        common = {
            "run_id": run.run_id,
            "started_at": run.started_at.isoformat(),
            "finished_at": run.finished_at.isoformat(),
            "evaluation": run.evaluation,
            "namespace": run.namespace,
            "model_name": run.model_name,
            "model_sha256": run.model_sha256,
            "framework": run.framework,
            "framework_version": run.framework_version,
            "device": run.device,
            "gpu_product": run.gpu_product,
            "scenario": run.scenario,
            "status": run.status,
            "error_type": run.error_type,
            "top1": run.top1,
            "top5": run.top5,
            "metric": run.metric,
            "metric_value": run.metric_value,
        }
        for result in run.results or (None,):
            batch: dict[str, Any] = dict.fromkeys(BATCH_COLUMNS)
            if result is not None:
                batch = {
                    "batch_size": result.batch_size,
                    "p50_ms": result.latency_ms.p50,
                    "p90_ms": result.latency_ms.p90,
                    "p99_ms": result.latency_ms.p99,
                    "mean_ms": result.latency_ms.mean,
                    "throughput": result.throughput,
                    "qps": result.qps,
                    "valid": result.valid,
                }
            rows.append({**common, **batch})
    return rows


def ping(store: Store) -> None:
    """Run ``SELECT 1``: raises (a SQLAlchemy error) when the database cannot answer."""
    with store.engine.connect() as conn:
        conn.execute(sa.text("SELECT 1")).scalar_one()
