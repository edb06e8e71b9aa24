"""The JSON API (``/api/v1``): runs, comparisons, leaderboards, history, CSV export; and the
probes ``/healthz`` and ``/readyz``.

Every route under ``/api/v1`` needs the read token when the server has one
(:func:`~mlmodelscope.server.auth.require_read`); recording a run needs the write token. Routes
are plain ``def``: FastAPI runs them in its thread pool, since the store is synchronous
SQLAlchemy. Errors are ``{"detail": "..."}`` (401, 403, 404, 503) or FastAPI's validation
shape, ``{"detail": [{"loc": [...], "msg": "...", "type": "..."}]}`` (422), so every answer
matches the OpenAPI document.
"""

from __future__ import annotations

import csv
import io
import math
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Final

import sqlalchemy as sa
from fastapi import APIRouter, Body, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.compare import (
    SIGNIFICANCE_RUNS,
    CompareError,
    Comparison,
    compare,
    parse_result,
)
from mlmodelscope.server.auth import require_read, require_write
from mlmodelscope.server.state import store_of
from mlmodelscope.store import NotRecordableError, RunSummary, StoreError, queries
from mlmodelscope.store.queries import HistoryPoint, LeaderboardEntry, Metric
from mlmodelscope.store.store import RunFilter

DOCUMENT_SCHEMA: Final = "EvaluationResult"
"""The result document's schema in the OpenAPI components (contract/result.schema.json)."""
MAX_COMPARED: Final = 50
MAX_PAGE: Final = 1000
MAX_CSV_ROWS: Final = 10000
MAX_OFFSET: Final = 1_000_000_000
MAX_BATCH: Final = 1_000_000


class Problem(BaseModel):
    """Why the request failed."""

    detail: str


PROBLEMS: Final[dict[int | str, dict[str, Any]]] = {
    401: {"model": Problem, "description": "No bearer token, or an unknown one."},
    403: {"model": Problem, "description": "The token may not do this."},
}
NOT_FOUND: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": Problem, "description": "No such run."}
}

router = APIRouter(
    prefix="/api/v1", tags=["runs"], dependencies=[Depends(require_read)], responses=PROBLEMS
)
probes = APIRouter(tags=["probes"])


# ------------------------------------------------------------------------------ models


class Latency(BaseModel):
    """Latency quantiles of one batch size, in milliseconds."""

    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None


class BatchRow(BaseModel):
    """The headline numbers of one batch size (a row of the document's ``results``)."""

    batch_size: int
    scenario: str
    latency_ms: Latency
    throughput: float | None
    """Samples per second."""
    qps: float | None
    top1: float | None
    top5: float | None
    metric: str | None = None
    """The name of the run's primary metric: top1 (classification), miou, accuracy."""
    metric_value: float | None = None
    """Its value (the task's, not per batch size: the accuracy pass runs once)."""
    valid: bool | None
    """MLPerf-style verdict of this batch size."""
    joules_per_inference: float | None = None
    """Energy per inference (J per sample) from the hardware's counter; null: not measured."""
    energy_method: str | None = None
    """The counter it was read from: nvml (the GPU board) or rapl (the CPU packages)."""
    cost_per_1000: float | None = None
    """USD per 1,000 inferences from the price per node-hour the run was given; null: none."""


class RunItem(BaseModel):
    """One recorded run, without its document (``GET /api/v1/runs/{run_id}``)."""

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
    dataset: str | None = None
    """Which data the numbers came from: the dataset's name and sample count, e.g.
    ``digits/test (360 samples)``; null for a run that never loaded its dataset."""
    valid: bool | None
    """VALID when every batch size was."""
    top1: float | None
    top5: float | None
    metric: str | None = None
    """The name of the run's primary metric: top1 (classification), miou, accuracy."""
    metric_value: float | None = None
    """Its value."""
    error_type: str | None
    trace_id: str | None = None
    """The run's OpenTelemetry trace id, where the store keeps it."""
    labels: dict[str, Any] | None = None
    """Tags such as a sweep name (``evaluation.labels``), where the store keeps them."""
    started_at: datetime
    finished_at: datetime
    recorded_at: datetime
    results: list[BatchRow]
    """One row per batch size, ascending."""

    @classmethod
    def of(cls, run: RunSummary) -> RunItem:
        # the contract's BatchResult, by field name (its aliases are the CRD's camelCase)
        rows = [BatchRow.model_validate(r.model_dump()) for r in run.results]
        fields = {k: getattr(run, k) for k in cls.model_fields if k != "results"}
        return cls(**fields, results=rows)


class RunPage(BaseModel):
    """Runs newest first: ``items`` are ``limit`` of the ``total`` matches from ``offset``."""

    total: int
    limit: int
    offset: int
    items: list[RunItem]


class Recorded(BaseModel):
    run_id: str
    created: bool
    """False when the run was already recorded (nothing changed)."""
    location: str
    """Where to read the document back."""


class Leaderboard(BaseModel):
    metric: str
    batch_size: int
    dataset: str | None = None
    """The ``dataset`` filter; null: every dataset, each ranked on its own."""
    entries: list[LeaderboardEntry]
    """Sorted by dataset, then model, then best first."""


class History(BaseModel):
    model: str
    batch_size: int | None
    """The batch size of the numbers; null: each run's smallest."""
    points: list[HistoryPoint]
    """Oldest first."""


class Health(BaseModel):
    status: str


# ------------------------------------------------------------------------------ parameters

NoNul = r"^[^\x00]*$"
"""PostgreSQL text cannot hold NUL: such a filter is refused (422), not sent."""


def _text(description: str) -> Any:
    return Query(description=description, max_length=253, pattern=NoNul)


def run_filter(
    model: Annotated[str | None, _text("Model name.")] = None,
    framework: Annotated[str | None, _text("Framework: pytorch, tensorflow, onnxruntime.")] = None,
    device: Annotated[str | None, _text("Device: cpu, cuda.")] = None,
    gpu: Annotated[str | None, _text("GPU product, e.g. NVIDIA H100 80GB HBM3.")] = None,
    evaluation: Annotated[str | None, _text("ModelEvaluation name.")] = None,
    namespace: Annotated[str | None, _text("Namespace of the ModelEvaluation.")] = None,
    status: Annotated[str | None, _text("Succeeded or Failed.")] = None,
    scenario: Annotated[str | None, _text("SingleStream, MultiStream, Server, Offline.")] = None,
    sweep: Annotated[
        str | None, _text("EvaluationSweep whose children ran it (label mlmodelscope.io/sweep).")
    ] = None,
    metric_name: Annotated[
        str | None, _text("The name of the runs' primary metric: top1, miou, accuracy.")
    ] = None,
    dataset: Annotated[
        str | None,
        _text("The runs' dataset: its name and sample count, e.g. digits/test (360 samples)."),
    ] = None,
) -> RunFilter:
    """The filters of ``GET /api/v1/runs`` (exact values; absent: any)."""
    return RunFilter(
        model=model,
        framework=framework,
        device=device,
        gpu=gpu,
        evaluation=evaluation,
        namespace=namespace,
        status=status,
        scenario=scenario,
        sweep=sweep,
        metric=metric_name,
        dataset=dataset,
    )


Filter = Annotated[RunFilter, Depends(run_filter)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Runs to skip.")]


def _run_key(run_id: str) -> str:
    """The canonical UUID; 404 for anything else (no run can have that id)."""
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        raise HTTPException(404, detail=f"no run {run_id!r}: run ids are UUIDs") from None


def _validation_error(messages: list[tuple[list[str | int], str]]) -> HTTPException:
    """422 in FastAPI's own shape, so it matches the OpenAPI document."""
    detail = [{"loc": loc, "msg": msg, "type": "value_error"} for loc, msg in messages]
    return HTTPException(422, detail=detail)


# ------------------------------------------------------------------------------ routes


@router.get("/runs", summary="List recorded runs, newest first")
def list_runs(
    request: Request,
    where: Filter,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Runs per page.")] = 100,
    offset: Offset = 0,
) -> RunPage:
    store = store_of(request)
    found = queries.page_runs(store, where, limit=limit, offset=offset)
    return RunPage(
        total=queries.count_runs(store, where),
        limit=limit,
        offset=offset,
        items=[RunItem.of(run) for run in found],
    )


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a CSV cell as a formula (OWASP's CSV injection list)."""


def _spreadsheet_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, quoted with a leading ``'``; numbers
    and every other text unchanged. Evaluation and model names come from users."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


@router.get(
    "/runs.csv",
    summary="Export recorded runs as CSV",
    response_class=Response,
    responses={
        200: {
            "description": "One row per run and batch size, newest run first.",
            "content": {"text/csv": {"schema": {"type": "string"}}},
        }
    },
)
def export_csv(
    request: Request,
    where: Filter,
    limit: Annotated[int, Query(ge=1, le=MAX_CSV_ROWS, description="At most this many runs.")] = (
        MAX_PAGE
    ),
    offset: Offset = 0,
) -> Response:
    found = queries.page_runs(store_of(request), where, limit=limit, offset=offset)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=queries.CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(
        {k: _spreadsheet_safe(v) for k, v in row.items()} for row in queries.flat_rows(found)
    )
    return Response(
        text.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="runs.csv"'},
    )


@router.get(
    "/runs/{run_id}",
    summary="One run's full result document",
    response_class=JSONResponse,
    response_model=None,
    responses={
        **NOT_FOUND,
        200: {
            "description": "The result document as recorded.",
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{DOCUMENT_SCHEMA}"}}
            },
        },
    },
)
def get_run(
    request: Request, run_id: Annotated[str, Path(description="Run UUID.")]
) -> JSONResponse:
    document = store_of(request).get(_run_key(run_id))
    if document is None:
        raise HTTPException(404, detail=f"no run {run_id} in the results store")
    return JSONResponse(document)


@router.post(
    "/runs",
    summary="Record a result document (write token)",
    status_code=201,
    dependencies=[Depends(require_write)],
    responses={
        200: {"model": Recorded, "description": "Already recorded: nothing changed."},
        400: {"model": Problem, "description": "The body is not JSON."},
        201: {"model": Recorded, "description": "Recorded."},
        503: {"model": Problem, "description": "The results store failed."},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{DOCUMENT_SCHEMA}"}}
            },
        }
    },
)
def record_run(
    request: Request,
    response: Response,
    document: Annotated[dict[str, Any], Body(description="A result document.")],
) -> Recorded:
    try:
        parsed = ResultDocument.model_validate(document)
    except ValidationError as exc:
        raise _validation_error(
            [(["body", *error["loc"]], error["msg"]) for error in exc.errors()[:20]]
        ) from None
    if bad := next(_non_finite(document, ["body"]), None):
        raise _validation_error([(bad, "not a finite number (NaN and infinity are not JSON)")])
    if parsed.run_id is None:
        raise _validation_error([(["body", "run_id"], "a document without run_id is not stored")])
    try:
        created = store_of(request).record(document)
    except (NotRecordableError, ValueError, OverflowError) as exc:
        raise _validation_error([(["body"], f"not recordable: {exc}")]) from None
    except StoreError as exc:
        if isinstance(exc.__cause__, sa.exc.DataError | sa.exc.IntegrityError):
            # the database refused a value (too long, NUL, out of range): the document's fault
            raise _validation_error([(["body"], f"not recordable: {exc.__cause__.orig}")]) from None
        raise HTTPException(503, detail=str(exc)) from None
    run_id = str(uuid.UUID(parsed.run_id))
    response.status_code = 201 if created else 200
    return Recorded(run_id=run_id, created=created, location=f"{router.prefix}/runs/{run_id}")


def _non_finite(value: Any, path: list[str | int]) -> Iterator[list[str | int]]:
    """The paths of NaN and infinite numbers in ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, [*path, key])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite(item, [*path, index])


@router.get(
    "/compare",
    summary="Compare runs side by side (the first is the reference)",
    description=(
        "`mlms compare --json` of the runs: headline numbers with their differences from the "
        "reference, the significance verdicts (`verdicts`: per run, metric, scenario and "
        "batch size the outcome, the ratio's interval or McNemar's p-value, and the method; "
        f"null for more than {SIGNIFICANCE_RUNS} runs), numerical agreement, stack and spec "
        "differences."
    ),
    responses=NOT_FOUND,
)
def compare_runs(
    request: Request,
    run: Annotated[
        list[str],
        Query(
            description="Run UUIDs, at least two; the first is the reference.",
            max_length=MAX_COMPARED,
        ),
    ],
) -> Comparison:
    if len(run) < 2:
        raise _validation_error([(["query", "run"], "compare needs at least two runs")])
    store = store_of(request)
    loaded = []
    for run_id in run:
        document = store.get(_run_key(run_id))
        if document is None:
            raise HTTPException(404, detail=f"no run {run_id} in the results store")
        try:
            loaded.append(parse_result(document, f"store:{run_id}"))
        except CompareError as exc:
            raise _validation_error([(["query", "run"], str(exc))]) from None
    return compare(loaded, significance=len(loaded) <= SIGNIFICANCE_RUNS)


@router.get("/leaderboard", summary="The best run per dataset, model and hardware")
def leaderboard(
    request: Request,
    where: Filter,
    metric: Annotated[
        Metric,
        Query(
            description="Rank by: p50_ms, p99_ms, joules_per_inference, cost_per_1000 (lowest "
            "wins; runs that did not measure it take no part), throughput, top1, metric_value "
            "(highest; the primary metric metric_name names, e.g. metric_name=miou)."
        ),
    ] = "p50_ms",
    batch_size: Annotated[
        int, Query(ge=1, le=MAX_BATCH, description="The batch size the metric is read at.")
    ] = 1,
) -> Leaderboard:
    """Per (dataset, model, framework, device, GPU product), the Succeeded run with the best
    ``metric`` at ``batch_size``: runs of different datasets never rank against each other.
    The ``status`` filter is ignored: only Succeeded runs rank."""
    if metric == "metric_value" and where.metric is None:
        raise _validation_error(
            [(["query", "metric"], "metric_value ranks one primary metric: add metric_name=<name>")]
        )
    entries = queries.leaderboard(
        store_of(request), metric=metric, batch_size=batch_size, where=where
    )
    return Leaderboard(metric=metric, batch_size=batch_size, dataset=where.dataset, entries=entries)


@router.get(
    "/models/{model}/history",
    summary="A model's runs over time, oldest first",
    responses={404: {"model": Problem, "description": "No recorded run of this model."}},
)
def model_history(
    request: Request,
    model: Annotated[str, Path(min_length=1, max_length=253, pattern=NoNul)],
    framework: Annotated[str | None, _text("Framework.")] = None,
    device: Annotated[str | None, _text("Device.")] = None,
    gpu: Annotated[str | None, _text("GPU product.")] = None,
    status: Annotated[str | None, _text("Succeeded or Failed.")] = None,
    dataset: Annotated[
        str | None, _text("Dataset: its name and sample count, e.g. digits/test (360 samples).")
    ] = None,
    batch_size: Annotated[
        int | None,
        Query(ge=1, le=MAX_BATCH, description="Numbers at this batch size (default: smallest)."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="The newest runs.")] = MAX_PAGE,
) -> History:
    store = store_of(request)
    where = RunFilter(framework=framework, device=device, gpu=gpu, status=status, dataset=dataset)
    points = queries.history(store, model, batch_size=batch_size, where=where, limit=limit)
    if not points and not queries.model_known(store, model):
        raise HTTPException(404, detail=f"no recorded run of model {model!r}")
    return History(model=model, batch_size=batch_size, points=points)


@probes.get("/healthz", summary="Liveness: the process answers")
def healthz() -> Health:
    return Health(status="ok")


@probes.get(
    "/readyz",
    summary="Readiness: the results store answers SELECT 1",
    responses={503: {"model": Problem, "description": "The results store does not answer."}},
)
def readyz(request: Request) -> Health:
    store = store_of(request)
    try:
        queries.ping(store)
    except sa.exc.SQLAlchemyError as exc:
        raise HTTPException(
            503, detail=f"the results store {store.url} does not answer: {exc}"
        ) from None
    return Health(status="ok")


# ------------------------------------------------------------------------------ OpenAPI


def install_openapi(app: FastAPI) -> None:
    """Generate ``app``'s OpenAPI document with the result document's schema as the
    component :data:`DOCUMENT_SCHEMA` (its ``$defs`` beside it)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            document = ResultDocument.model_json_schema(
                by_alias=False, mode="validation", ref_template="#/components/schemas/{model}"
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, definition in document.pop("$defs", {}).items():
                if name in components and components[name] != definition:
                    raise RuntimeError(f"OpenAPI component {name!r} defined twice")
                components[name] = definition
            components[DOCUMENT_SCHEMA] = document
            _bare_refs(schema["paths"], f"#/components/schemas/{DOCUMENT_SCHEMA}")
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _bare_refs(value: Any, ref: str) -> None:
    """Drop what FastAPI added beside ``$ref: ref`` (the body's own ``type: object``)."""
    if isinstance(value, dict):
        if value.get("$ref") == ref:
            for key in [k for k in value if k not in ("$ref", "description")]:
                del value[key]
        for item in value.values():
            _bare_refs(item, ref)
    elif isinstance(value, list):
        for item in value:
            _bare_refs(item, ref)
