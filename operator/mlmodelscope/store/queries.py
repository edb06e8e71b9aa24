"""Read-side queries over the results store beyond :meth:`Store.list_runs`: paging and
counting, a leaderboard per dataset, model and hardware, a model's history, and one flat row
per run and batch size (CSV export). `mlms serve` answers its API and dashboard with them.

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
Metric = Literal[
    "p50_ms",
    "p99_ms",
    "throughput",
    "top1",
    "metric_value",
    "joules_per_inference",
    "cost_per_1000",
]
LOWER_IS_BETTER: Final[dict[str, bool]] = {
    "p50_ms": True,
    "p99_ms": True,
    "throughput": False,
    "top1": False,
    "metric_value": False,
    "joules_per_inference": True,
    "cost_per_1000": True,
}
"""Each leaderboard metric, and whether its best run has the lowest value. ``metric_value`` is
the task's primary metric (top1, miou, accuracy: higher is better for each); it ranks only
runs whose primary metric has the name the filter gives (:attr:`RunFilter.metric`), so an
mIoU is never ranked against an accuracy. ``joules_per_inference`` and ``cost_per_1000`` rank
only the runs that measured them."""
RESULT_METRICS: Final = frozenset(
    {"p50_ms", "p99_ms", "throughput", "joules_per_inference", "cost_per_1000"}
)
"""The metrics read from the batch size's row (the others are the run's)."""


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
    """The best Succeeded run of one model on one dataset, framework, device and GPU
    product."""

    dataset: str | None
    """The runs' dataset (``digits/test (360 samples)``): entries of different datasets are
    never ranked against each other."""
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
    joules_per_inference: float | None
    """Energy per inference (J) of the best run at this batch size; None: not measured."""
    energy_method: str | None
    """The counter it was read from: nvml (the GPU board) or rapl (the CPU packages)."""
    cost_per_1000: float | None
    """USD per 1,000 inferences of the best run at this batch size; None: no price given."""
    runs: int
    """Succeeded runs in the group that measured this batch size (and the metric)."""


def leaderboard(
    store: Store,
    *,
    metric: Metric = "p50_ms",
    batch_size: int = 1,
    where: RunFilter = ANY_RUN,
) -> list[LeaderboardEntry]:
    """Per (dataset, model, framework, device, GPU product), the Succeeded run with the best
    ``metric`` at ``batch_size`` (lowest latency, energy or cost, highest throughput, top-1 or
    primary metric; ties: the newer run). Runs that did not measure ``batch_size``, or lack the
    metric, take no part. Sorted by dataset, then model, then best value first: a dataset's
    entries are contiguous, and no run is ranked against another dataset's.
    ``metric_value`` needs ``where.metric``, the primary metric's name."""
    query = leaderboard_query(metric=metric, batch_size=batch_size, where=where)
    with store.engine.connect() as conn:
        found = conn.execute(query).mappings().all()
    return [LeaderboardEntry(**{**row, "started_at": as_utc(row["started_at"])}) for row in found]


def leaderboard_query(
    *, metric: Metric = "p50_ms", batch_size: int = 1, where: RunFilter = ANY_RUN
) -> sa.Select[Any]:
    """The SELECT :func:`leaderboard` runs (a window over the matching Succeeded runs: their
    rank and count per group)."""
    if metric not in LOWER_IS_BETTER:
        raise ValueError(f"metric {metric!r}: one of {', '.join(LOWER_IS_BETTER)}")
    if metric == "metric_value" and where.metric is None:
        raise ValueError(
            "metric 'metric_value' ranks one primary metric: name it (top1, miou, accuracy)"
        )
    value = run_results.c[metric] if metric in RESULT_METRICS else runs.c[metric]
    best = value.asc() if LOWER_IS_BETTER[metric] else value.desc()
    group = (
        runs.c.dataset,
        runs.c.model_name,
        runs.c.framework,
        runs.c.device,
        runs.c.gpu_product,
    )
    ranked = (
        where.apply(
            sa.select(
                runs.c.dataset,
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
                run_results.c.joules_per_inference,
                run_results.c.energy_method,
                run_results.c.cost_per_1000,
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
    return (
        sa.select(*(c for c in ranked.c if c.name != "rank"))
        .where(ranked.c.rank == 1)
        .order_by(
            # NULLs last on both dialects, without NULLS LAST
            ranked.c.dataset.is_(None),
            ranked.c.dataset,
            ranked.c.model_name.is_(None),
            ranked.c.model_name,
            order,
            ranked.c.run_id,
        )
    )


def best_first(entries: list[LeaderboardEntry], metric: Metric) -> list[LeaderboardEntry]:
    """:func:`leaderboard`'s entries of one dataset ranked across models: best ``metric``
    first (lowest latency, energy or cost, highest throughput or metric); ties keep
    :func:`leaderboard`'s order."""
    if len({entry.dataset for entry in entries}) > 1:
        raise ValueError("best_first ranks one dataset's entries: split them by dataset first")
    return sorted(entries, key=lambda entry: entry.value, reverse=not LOWER_IS_BETTER[metric])


def by_dataset(entries: list[LeaderboardEntry]) -> dict[str | None, list[LeaderboardEntry]]:
    """:func:`leaderboard`'s entries split by dataset, in its order."""
    found: dict[str | None, list[LeaderboardEntry]] = {}
    for entry in entries:
        found.setdefault(entry.dataset, []).append(entry)
    return found


def metric_names(store: Store, *, dataset: str | None = None) -> list[str]:
    """The primary metrics' names of the Succeeded runs (of ``dataset``, when given), sorted:
    one leaderboard each, since only runs of the same metric (the same task) rank against
    each other."""
    query = sa.select(runs.c.metric).where(runs.c.status == SUCCEEDED, runs.c.metric.is_not(None))
    if dataset is not None:
        query = query.where(runs.c.dataset == dataset)
    query = query.distinct().order_by(runs.c.metric)
    with store.engine.connect() as conn:
        return [str(name) for name in conn.execute(query).scalars()]


def dataset_names(store: Store) -> list[str]:
    """The datasets of the Succeeded runs, sorted: the leaderboard's dataset menu."""
    query = (
        sa.select(runs.c.dataset)
        .where(runs.c.status == SUCCEEDED, runs.c.dataset.is_not(None))
        .distinct()
        .order_by(runs.c.dataset)
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
    dataset: str | None
    """Which data the numbers came from (None: the run never loaded its dataset)."""
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
    joules_per_inference: float | None
    """Energy per inference (J) at this batch size; None: not measured."""
    cost_per_1000: float | None
    """USD per 1,000 inferences at this batch size; None: no price given."""


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
                runs.c.dataset,
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
                run_results.c.joules_per_inference,
                run_results.c.cost_per_1000,
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
    "dataset",
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
    "joules_per_inference",
    "energy_method",
    "cost_per_1000",
)
"""The columns of :func:`flat_rows`; ``valid`` is the verdict of the batch size, and the last
three its energy per inference (J), the counter read, and cost per 1,000 inferences (USD)."""
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
            "dataset": run.dataset,
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
                    "joules_per_inference": result.joules_per_inference,
                    "energy_method": result.energy_method,
                    "cost_per_1000": result.cost_per_1000,
                }
            rows.append({**common, **batch})
    return rows


def ping(store: Store) -> None:
    """Run ``SELECT 1``: raises (a SQLAlchemy error) when the database cannot answer."""
    with store.engine.connect() as conn:
        conn.execute(sa.text("SELECT 1")).scalar_one()
