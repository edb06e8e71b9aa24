"""The launch API (``/api/v1/launches``): turn a Launch form into ModelEvaluations, or one
EvaluationSweep (``kind: sweep``), preview them, queue them for the server's workers (or create
them in the cluster), watch and cancel them. A sweep's children are launches like any other;
``/api/v1/sweep-launches/{id}`` reads the sweep with its children and its state (summed up from
theirs), and cancels them all.

A launch in the cluster (`mlms serve --launch-namespace`) is also watched:
``/api/v1/launches/{id}/events`` answers the Kubernetes Events of its ModelEvaluation, Job and
pods, ``/api/v1/launches/{id}/log?tail=N`` the last lines of its agent's log; for a launch on
this server's own workers both answer 200 with ``applies: false`` and the reason, nothing else.

Launching and cancelling need the write token; listing and reading need what every read does.
An invalid form is 422 in FastAPI's shape, one entry per problem, ``loc`` naming the form's
field (``["body", "batch_sizes"]``) and ``msg`` the spec path and what is wrong with it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel

from mlmodelscope.server.api import PROBLEMS, Problem
from mlmodelscope.server.auth import require_read, require_write
from mlmodelscope.server.launch_queue import LaunchQueue, LaunchRow, LaunchState
from mlmodelscope.server.launch_target import LaunchRefusedError
from mlmodelscope.server.launch_watch import (
    DEFAULT_TAIL,
    MAX_TAIL,
    EventRecord,
    LaunchEvents,
    LogTail,
    trace_of,
)
from mlmodelscope.server.launches import (
    InvalidLaunchError,
    LaunchForm,
    as_yaml,
    build_documents,
    build_sweep,
)
from mlmodelscope.server.pages.render import trace_link
from mlmodelscope.server.state import launch_target_of, settings_of, store_of
from mlmodelscope.server.sweep_launches import SweepLaunches, SweepRow
from mlmodelscope.spec.resources import FileModels

MAX_PAGE: Final = 1000
MAX_OFFSET: Final = 1_000_000_000
NOT_FOUND: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": Problem, "description": "No such launch."}
}
NO_SWEEP: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": Problem, "description": "No such sweep launch."}
}

router = APIRouter(
    prefix="/api/v1", tags=["launches"], dependencies=[Depends(require_read)], responses=PROBLEMS
)


class LaunchItem(BaseModel):
    """One launch: a ModelEvaluation queued to run on this server."""

    launch_id: str
    evaluation: str
    model: str | None
    framework: str | None
    state: LaunchState
    """queued, running, succeeded, failed, cancelled, interrupted."""
    run_id: str | None
    """The run it recorded (``/api/v1/runs/{run_id}``), once it has."""
    message: str | None
    """Why it failed, was cancelled or interrupted."""
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    spec: str
    """The ModelEvaluation YAML it runs."""
    namespace: str | None = None
    """Where it was created as a ModelEvaluation (named ``evaluation``), with `mlms serve
    --launch-namespace`; None when this server's workers run it."""
    resource_uid: str | None = None
    """That ModelEvaluation's uid; None for a sweep's child the operator has not created yet."""
    sweep_id: str | None = None
    """The sweep launch it is a child of (``/api/v1/sweep-launches/{sweep_id}``), if any."""
    trace_id: str | None = None
    """Its run's trace id, when the run is recorded in this server's store (one launch only)."""
    trace_url: str | None = None
    """That trace in Jaeger, when the server has a Jaeger URL."""
    location: str

    @classmethod
    def of(cls, row: LaunchRow) -> LaunchItem:
        return cls(
            launch_id=row.launch_id,
            evaluation=row.evaluation,
            model=row.model_name,
            framework=row.framework,
            state=row.state,
            run_id=row.run_id,
            message=row.message,
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            spec=row.spec,
            namespace=row.namespace,
            resource_uid=row.resource_uid,
            sweep_id=row.sweep_id,
            location=f"{router.prefix}/launches/{row.launch_id}",
        )


class SweepItem(BaseModel):
    """One launched EvaluationSweep: its children, and its state summed up from theirs."""

    sweep_id: str
    name: str
    state: LaunchState
    """queued while no child has started; running while any is queued or running; then
    failed if any failed, else interrupted, else cancelled if any was, else succeeded."""
    counts: dict[str, int]
    """Children per state."""
    created_at: datetime
    spec: str
    """The EvaluationSweep YAML."""
    children: list[LaunchItem]
    """Its ModelEvaluations, in matrix order (models x frameworks x devices x batch sizes)."""
    namespace: str | None = None
    """Where it was created as an EvaluationSweep (named ``name``), with `mlms serve
    --launch-namespace`; None when this server's workers run its children."""
    resource_uid: str | None = None
    """That EvaluationSweep's uid."""
    location: str

    @classmethod
    def of(cls, row: SweepRow) -> SweepItem:
        return cls(
            sweep_id=row.sweep_id,
            name=row.name,
            state=row.state,
            counts=row.counts,
            created_at=row.created_at,
            spec=row.spec,
            children=[LaunchItem.of(child) for child in row.children],
            namespace=row.namespace,
            resource_uid=row.resource_uid,
            location=f"{router.prefix}/sweep-launches/{row.sweep_id}",
        )


class LaunchAnswer(BaseModel):
    """The evaluations a form makes: previewed (``dry_run``) or queued."""

    dry_run: bool
    kind: str = "evaluation"
    """evaluation or sweep, as the form asked."""
    evaluations: list[str]
    """Their names, in the order of the form's frameworks (a sweep's: in matrix order)."""
    yaml: str
    """The ModelEvaluation documents, as `mlms run --models CATALOG` reads them; for a sweep,
    the one EvaluationSweep document (what `mlms validate` and `kubectl apply` take)."""
    launches: list[LaunchItem]
    """One per evaluation; empty for a dry run."""
    sweep: SweepItem | None = None
    """The queued sweep with its children (kind sweep, not a dry run)."""


class LaunchEvent(BaseModel):
    """One Kubernetes Event about a launch's ModelEvaluation, Job or pod (message redacted)."""

    time: str | None
    type: str
    """Normal or Warning."""
    reason: str
    message: str
    kind: str
    """ModelEvaluation, Job or Pod."""
    name: str
    count: int

    @classmethod
    def of(cls, record: EventRecord) -> LaunchEvent:
        return cls(**vars(record))


class LaunchEventsAnswer(BaseModel):
    """The Events of a cluster launch, newest last (at most 200)."""

    launch_id: str
    applies: bool
    """False for a launch on this server's own workers: nothing is read, ``reason`` says so."""
    reason: str | None
    """Why some or all are missing: no Job yet, the evaluation gone, a read refused."""
    job: str | None
    """The evaluation's Job (``status.jobName``)."""
    pods: list[str]
    """That Job's pods, oldest first."""
    trace_id: str | None
    """The evaluation's ``status.traceID``."""
    trace_url: str | None
    """That trace in Jaeger, when the server has a Jaeger URL."""
    items: list[LaunchEvent]

    @classmethod
    def of(cls, launch_id: str, found: LaunchEvents, jaeger_url: str | None) -> LaunchEventsAnswer:
        return cls(
            launch_id=launch_id,
            applies=found.applies,
            reason=found.reason,
            job=found.job,
            pods=list(found.pods),
            trace_id=found.trace_id,
            trace_url=trace_link(jaeger_url, found.trace_id),
            items=[LaunchEvent.of(r) for r in found.items],
        )


class LaunchLogAnswer(BaseModel):
    """The last lines of a cluster launch's agent log (redacted), and why there are none."""

    launch_id: str
    applies: bool
    """False for a launch on this server's own workers."""
    reason: str | None
    """Why there are no lines: no pod yet, the container not started, a read refused."""
    pod: str | None
    """The newest pod of the evaluation's Job, whose log this is."""
    container: str
    tail: int
    lines: list[str]

    @classmethod
    def of(cls, launch_id: str, found: LogTail, tail: int) -> LaunchLogAnswer:
        return cls(
            launch_id=launch_id,
            applies=found.applies,
            reason=found.reason,
            pod=found.pod,
            container=found.container,
            tail=tail,
            lines=list(found.lines),
        )


class LaunchPage(BaseModel):
    """Launches newest first: ``items`` are ``limit`` of the ``total`` from ``offset``."""

    total: int
    limit: int
    offset: int
    items: list[LaunchItem]


def _launch_key(request: Request, launch_id: str) -> LaunchRow:
    found = LaunchQueue(store_of(request)).get(launch_id)
    if found is None:
        raise HTTPException(404, detail=f"no launch {launch_id}")
    return found


LaunchId = Annotated[str, Path(description="Launch UUID.", max_length=64)]


@router.post(
    "/launches",
    summary="Launch evaluations of a catalog Model (write token); dry_run previews them",
    status_code=202,
    dependencies=[Depends(require_write)],
    responses={
        200: {"model": LaunchAnswer, "description": "Dry run: the documents, nothing queued."},
        202: {"model": LaunchAnswer, "description": "Queued, one launch per evaluation."},
        400: {"model": Problem, "description": "The body is not JSON."},
    },
)
def launch(
    request: Request,
    response: Response,
    form: LaunchForm,
    dry_run: Annotated[
        bool, Query(description="Validate and return the documents; queue nothing.")
    ] = False,
) -> LaunchAnswer:
    catalog = FileModels.read(settings_of(request).catalog)
    try:
        if form.kind == "sweep":
            return _launch_sweep(request, response, form, catalog, dry_run)
        built = build_documents(form, catalog)
    except InvalidLaunchError as exc:
        detail = [
            {"loc": list(p.loc), "msg": p.message, "type": "value_error"} for p in exc.problems
        ]
        raise HTTPException(422, detail=detail) from None
    text = as_yaml(b.document for b in built)
    names = [b.name for b in built]
    if dry_run:
        response.status_code = 200
        return LaunchAnswer(dry_run=True, evaluations=names, yaml=text, launches=[])
    try:
        queued = launch_target_of(request).submit(built)
    except LaunchRefusedError as exc:
        raise HTTPException(exc.status, detail=str(exc)) from None
    items = [LaunchItem.of(row) for row in queued]
    return LaunchAnswer(dry_run=False, evaluations=names, yaml=text, launches=items)


def _launch_sweep(
    request: Request, response: Response, form: LaunchForm, catalog: FileModels, dry_run: bool
) -> LaunchAnswer:
    """One EvaluationSweep: previewed, or kept with its children queued as its launches (in
    the cluster: created, its children made by the operator and followed)."""
    built = build_sweep(form, catalog)
    text = as_yaml([built.document])
    names = [child.name for child in built.children]
    if dry_run:
        response.status_code = 200
        return LaunchAnswer(dry_run=True, kind="sweep", evaluations=names, yaml=text, launches=[])
    try:
        sweep = SweepItem.of(launch_target_of(request).submit_sweep(built))
    except LaunchRefusedError as exc:
        raise HTTPException(exc.status, detail=str(exc)) from None
    return LaunchAnswer(
        dry_run=False,
        kind="sweep",
        evaluations=names,
        yaml=text,
        launches=sweep.children,
        sweep=sweep,
    )


@router.get("/launches", summary="List launches, newest first")
def list_launches(
    request: Request,
    state: Annotated[LaunchState | None, Query(description="Only launches in this state.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Launches per page.")] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Launches to skip.")] = 0,
) -> LaunchPage:
    total, rows = LaunchQueue(store_of(request)).page(state=state, limit=limit, offset=offset)
    return LaunchPage(
        total=total, limit=limit, offset=offset, items=[LaunchItem.of(r) for r in rows]
    )


@router.get("/launches/{launch_id}", summary="One launch: its state and run", responses=NOT_FOUND)
def get_launch(request: Request, launch_id: LaunchId) -> LaunchItem:
    item = LaunchItem.of(launch_target_of(request).current(_launch_key(request, launch_id)))
    if item.run_id:
        item.trace_id = trace_of(store_of(request).get(item.run_id))
        item.trace_url = trace_link(settings_of(request).jaeger_url, item.trace_id)
    return item


@router.get(
    "/launches/{launch_id}/events",
    summary="A cluster launch's Kubernetes Events (its evaluation, Job and pods), newest last",
    responses=NOT_FOUND,
)
def launch_events(request: Request, launch_id: LaunchId) -> LaunchEventsAnswer:
    found = launch_target_of(request).events(_launch_key(request, launch_id))
    return LaunchEventsAnswer.of(launch_id, found, settings_of(request).jaeger_url)


@router.get(
    "/launches/{launch_id}/log",
    summary="The last lines of a cluster launch's agent log (its Job's newest pod)",
    responses=NOT_FOUND,
)
def launch_log(
    request: Request,
    launch_id: LaunchId,
    tail: Annotated[
        int, Query(ge=1, le=MAX_TAIL, description="Lines from the end of the log.")
    ] = DEFAULT_TAIL,
) -> LaunchLogAnswer:
    found = launch_target_of(request).log(_launch_key(request, launch_id), tail)
    return LaunchLogAnswer.of(launch_id, found, tail)


@router.post(
    "/launches/{launch_id}/cancel",
    summary="Cancel a queued or running launch (write token)",
    dependencies=[Depends(require_write)],
    responses={
        **NOT_FOUND,
        409: {"model": Problem, "description": "The launch has already ended."},
    },
)
def cancel_launch(request: Request, launch_id: LaunchId) -> LaunchItem:
    """A queued launch never starts; a running one's process is stopped (SIGTERM, then
    SIGKILL) by its worker, which looks every 0.5 s. A launch in the cluster: its
    ModelEvaluation is deleted."""
    found = _launch_key(request, launch_id)
    queue = LaunchQueue(store_of(request))
    try:
        cancelled = launch_target_of(request).cancel(found)
    except LaunchRefusedError as exc:
        raise HTTPException(exc.status, detail=str(exc)) from None
    if not cancelled:
        ended = queue.get(found.launch_id) or found
        raise HTTPException(409, detail=f"launch {launch_id} has already ended: {ended.state}")
    return LaunchItem.of(queue.get(found.launch_id) or found)


SweepId = Annotated[str, Path(description="Sweep launch UUID.", max_length=64)]


def _sweep(request: Request, sweep_id: str) -> SweepRow:
    found = SweepLaunches(store_of(request)).get(sweep_id)
    if found is None:
        raise HTTPException(404, detail=f"no sweep launch {sweep_id}")
    return found


@router.get(
    "/sweep-launches/{sweep_id}",
    summary="One launched sweep: its state, its children and theirs",
    responses=NO_SWEEP,
)
def get_sweep(request: Request, sweep_id: SweepId) -> SweepItem:
    return SweepItem.of(_sweep(request, sweep_id))


@router.post(
    "/sweep-launches/{sweep_id}/cancel",
    summary="Cancel every child of a sweep that has not ended (write token)",
    dependencies=[Depends(require_write)],
    responses={
        **NO_SWEEP,
        409: {"model": Problem, "description": "Every child has already ended."},
    },
)
def cancel_sweep(request: Request, sweep_id: SweepId) -> SweepItem:
    """Each child as ``POST /api/v1/launches/{id}/cancel`` does: queued ones never start,
    running ones are stopped by their workers. A sweep in the cluster: its EvaluationSweep is
    deleted (its children with it, by the garbage collector)."""
    found = _sweep(request, sweep_id)
    try:
        cancelled = launch_target_of(request).cancel_sweep(found)
    except LaunchRefusedError as exc:
        raise HTTPException(exc.status, detail=str(exc)) from None
    if not cancelled:
        raise HTTPException(409, detail=f"sweep launch {sweep_id} has already ended: {found.state}")
    return SweepItem.of(SweepLaunches(store_of(request)).get(found.sweep_id) or found)
