"""The results store: every run's result document, kept after the ModelEvaluation is gone.

SQLite under the user's data directory by default, PostgreSQL by URL. Opening a store applies
the package's Alembic migrations up to head, so a new version of mlmodelscope upgrades an old
database in place. ``record`` is idempotent by run UUID (insert ... on conflict do nothing):
a retried write never duplicates a run.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql, sqlite

from mlmodelscope.contract.metric import primary_metric
from mlmodelscope.contract.redact import redact_tree
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.spec.status import BatchResult, LatencySummary
from mlmodelscope.spec.sweep import LABEL_SWEEP
from mlmodelscope.store.bricks import BrickRecord, StoredBrick, brick_rows, select_bricks
from mlmodelscope.store.schema import brick_timings, run_results, runs

MIGRATIONS: Final = Path(__file__).parent / "migrations"
DB_FILE: Final = "runs.db"
DEFAULT_LIMIT: Final = 100
DATASET_NAME_KEPT: Final = 200
"""A dataset name longer than this is stored as its first 200 characters, ``...sha256:`` and
the first 12 hex digits of the whole name's sha256 (the column holds 253)."""


class StoreError(RuntimeError):
    """The store could not be opened or written."""


class NotRecordableError(ValueError):
    """The document cannot be stored (not a result document, or no run_id)."""


def data_dir() -> Path:
    """$MLMS_DATA_DIR, else $XDG_DATA_HOME/mlmodelscope, else ~/.local/share/mlmodelscope."""
    if explicit := os.environ.get("MLMS_DATA_DIR"):
        return Path(explicit)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "mlmodelscope"


def default_url() -> str:
    """$MLMS_STORE_URL, else the SQLite file ``runs.db`` in :func:`data_dir`."""
    return os.environ.get("MLMS_STORE_URL") or f"sqlite:///{data_dir() / DB_FILE}"


def normalize_url(url: str) -> sa.URL:
    """A SQLAlchemy URL; a bare path means a SQLite file, and ``postgresql://`` (or
    ``postgres://``) means psycopg 3, the driver the ``store`` extra installs."""
    if "://" not in url:
        return sa.make_url(f"sqlite:///{Path(url).expanduser().absolute()}")
    parsed = sa.make_url(url.replace("postgres://", "postgresql://", 1))
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


@dataclass(frozen=True)
class RunSummary:
    """One stored run, as ``list_runs`` returns it (the document itself: :meth:`Store.get`)."""

    run_id: str
    evaluation: str | None
    namespace: str | None
    status: str
    model_name: str | None
    model_sha256: str | None
    framework: str | None
    framework_version: str | None
    device: str | None
    gpu_product: str | None
    scenario: str | None
    dataset: str | None
    """Which data the numbers came from, ``digits/test (360 samples)``
    (:func:`dataset_identity`); None for a run that never loaded its dataset."""
    valid: bool | None
    top1: float | None
    top5: float | None
    metric: str | None
    """The name of the task's primary metric: top1 (classification), miou, accuracy."""
    metric_value: float | None
    """Its value (for top1, the same as ``top1``)."""
    error_type: str | None
    trace_id: str | None
    """The run's OpenTelemetry trace id (look it up in Jaeger; `mlms trace` breaks it down)."""
    labels: dict[str, Any] | None
    """Tags such as a sweep name: the document's ``evaluation.labels``."""
    started_at: datetime
    finished_at: datetime
    recorded_at: datetime
    results: tuple[BatchResult, ...]
    """One row per batch size, ascending."""


@dataclass(frozen=True)
class RunFilter:
    """Exact values the runs must have (None: any), as ``mlms runs`` and the API filter."""

    model: str | None = None
    framework: str | None = None
    device: str | None = None
    gpu: str | None = None
    evaluation: str | None = None
    namespace: str | None = None
    status: str | None = None
    scenario: str | None = None
    dataset: str | None = None
    """The run's :func:`dataset_identity`, e.g. ``digits/test (360 samples)``."""
    sweep: str | None = None
    """The EvaluationSweep a run was a child of: its ``mlmodelscope.io/sweep`` label."""
    metric: str | None = None
    """The name of the run's primary metric (top1, miou, accuracy)."""

    def apply(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` (over ``runs``) restricted to the runs that match."""
        if self.sweep is not None:
            query = query.where(runs.c.labels[LABEL_SWEEP].as_string() == self.sweep)
        columns = {
            "model": runs.c.model_name,
            "framework": runs.c.framework,
            "device": runs.c.device,
            "gpu": runs.c.gpu_product,
            "evaluation": runs.c.evaluation,
            "namespace": runs.c.namespace,
            "status": runs.c.status,
            "scenario": runs.c.scenario,
            "dataset": runs.c.dataset,
            "metric": runs.c.metric,
        }
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None and item.name in columns:
                query = query.where(columns[item.name] == value)
        return query


NEWEST_FIRST: Final = (runs.c.started_at.desc(), runs.c.run_id)
SUMMARY_COLUMNS: Final = tuple(c for c in runs.c if c.name != "document")


class Store:
    """A results store; open one with :func:`open_store`. Use as a context manager or call
    :meth:`close`."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, document: Mapping[str, Any]) -> bool:
        """Store a result document; True when it was new, False when its run was already
        recorded (nothing changes then). Raises :class:`NotRecordableError` for a document that is
        not a valid result document or has no run_id, :class:`StoreError` when the database
        fails. Every string is redacted first (:mod:`mlmodelscope.contract.redact`): what is
        stored is readable by everyone with access to the store."""
        document = redact_tree(dict(document))
        try:
            parsed = ResultDocument.model_validate(document)
        except ValidationError as exc:
            raise NotRecordableError(f"not a valid result document: {exc}") from exc
        if parsed.run_id is None:
            raise NotRecordableError(
                "the document has no run_id (the agent could not read its spec): "
                "only its result file records it"
            )
        try:
            run_id = str(uuid.UUID(parsed.run_id))
        except ValueError as exc:
            raise NotRecordableError(f"run_id {parsed.run_id!r} is not a UUID") from exc
        row = _run_row(parsed, run_id, dict(document))
        insert = (
            self._insert(runs)
            .values(row)
            .on_conflict_do_nothing(index_elements=["run_id"])
            .returning(runs.c.run_id)
        )
        try:
            with self.engine.begin() as conn:
                inserted = conn.execute(insert).first() is not None
                rows = [_result_row(run_id, r) for r in parsed.results or []]
                if inserted and rows:
                    conn.execute(run_results.insert(), rows)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"recording run {run_id} in {self.url} failed: {exc}") from exc
        return inserted

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The result document of ``run_id`` as recorded, or None."""
        try:
            key = str(uuid.UUID(run_id))
        except ValueError:
            return None
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.select(runs.c.document).where(runs.c.run_id == key)
            ).scalar_one_or_none()
        return None if found is None else dict(found)

    def list_runs(
        self,
        *,
        model: str | None = None,
        framework: str | None = None,
        device: str | None = None,
        gpu: str | None = None,
        evaluation: str | None = None,
        namespace: str | None = None,
        status: str | None = None,
        sweep: str | None = None,
        metric: str | None = None,
        dataset: str | None = None,
        limit: int = DEFAULT_LIMIT,
    ) -> list[RunSummary]:
        """Recorded runs, newest first, filtered by exact values (None: any); ``sweep``: the
        runs labelled ``mlmodelscope.io/sweep=<sweep>``; ``metric``: the runs whose primary
        metric has that name (top1, miou, accuracy); ``dataset``: the runs of that
        :func:`dataset_identity`."""
        where = RunFilter(
            model=model,
            framework=framework,
            device=device,
            gpu=gpu,
            evaluation=evaluation,
            namespace=namespace,
            status=status,
            sweep=sweep,
            metric=metric,
            dataset=dataset,
        )
        query = where.apply(sa.select(*SUMMARY_COLUMNS)).order_by(*NEWEST_FIRST).limit(limit)
        with self.engine.connect() as conn:
            return summaries_of(conn, conn.execute(query).mappings().all())

    def brick_timings(self, stack_key: str, brick_keys: Collection[str]) -> dict[str, StoredBrick]:
        """The DLBricks timings stored for ``brick_keys`` on the stack ``stack_key``, by brick
        key; bricks never measured on that stack are absent."""
        with self.engine.connect() as conn:
            return select_bricks(conn, stack_key, brick_keys)

    def record_brick_timings(
        self, stack_key: str, stack: Mapping[str, Any], bricks: Iterable[BrickRecord]
    ) -> None:
        """Store bricks measured on ``stack`` (whose hash is ``stack_key``); a brick already
        stored for that stack keeps its first timing. Raises :class:`StoreError`."""
        rows = brick_rows(stack_key, stack, bricks)
        if not rows:
            return
        insert = self._insert(brick_timings).on_conflict_do_nothing(
            index_elements=["stack_key", "brick_key"]
        )
        try:
            with self.engine.begin() as conn:
                conn.execute(insert, rows)
        except sa.exc.SQLAlchemyError as exc:
            raise StoreError(f"recording brick timings in {self.url} failed: {exc}") from exc

    def _insert(self, table: sa.Table) -> Any:
        """The dialect's INSERT, which has ``on_conflict_do_nothing``."""
        name = self.engine.dialect.name
        if name == "postgresql":
            return postgresql.insert(table)
        if name == "sqlite":
            return sqlite.insert(table)
        raise StoreError(f"unsupported database {name!r}: use SQLite or PostgreSQL")


def open_store(url: str | None = None) -> Store:
    """Open (and migrate to the newest revision) the store at ``url``: a SQLAlchemy URL
    (``sqlite:///path``, ``postgresql+psycopg://user:pw@host/db``), a bare SQLite file path, or
    None for :func:`default_url`."""
    parsed = normalize_url(url or default_url())
    try:
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(parsed)
        if engine.dialect.name == "sqlite":
            sa.event.listen(engine, "connect", _sqlite_pragmas)
        migrate(engine)
    except (sa.exc.SQLAlchemyError, OSError) as exc:
        shown = parsed.render_as_string(hide_password=True)
        raise StoreError(f"cannot open the results store {shown}: {exc}") from exc
    return Store(engine)


def migrate(engine: sa.Engine, revision: str = "head") -> None:
    """Apply the package's migrations up to ``revision``."""
    from alembic import command

    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)


def alembic_config() -> Any:
    """An Alembic Config for the package's migrations folder (no alembic.ini)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")  # parallel `mlms run`s wait, not fail
    cursor.close()


def _timestamp(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def dataset_identity(doc: ResultDocument) -> str | None:
    """The ``dataset`` column: the document's :meth:`DatasetInfo.identity
    <mlmodelscope.contract.result.DatasetInfo.identity>` (``digits/test (360 samples)``), its
    name shortened past :data:`DATASET_NAME_KEPT` characters; None without a dataset section
    (a run that failed before loading its data)."""
    if doc.dataset is None:
        return None
    name = doc.dataset.name
    if len(name) > DATASET_NAME_KEPT:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[:DATASET_NAME_KEPT]}...sha256:{digest}"
    return doc.dataset.model_copy(update={"name": name}).identity()


def _run_row(doc: ResultDocument, run_id: str, document: dict[str, Any]) -> dict[str, Any]:
    scenario = (doc.spec.get("scenario") or {}).get("type")
    if doc.measurements:
        scenario = doc.measurements[0].scenario
    gpu = None
    if doc.stack is not None and doc.stack.gpu and doc.stack.gpu.get("devices"):
        gpu = str(doc.stack.gpu["devices"][0].get("name"))
    valid = None
    if doc.results:
        verdicts = [r.valid for r in doc.results if r.valid is not None]
        valid = all(verdicts) if verdicts else None
    framework = (doc.spec.get("framework") or {}).get("name")
    labels = getattr(doc.evaluation, "labels", None)  # an extra key of the contract's model
    primary = primary_metric(doc)
    named = primary.value is not None or doc.task is not None
    return {
        "run_id": run_id,
        "evaluation": doc.evaluation.name,
        "namespace": doc.evaluation.namespace,
        "generation": doc.evaluation.generation,
        "spec_sha256": doc.spec_sha256,
        "model_name": doc.model.name if doc.model else (doc.spec.get("model") or {}).get("name"),
        "model_sha256": doc.model.sha256 if doc.model else None,
        "framework": doc.backend.framework if doc.backend else framework,
        "framework_version": doc.backend.framework_version if doc.backend else None,
        "device": doc.backend.device if doc.backend else None,
        "gpu_product": gpu,
        "scenario": scenario,
        "dataset": dataset_identity(doc),
        "status": doc.status,
        "valid": valid,
        "top1": doc.accuracy.top1 if doc.accuracy else None,
        "top5": doc.accuracy.top5 if doc.accuracy else None,
        "metric": primary.name if named else None,
        "metric_value": primary.value,
        "error_type": doc.error.type if doc.error else None,
        "started_at": _timestamp(doc.started_at),
        "finished_at": _timestamp(doc.finished_at),
        "recorded_at": datetime.now(UTC),
        "document": document,
        "trace_id": doc.trace_id,
        "labels": labels if isinstance(labels, dict) else None,
    }


def _result_row(run_id: str, row: BatchResult) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "batch_size": row.batch_size,
        "scenario": row.scenario,
        "p50_ms": row.latency_ms.p50,
        "p90_ms": row.latency_ms.p90,
        "p99_ms": row.latency_ms.p99,
        "mean_ms": row.latency_ms.mean,
        "throughput": row.throughput,
        "qps": row.qps,
        "valid": row.valid,
        "joules_per_inference": row.joules_per_inference,
        "energy_method": row.energy_method,
        "cost_per_1000": row.cost_per_1000,
    }


def summaries_of(conn: sa.Connection, found: Sequence[sa.RowMapping]) -> list[RunSummary]:
    """``found`` (``runs`` rows without the document) as RunSummaries, each with its batch-size
    rows ascending (one more query for all of them)."""
    by_id = {r["run_id"]: r for r in found}
    by_run: dict[str, list[BatchResult]] = {run_id: [] for run_id in by_id}
    if by_id:
        rows = conn.execute(
            sa.select(run_results)
            .where(run_results.c.run_id.in_(list(by_id)))
            .order_by(run_results.c.run_id, run_results.c.batch_size)
        ).mappings()
        for row in rows:
            by_run[row["run_id"]].append(batch_result(row, by_id[row["run_id"]]))
    return [run_summary(r, tuple(by_run[r["run_id"]])) for r in found]


def batch_result(row: sa.RowMapping, run: sa.RowMapping) -> BatchResult:
    return BatchResult(
        batch_size=row["batch_size"],
        scenario=row["scenario"],
        latency_ms=LatencySummary(
            p50=row["p50_ms"], p90=row["p90_ms"], p99=row["p99_ms"], mean=row["mean_ms"]
        ),
        throughput=row["throughput"],
        qps=row["qps"],
        top1=run["top1"],
        top5=run["top5"],
        metric=run["metric"],
        metric_value=run["metric_value"],
        valid=row["valid"],
        joules_per_inference=row["joules_per_inference"],
        energy_method=row["energy_method"],
        cost_per_1000=row["cost_per_1000"],
    )


def as_utc(value: datetime) -> datetime:
    """SQLite returns naive datetimes; every stored time is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def run_summary(row: sa.RowMapping, results: tuple[BatchResult, ...]) -> RunSummary:
    fields = {k: row[k] for k in RunSummary.__dataclass_fields__ if k != "results"}
    for key in ("started_at", "finished_at", "recorded_at"):
        fields[key] = as_utc(fields[key])
    return RunSummary(**fields, results=results)
