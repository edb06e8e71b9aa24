"""Schemathesis against the real `mlms serve` (uvicorn on a loopback port, real documents in
SQLite and PostgreSQL), from the service's own OpenAPI document: no generated request gets a
server error, and every answer matches the document (status code, content type, schema); the
token is checked too (without it, every guarded operation must refuse)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_schema_conformance,
    status_code_conformance,
)
from serve_fixtures import LiveServer, bearer

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

EXAMPLES = 30
PROBES = ("/healthz", "/readyz")
"""Per operation and mode (data that fits the schema, data that does not)."""
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    ignored_auth,
]


@pytest.fixture
def api_schema(live_server: LiveServer) -> Any:
    return schemathesis.openapi.from_url(f"{live_server.url}/openapi.json")


def test_the_api_keeps_its_openapi_document(api_schema: Any, live_server: LiveServer) -> None:
    """Every operation, with data that fits its parameters and data that does not (schemathesis'
    pytest plugin is bypassed: its lazy loader needs a pytest private that pytest 9 lacks)."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {operation.label for operation in operations} >= {
        "GET /healthz",
        "GET /readyz",
        "GET /api/v1/runs",
        "POST /api/v1/runs",
        "GET /api/v1/runs.csv",
        "GET /api/v1/runs/{run_id}",
        "GET /api/v1/compare",
        "GET /api/v1/leaderboard",
        "GET /api/v1/models/{model}/history",
        "POST /api/v1/try",
    }
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,  # no .hypothesis/ folder in the checkout
                suppress_health_check=list(HealthCheck),
            )
            def check(case: Any) -> None:
                case.call_and_validate(headers=bearer(live_server.write_token), checks=CHECKS)

            try:
                check()
            except Unsatisfiable:
                # nothing to break: an operation with no parameters (the probes)
                assert mode is GenerationMode.NEGATIVE and operation.path in PROBES
            except Exception as exc:
                exc.add_note(f"in {operation.label}, {mode} data")
                raise


def test_real_answers_match_the_openapi_document(
    api_schema: Any, live_server: LiveServer, served_documents: dict[str, dict[str, Any]]
) -> None:
    """Random ids rarely hit a run: validate the answers about the real ones too."""
    ids = [document["run_id"] for document in served_documents.values()]
    model = served_documents["srv-ort-a"]["spec"]["model"]["name"]
    unknown = str(uuid.uuid4())
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/api/v1/runs", {"query": {"limit": 3}}),
        ("GET", "/api/v1/runs.csv", {}),
        *(("GET", "/api/v1/runs/{run_id}", {"path_parameters": {"run_id": i}}) for i in ids),
        ("GET", "/api/v1/runs/{run_id}", {"path_parameters": {"run_id": unknown}}),
        ("GET", "/api/v1/compare", {"query": {"run": ids}}),
        ("GET", "/api/v1/compare", {"query": {"run": [ids[0], unknown]}}),
        ("GET", "/api/v1/leaderboard", {"query": {"metric": "throughput", "batch_size": 8}}),
        ("GET", "/api/v1/models/{model}/history", {"path_parameters": {"model": model}}),
        ("POST", "/api/v1/runs", {"body": served_documents["srv-torch"]}),
        ("GET", "/readyz", {}),
    ]
    statuses = []
    for method, path, parts in calls:
        case = api_schema[path][method].Case(**parts)
        response = case.call_and_validate(
            headers=bearer(live_server.write_token), checks=CHECKS[:-1]
        )
        statuses.append(response.status_code)
    assert statuses == [200, 200, 200, 200, 200, 200, 404, 200, 404, 200, 200, 200, 200]
