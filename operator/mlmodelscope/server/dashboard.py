"""The web dashboard: server-rendered HTML pages over the same store as the API.

- ``/``: the runs, newest first, each with its dataset (name and sample count), filtered by a
  GET form (the dataset among the filters); tick runs and compare them;
- ``/compare?run=ID&run=ID...``: `mlms report`'s comparison (tables, significance verdicts
  for at most ``SIGNIFICANCE_RUNS`` runs, SVG plots, stack and spec differences); 400 for
  fewer than two runs, 404 naming an unknown one;
- ``/runs/{run_id}``: one run, with its stack, spec and a link to its trace in Jaeger;
- ``/runs/{run_id}/analysis``: `mlms analyze` of one run traced at framework level (tables,
  and PNG plots embedded when matplotlib is installed); 404 for a run without a correction.
- ``/leaderboard``: per task (primary metric) and dataset, the best Succeeded run per model
  and hardware, ranked by the primary metric, p50 or p99 latency, throughput, energy per
  inference or cost per 1,000 inferences, filtered by a GET form (the API's ranking,
  :mod:`.pages.leaderboard`);
- ``/models/{name}/history``: a model's runs oldest first with their dataset, with SVG plots
  of the primary metric and p50 latency over time; 404 naming a model with no recorded run;
- ``/launch``, ``/launches``, ``/launches/{launch_id}``, ``/sweep-launches/{sweep_id}``: the
  Launch form (in the cluster, with its node pools: :mod:`.node_pools`), the launches and a
  launched sweep with its children, whose states update without reloading
  (:mod:`.pages.launch`, the one page script).

Every page carries a Content-Security-Policy: scripts, fetches and forms from this app only,
no inline script, no frames.

Reads need the server's read token (:mod:`mlmodelscope.server.auth`) when it has one. A
browser cannot send an ``Authorization`` header with a link, so the dashboard also takes the
token from its cookie (set by the 401 page's form, ``POST /login``, or by opening any page
with ``?token=...``). Errors are HTML pages, not JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Annotated, Any, Final, Literal
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials

from mlmodelscope.report.compare import (
    SIGNIFICANCE_RUNS,
    CompareError,
    LoadedRun,
    compare,
    parse_result,
)
from mlmodelscope.report.html import esc
from mlmodelscope.server import auth
from mlmodelscope.server.launch_queue import LaunchQueue
from mlmodelscope.server.launch_watch import trace_of
from mlmodelscope.server.pages import launch, render
from mlmodelscope.server.pages import leaderboard as board
from mlmodelscope.server.state import launch_target_of, node_pools_of, settings_of, store_of
from mlmodelscope.server.sweep_launches import SweepLaunches
from mlmodelscope.spec.resources import FileModels
from mlmodelscope.store import queries
from mlmodelscope.store.store import RunFilter

COOKIE: Final = auth.COOKIE
"""The browser's copy of the read (or write) token."""
LIMIT: Final = 100
MAX_LIMIT: Final = 1000
OPTIONS_FROM: Final = 1000
"""The filter menus offer the values of this many newest runs."""
MAX_COMPARED: Final = 50
MAX_BATCH: Final = 1_000_000
CSP: Final = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
    "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""The pages' Content-Security-Policy: inline styles (every page has one), scripts only from
this app (``/static/launch.js``), fetches only to its API."""
LAUNCHES_SHOWN: Final = 200


class HtmlErrors(APIRoute):
    """Answers a route's HTTP and validation errors with an HTML page (status and headers
    kept) instead of FastAPI's JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def as_html(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException as exc:
                if exc.status_code == 401:
                    body = login_page(request, str(exc.detail))
                else:
                    body = render.error_page(f"Error {exc.status_code}", str(exc.detail))
                headers = {**(exc.headers or {}), "Content-Security-Policy": CSP}
                return HTMLResponse(body, exc.status_code, headers=headers)
            except RequestValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors()
                )
                body = render.error_page("Bad request", problems)
                return HTMLResponse(body, 400, headers={"Content-Security-Policy": CSP})

        return as_html


def read_access(request: Request, credentials: auth.Credentials) -> None:
    """:func:`~mlmodelscope.server.auth.require_read`, with the token also taken from
    ``?token=`` or the dashboard's cookie when the request has no ``Authorization`` header.
    A good token from ``?token=`` is kept in the cookie (see :func:`html`)."""
    if credentials is None:
        given = request.query_params.get("token")
        if given:
            request.state.token_to_keep = given
        else:
            given = request.cookies.get(COOKIE)
        if given:
            credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=given)
    auth.require_read(request, auth.token_role(request, credentials))


router = APIRouter(include_in_schema=False, route_class=HtmlErrors)
READ: Final = [Depends(read_access)]
"""Every page but ``/login`` reads."""


def keep_token(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


def html(request: Request, body: str, status_code: int = 200) -> HTMLResponse:
    response = HTMLResponse(body, status_code, headers={"Content-Security-Policy": CSP})
    token = getattr(request.state, "token_to_keep", None)
    if token:
        keep_token(request, response, token)
    return response


def login_page(request: Request, message: str) -> str:
    """The 401 page: a form that posts the token to ``/login``, which keeps it in a cookie
    and comes back here."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    form = (
        '<form class="filters" method="post" action="/login">'
        f'<input type="hidden" name="next" value="{esc(target)}">'
        '<label>token<input type="password" name="token" autocomplete="current-password" '
        'required></label><button type="submit">Open</button></form>'
    )
    return render.page("Token needed", f'<p class="error">{esc(message)}</p>{form}')


@router.post("/login")
async def post_login(request: Request) -> Response:
    """Keep the posted token in the cookie and go back to ``next`` (a path on this server),
    or show the form again when the token is not one of the server's."""
    fields = parse_qs((await request.body()).decode(errors="replace"))
    token = fields.get("token", [""])[0]
    target = fields.get("next", ["/"])[0]
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        target = "/"
    credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
    auth.require_read(request, auth.token_role(request, credentials))
    response = RedirectResponse(target, 303)
    keep_token(request, response, token)
    return response


def _given(value: str | None) -> str | None:
    """An empty form field means "any"."""
    return value or None


@router.get("/", response_class=HTMLResponse, dependencies=READ)
def runs_page(
    request: Request,
    model: str | None = None,
    framework: str | None = None,
    device: str | None = None,
    gpu: str | None = None,
    status: str | None = None,
    evaluation: str | None = None,
    dataset: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = LIMIT,
) -> HTMLResponse:
    store = store_of(request)
    chosen = {
        "model": _given(model),
        "framework": _given(framework),
        "device": _given(device),
        "gpu": _given(gpu),
        "status": _given(status),
        "evaluation": _given(evaluation),
        "dataset": _given(dataset),
    }
    runs = store.list_runs(**chosen, limit=limit)
    options = render.filter_options(store.list_runs(limit=OPTIONS_FROM))
    return html(request, render.runs_page(runs, chosen, options, limit))


def _load(request: Request, run_id: str) -> LoadedRun:
    document = store_of(request).get(run_id)
    if document is None:
        raise HTTPException(404, f"No run {run_id!r} in the results store.")
    try:
        return parse_result(document, f"store:{run_id}")
    except CompareError as exc:
        raise HTTPException(
            500, f"The stored document of run {run_id} is unreadable: {exc}"
        ) from None


@router.get("/compare", response_class=HTMLResponse, dependencies=READ)
def compare_page(
    request: Request, run: Annotated[list[str] | None, Query()] = None
) -> HTMLResponse:
    run_ids = list(dict.fromkeys(r.strip() for r in run or [] if r.strip()))
    if len(run_ids) < 2:
        raise HTTPException(
            400,
            f"Comparing needs at least two different runs; got {len(run_ids)}. "
            "Tick two or more runs on the runs page, then Compare.",
        )
    if len(run_ids) > MAX_COMPARED:
        raise HTTPException(400, f"At most {MAX_COMPARED} runs at once; got {len(run_ids)}.")
    runs = [_load(request, run_id) for run_id in run_ids]
    comparison = compare(runs, significance=len(runs) <= SIGNIFICANCE_RUNS)
    return html(request, render.compare_page(runs, comparison))


@router.get("/runs/{run_id}", response_class=HTMLResponse, dependencies=READ)
def run_page(request: Request, run_id: str) -> HTMLResponse:
    loaded = _load(request, run_id)
    return html(request, render.run_page(loaded, settings_of(request).jaeger_url))


@router.get("/runs/{run_id}/analysis", response_class=HTMLResponse, dependencies=READ)
def analysis_page(request: Request, run_id: str) -> HTMLResponse:
    import base64
    import tempfile
    from pathlib import Path

    from mlmodelscope.analysis.pipeline import AnalysisInputError, analyze, label_runs
    from mlmodelscope.analysis.plots import AnalysisExtraMissingError, draw

    loaded = _load(request, run_id)
    if not render.has_correction(loaded.document):
        raise HTTPException(
            404,
            f"Run {run_id} has no leveled correction: run it with tracing.level framework "
            "(or library) to analyze its layers.",
        )
    runs = label_runs([(loaded.source, loaded.document.to_json_dict())])
    try:
        analysis = analyze(runs)
    except AnalysisInputError as exc:
        raise HTTPException(404, str(exc)) from None
    try:
        with tempfile.TemporaryDirectory(prefix="mlms-serve-analysis-") as tmp:
            made = draw(analysis, Path(tmp))
            figures = "".join(
                f'<figure><h3>{esc(f["title"])}</h3><img alt="{esc(f["title"])}" '
                f'src="data:image/png;base64,'
                f'{base64.b64encode((Path(tmp) / f["file"]).read_bytes()).decode()}">'
                f"<figcaption>{esc(f['caption'])}</figcaption></figure>"
                for f in made
            )
    except AnalysisExtraMissingError as exc:
        figures = f'<p class="note">{esc(exc)}</p>'
    return html(request, render.analysis_page(loaded, analysis, figures))


Rank = Literal[
    "metric_value", "p50_ms", "p99_ms", "throughput", "joules_per_inference", "cost_per_1000"
]


@router.get("/leaderboard", response_class=HTMLResponse, dependencies=READ)
def leaderboard_page(
    request: Request,
    metric_name: str | None = None,
    dataset: str | None = None,
    framework: str | None = None,
    device: str | None = None,
    gpu: str | None = None,
    rank: Rank = "metric_value",
    batch_size: str | None = None,
) -> HTMLResponse:
    """Per task (primary metric) and dataset, :func:`~mlmodelscope.store.queries.leaderboard`,
    the API's ranking, ordered best first across models; with a dataset chosen, only the
    tasks that have runs on it."""
    store = store_of(request)
    size = _batch_size(batch_size) or 1
    chosen = {
        "metric_name": _given(metric_name),
        "dataset": _given(dataset),
        "framework": _given(framework),
        "device": _given(device),
        "gpu": _given(gpu),
    }
    where = RunFilter(
        framework=chosen["framework"],
        device=chosen["device"],
        gpu=chosen["gpu"],
        dataset=chosen["dataset"],
    )
    tasks = [chosen["metric_name"]] if chosen["metric_name"] else None
    boards = [
        (
            task,
            {
                name: queries.best_first(entries, rank)
                for name, entries in queries.by_dataset(
                    queries.leaderboard(
                        store, metric=rank, batch_size=size, where=replace(where, metric=task)
                    )
                ).items()
            },
        )
        for task in tasks or queries.metric_names(store, dataset=chosen["dataset"])
    ]
    options = {
        **render.filter_options(store.list_runs(limit=OPTIONS_FROM)),
        "metric_name": queries.metric_names(store),
        "dataset": queries.dataset_names(store),
    }
    return html(request, board.leaderboard_page(boards, chosen, options, rank, size))


@router.get("/models/{model:path}/history", response_class=HTMLResponse, dependencies=READ)
def history_page(
    request: Request,
    model: str,
    framework: str | None = None,
    device: str | None = None,
    gpu: str | None = None,
    status: str | None = None,
    dataset: str | None = None,
    batch_size: str | None = None,
) -> HTMLResponse:
    """The model's runs oldest first (:func:`~mlmodelscope.store.queries.history`, as the
    API's); 404 naming a model with no recorded run."""
    store = store_of(request)
    size = _batch_size(batch_size)
    chosen = {
        "dataset": _given(dataset),
        "framework": _given(framework),
        "device": _given(device),
        "gpu": _given(gpu),
        "status": _given(status),
    }
    where = RunFilter(**chosen)
    points = queries.history(store, model, batch_size=size, where=where, limit=MAX_LIMIT)
    if not points and not queries.model_known(store, model):
        raise HTTPException(404, f"No recorded run of model {model!r}.")
    options = render.filter_options(store.list_runs(model=model, limit=OPTIONS_FROM))
    return html(request, board.history_page(model, points, chosen, options, size))


def _batch_size(value: str | None) -> int | None:
    """A form's batch size; None when the field is empty."""
    if not value:
        return None
    try:
        size = int(value)
    except ValueError:
        raise HTTPException(400, f"batch_size: {value!r} is not a whole number.") from None
    if not 1 <= size <= MAX_BATCH:
        raise HTTPException(400, f"batch_size: {size} is not between 1 and {MAX_BATCH}.")
    return size


@router.get("/launch", response_class=HTMLResponse, dependencies=READ)
def launch_form(request: Request) -> HTMLResponse:
    catalog = FileModels.read(settings_of(request).catalog)
    models = [catalog.models[name] for name in sorted(catalog.models)]
    problems = [str(error) for error in catalog.errors]
    pools = node_pools_of(request)
    hardware = pools.read() if pools is not None else None
    return html(request, launch.launch_form_page(models, problems, hardware))


@router.get("/launches", response_class=HTMLResponse, dependencies=READ)
def launches_page(request: Request) -> HTMLResponse:
    _, rows = LaunchQueue(store_of(request)).page(limit=LAUNCHES_SHOWN)
    sweeps = SweepLaunches(store_of(request)).names(r.sweep_id for r in rows if r.sweep_id)
    return html(request, launch.launches_page(rows, sweeps))


@router.get("/launches/{launch_id}", response_class=HTMLResponse, dependencies=READ)
def launch_page(request: Request, launch_id: str) -> HTMLResponse:
    found = LaunchQueue(store_of(request)).get(launch_id)
    if found is None:
        raise HTTPException(404, f"No launch {launch_id!r}.")
    trace_id = trace_of(store_of(request).get(found.run_id)) if found.run_id else None
    watched = None
    if found.namespace is not None:  # in the cluster: its Events and agent log
        target = launch_target_of(request)
        events = target.events(found)
        watched = (events, target.log(found, launch.PAGE_TAIL))
        trace_id = trace_id or events.trace_id
    jaeger_url = settings_of(request).jaeger_url
    return html(request, launch.launch_page(found, jaeger_url, trace_id, watched))


@router.get("/sweep-launches/{sweep_id}", response_class=HTMLResponse, dependencies=READ)
def sweep_launch_page(request: Request, sweep_id: str) -> HTMLResponse:
    found = SweepLaunches(store_of(request)).get(sweep_id)
    if found is None:
        raise HTTPException(404, f"No sweep launch {sweep_id!r}.")
    return html(request, launch.sweep_page(found))


@router.get(launch.SCRIPT_PATH)
def launch_script() -> Response:
    """The Launch pages' script; static, so it needs no token."""
    return Response(
        launch.SCRIPT,
        media_type="text/javascript; charset=utf-8",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )
