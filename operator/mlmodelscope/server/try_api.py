"""Try an image or a text on a catalog Model: ``POST /api/v1/try`` and the dashboard's Try page
(``/try``).

Both take one image (or, for a text Model, one text) and a Model of the server's catalog with
the frameworks to run it in, and answer, by the Model's task label, each framework's top-k
classes (of the image, or of the text), boxes (detection), class map (segmentation) or output
image (image-to-image), the latency of that one inference and how long loading took
(:mod:`.trials`, :mod:`.try_tasks`). Both need the server's write token: the API in the
``Authorization`` header, the page in a form field typed on the page (the dashboard's cookie
only reads, so no other site can make a browser try). The page's POST is also refused when
the browser says it comes from another site (``Sec-Fetch-Site``) or its ``Origin`` is not this
server.

A body larger than the image bound plus :data:`~.trials.FORM_OVERHEAD` is refused (413) from
its ``Content-Length``, before any of it is read; the form is validated field by field, and a
refused upload names the field (``file``, ``text``, ``model``, ``frameworks``, ``k``,
``token``, or one of :class:`~.try_tasks.TryOptions`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, File, Form, HTTPException, Request, Response, UploadFile
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile as StarletteUpload
from starlette.formparsers import MultiPartException

from mlmodelscope.server import auth
from mlmodelscope.server.api import Problem
from mlmodelscope.server.dashboard import READ, HtmlErrors, html
from mlmodelscope.server.launches import FRAMEWORKS
from mlmodelscope.server.pages import try_page
from mlmodelscope.server.state import settings_of, trials_of
from mlmodelscope.server.trials import (
    MAX_K,
    MAX_TEXT_CHARS,
    MEDIA_TYPES,
    Framework,
    TryError,
    Upload,
    body_bound,
    check_length,
)
from mlmodelscope.server.try_answers import TryAnswer
from mlmodelscope.server.try_tasks import TryOptions
from mlmodelscope.spec.resources import FileModels

MAX_FIELDS: Final = 24
"""More than the page's form fields (the file aside, 17 at most)."""


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _read_upload(upload: StarletteUpload, max_bytes: int) -> bytes:
    """At most one byte more than the bound, so a larger file is told from one that fits."""
    upload.file.seek(0)
    return upload.file.read(max_bytes + 1)


class BoundedBody(APIRoute):
    """Refuses a body over the server's try bound from its Content-Length, before the
    multipart parser reads any of it (411 without one)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            try:
                check_length(
                    request.headers.get("content-length"), settings_of(request).try_max_bytes
                )
            except TryError as exc:
                raise HTTPException(exc.status, detail=str(exc)) from None
            return await handler(request)

        return bounded


router = APIRouter(prefix="/api/v1", tags=["try"], route_class=BoundedBody)


def _problem(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description}


@router.post(
    "/try",
    summary="Try one image (or text) on a catalog Model in each framework given: its classes, "
    "boxes, class map or output image (write token)",
    dependencies=[Depends(auth.require_write)],
    responses={
        400: _problem("The body is no multipart form that can be read."),
        401: _problem("No bearer token, or an unknown one."),
        403: _problem("The token may not write, or the server takes no writes."),
        411: _problem("The body has no Content-Length."),
        413: _problem("The image (or the body) is larger than the server takes."),
        415: _problem("The file is not an image the server reads."),
        429: _problem("Too many tries from this client; see Retry-After."),
    },
)
def try_image(
    request: Request,
    model: Annotated[
        str, Form(min_length=1, max_length=253, description="A Model of the server's catalog.")
    ],
    frameworks: Annotated[
        list[Framework],
        Form(min_length=1, max_length=len(FRAMEWORKS), description="Frameworks to run it in."),
    ],
    options: Annotated[TryOptions, Form()],
    file: Annotated[
        UploadFile | None,
        File(description="The image: PNG, JPEG, BMP, GIF or WebP (not for a text Model)."),
    ] = None,
    text: Annotated[
        str | None,
        Form(description=f"text-classification: the text (at most {MAX_TEXT_CHARS} characters)."),
    ] = None,
    k: Annotated[
        int,
        Form(
            ge=1,
            le=MAX_K,
            description="classification, text-classification: how many best classes.",
        ),
    ] = 3,
) -> TryAnswer:
    """The upload is held in memory for this request only and never kept. The answer is by
    the Model's task label: the top k classes (of the image, or of the text for a text
    Model), the boxes (detection), the class map (segmentation) or the output image
    (image-to-image); a Model of another task is refused (422 on ``model``). 422 names the
    form field at fault (``["body", "model"]``; ``file`` or ``text`` for the upload a Model
    does not take, or is missing); a framework that fails answers its ``error`` while the
    others answer."""
    settings = settings_of(request)
    image = None if file is None else _read_upload(file, settings.try_max_bytes)
    upload = Upload.of(image, text)
    catalog = FileModels.read(settings.catalog)
    try:
        return trials_of(request).attempt(
            catalog, _client(request), model, frameworks, k, upload, options
        )
    except TryError as exc:
        if exc.status == 422:
            detail: Any = [
                {"loc": ["body", *_location(field)], "msg": msg, "type": "value_error"}
                for field, msg in exc.problems
            ]
        else:
            detail = str(exc)
        raise HTTPException(exc.status, detail=detail, headers=exc.headers) from None


def _location(field: str) -> list[str | int]:
    """``frameworks.1`` -> ``["frameworks", 1]``, as FastAPI locates a list's item."""
    return [int(part) if part.isdigit() else part for part in field.split(".")]


# ---------------------------------------------------------------------------------- page


pages = APIRouter(include_in_schema=False, route_class=HtmlErrors)


def _models(request: Request) -> dict[str, str | None]:
    """The catalog's Models by name, with their task labels."""
    found = FileModels.read(settings_of(request).catalog).models
    return {name: found[name].spec.task for name in sorted(found)}


@pages.get("/try", dependencies=READ)
def try_form(request: Request) -> Response:
    return html(request, try_page.try_page(_models(request), try_page.TryValues()))


def same_site(request: Request) -> bool:
    """Whether a form post comes from this server's own pages: the browser's
    ``Sec-Fetch-Site`` (when sent) is same-origin, and ``Origin`` (when sent) is this host."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return urlsplit(origin).netloc == host and origin != "null"


@pages.post("/try")
async def try_post(request: Request) -> Response:
    """The form's answer: the results beside the form, or the form with each problem next
    to its field (and the status the API would answer)."""
    if not same_site(request):
        raise HTTPException(403, "Refused: this form was posted from another site.")
    settings = settings_of(request)
    models = _models(request)
    values = try_page.TryValues()

    def again(
        status: int, errors: dict[str, list[str]], headers: dict[str, str] | None = None
    ) -> Response:
        body = try_page.try_page(models, values, errors=errors)
        response = html(request, body, status)
        response.headers.update(headers or {})
        return response

    try:
        check_length(request.headers.get("content-length"), settings.try_max_bytes)
    except TryError as exc:
        return again(exc.status, try_page.by_field(exc.problems))
    try:
        form = await request.form(
            max_files=1, max_fields=MAX_FIELDS, max_part_size=body_bound(settings.try_max_bytes)
        )
    except MultiPartException as exc:
        return again(400, {"": [f"the form could not be read: {exc.message}"]})
    try:
        values, errors = try_page.read_form(form, list(models))
        if errors:
            return again(422, errors)
        credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=values.token)
        try:
            auth.require_write(request, auth.token_role(request, credentials))
        except HTTPException as exc:
            return again(exc.status_code, {"token": [str(exc.detail)]})
        file = form.get("file")
        image = None
        if isinstance(file, StarletteUpload) and file.filename:
            image = await run_in_threadpool(_read_upload, file, settings.try_max_bytes)
        upload = Upload.of(image, values.text)
        catalog = FileModels.read(settings.catalog)
        try:
            answer = await run_in_threadpool(
                trials_of(request).attempt,
                catalog,
                _client(request),
                values.model,
                values.frameworks,
                values.k,
                upload,
                values.options,
            )
        except TryError as exc:
            return again(exc.status, try_page.by_field(exc.problems), exc.headers)
    finally:
        await form.close()
    shown = None
    if answer.image is not None and image is not None:
        media = MEDIA_TYPES[answer.image.format]
        shown = f"data:{media};base64,{base64.b64encode(image).decode()}"
    return html(request, try_page.try_page(models, values, answer=answer, image=shown))
