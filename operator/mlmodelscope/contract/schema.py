"""``result.schema.json``, generated from :class:`~mlmodelscope.contract.result.ResultDocument`.

``mlms crd`` writes it with the CRDs after the models change; ``mlms crd --check`` (run by
``make test``) fails when it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from mlmodelscope.contract.result import ResultDocument

SCHEMA_PATH: Final = Path(__file__).with_name("result.schema.json")
SCHEMA_ID: Final = "https://mlmodelscope.io/schemas/results/v1alpha1/evaluation-result.json"


def result_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a result document, snake_case as written."""
    schema = ResultDocument.model_json_schema(by_alias=False, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}


def render() -> str:
    return json.dumps(result_schema(), indent=1, sort_keys=False) + "\n"


def is_stale() -> bool:
    return not SCHEMA_PATH.is_file() or SCHEMA_PATH.read_text() != render()


def write() -> Path:
    SCHEMA_PATH.write_text(render())
    return SCHEMA_PATH
