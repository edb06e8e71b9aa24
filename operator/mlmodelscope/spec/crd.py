"""Generate the CustomResourceDefinitions from the pydantic models (`mlms crd`).

The committed YAML in ``crds/`` is an output, never edited by hand: a test regenerates it and
fails on any difference. The conversion makes pydantic's JSON Schema *structural* (OpenAPI v3
as Kubernetes wants it): references inlined, optional unions collapsed, exclusive bounds in
OpenAPI 3.0 form, unknown fields pruned (so typos are rejected by kubectl's strict field
validation), and every field described so `kubectl explain` is useful.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from mlmodelscope import API_GROUP, API_VERSION
from mlmodelscope.spec.document import KIND, PLURAL
from mlmodelscope.spec.evaluation import EvaluationResourceSpec
from mlmodelscope.spec.manifest import (
    MAX_BASED_ON,
    MODEL_KIND,
    MODEL_PLURAL,
    MODEL_SHORT_NAME,
    ModelManifestSpec,
)
from mlmodelscope.spec.status import EvaluationStatus
from mlmodelscope.spec.sweep import (
    MAX_CHILDREN,
    SWEEP_KIND,
    SWEEP_PLURAL,
    SWEEP_SHORT_NAME,
    SweepSpec,
    SweepStatus,
)

CRD_FILENAME = f"{API_GROUP}_{PLURAL}.yaml"
SWEEP_CRD_FILENAME = f"{API_GROUP}_{SWEEP_PLURAL}.yaml"
MODEL_CRD_FILENAME = f"{API_GROUP}_{MODEL_PLURAL}.yaml"

_DROP = {"title", "additionalProperties", "$defs", "discriminator"}
_SCALAR_TYPES = {"string", "integer", "number", "boolean"}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {
        "name": "ModelRef",
        "type": "string",
        "jsonPath": ".spec.modelRef.name",
        "description": "The Model manifest the evaluation uses, when it names one",
    },
    {"name": "Framework", "type": "string", "jsonPath": ".spec.framework.name"},
    {"name": "Device", "type": "string", "jsonPath": ".spec.hardware.device"},
    {"name": "Scenario", "type": "string", "jsonPath": ".spec.scenario.type"},
    {
        "name": "p50(ms)",
        "type": "number",
        "jsonPath": ".status.summary.p50Ms",
        "description": "Median latency of the first batch size, milliseconds",
    },
    {
        "name": "Throughput",
        "type": "number",
        "jsonPath": ".status.summary.throughput",
        "description": "Samples per second of the first batch size",
    },
    {
        "name": "Metric",
        "type": "string",
        "jsonPath": ".status.summary.metric",
        "description": "The task's primary metric: top1, miou or accuracy",
    },
    {
        "name": "Value",
        "type": "number",
        "jsonPath": ".status.summary.metricValue",
        "description": "The primary metric's value from the accuracy pass",
    },
    {
        "name": "Recorded",
        "type": "string",
        "jsonPath": ".status.record.state",
        "description": "Whether the run is in the results store: Recorded, Pending, NotRecorded",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


SWEEP_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Progress",
        "type": "string",
        "jsonPath": ".status.progress",
        "description": "Children succeeded out of all the matrix defines, e.g. 7/12 Succeeded",
    },
    {
        "name": "Active",
        "type": "integer",
        "jsonPath": ".status.active",
        "description": "Children created and not finished",
    },
    {
        "name": "Failed",
        "type": "integer",
        "jsonPath": ".status.failed",
        "description": "Children that failed",
    },
    {
        "name": "Parallelism",
        "type": "integer",
        "jsonPath": ".spec.parallelism",
        "description": "The most children running at once",
    },
    {
        "name": "Suspended",
        "type": "boolean",
        "jsonPath": ".spec.suspend",
        "description": "Whether creating further children is suspended",
        "priority": 1,
    },
    {
        "name": "Policy",
        "type": "string",
        "jsonPath": ".spec.failurePolicy",
        "description": "What a failed child does to the rest: Continue or Stop",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


MODEL_PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Model",
        "type": "string",
        "jsonPath": ".spec.model.name",
        "description": "The model's name (empty when inherited through basedOn)",
    },
    {"name": "Format", "type": "string", "jsonPath": ".spec.model.format"},
    {"name": "Task", "type": "string", "jsonPath": ".spec.task"},
    {"name": "Dataset", "type": "string", "jsonPath": ".spec.dataset"},
    {
        "name": "BasedOn",
        "type": "string",
        "jsonPath": ".spec.basedOn.name",
        "description": "The Model this one derives from",
    },
    {
        "name": "URI",
        "type": "string",
        "jsonPath": ".spec.model.uri",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


class SchemaError(ValueError):
    """The models cannot be expressed as a structural schema (a bug in the models)."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a $ref (or allOf: [$ref]) keeping the referring node's own keys."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = _resolve(node["allOf"][0], defs)
        return {**inner, **{k: v for k, v in node.items() if k != "allOf"}}
    return node


def _collapse_union(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Optional[X] becomes X; a number-or-'auto' or quantity union becomes int-or-string."""
    options = [_resolve(o, defs) for o in node["anyOf"] if o.get("type") != "null"]
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    if len(options) == 1:
        return _resolve({**options[0], **rest}, defs)
    if rest.get("x-kubernetes-int-or-string") or any(
        o.get("x-kubernetes-int-or-string") for o in options
    ):
        return {**rest, "x-kubernetes-int-or-string": True}
    nested = [o for o in options if "anyOf" in o]
    if len(nested) == 1 and len(options) == 1:
        return _collapse_union({**nested[0], **rest}, defs)
    raise SchemaError(f"cannot express union {options} structurally")


def _default(value: Any) -> Any:
    """Keep scalar and list defaults; an object default becomes {} so the API server applies
    the nested fields' own defaults (the Kubernetes defaulting pattern)."""
    if isinstance(value, dict):
        return {}
    return value


def structural(
    node: dict[str, Any], defs: dict[str, Any], path: str = "", *, defaults: bool = True
) -> dict[str, Any]:
    """Convert one JSON Schema node (pydantic's output) into a structural OpenAPI v3 node."""
    node = _resolve(node, defs)
    if "anyOf" in node:
        if len([o for o in node["anyOf"] if o.get("type") != "null"]) > 1 and any(
            "anyOf" in _resolve(o, defs) for o in node["anyOf"]
        ):
            inner = next(_resolve(o, defs) for o in node["anyOf"] if "anyOf" in _resolve(o, defs))
            node = {**{k: v for k, v in node.items() if k != "anyOf"}, **inner}
        node = _collapse_union(node, defs)
        if "anyOf" in node:
            node = _collapse_union(node, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "properties" or key == "items" or key == "required":
            continue
        if key == "default":
            if (
                defaults
                and value is not None
                and value != []
                and not (isinstance(value, dict) and not path)
            ):
                out["default"] = _default(value)
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "uniqueItems":
            out["x-kubernetes-list-type"] = "set"
        elif key == "maxProperties" or key == "minProperties":
            out[key] = value
        else:
            out[key] = value
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    if "description" in out:
        out["description"] = " ".join(str(out["description"]).split())
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        out["type"] = "object"
        properties = node.get("properties", {})
        if properties:
            converted = {}
            for name, prop in properties.items():
                child = structural(prop, defs, f"{path}.{name}", defaults=defaults)
                if not child.get("description"):
                    raise SchemaError(f"{path}.{name} has no description: add a docstring")
                converted[name] = child
            out["properties"] = converted
            if node.get("required"):
                out["required"] = list(node["required"])
        elif isinstance(node.get("additionalProperties"), dict):
            out["additionalProperties"] = structural(
                node["additionalProperties"], defs, f"{path}.*", defaults=defaults
            )
    elif kind == "array":
        items = structural(node["items"], defs, f"{path}[]", defaults=defaults)
        items.pop("default", None)
        out["items"] = items
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        raise SchemaError(f"{path or '<root>'} has no type")
    first = [k for k in ("description", "type") if k in out]
    return {**{k: out[k] for k in first}, **{k: v for k, v in out.items() if k not in first}}


def _schema_of(model: type[Any], *, defaults: bool) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return structural(schema, schema.get("$defs", {}), defaults=defaults)


def _object_schema(
    description: str, spec: type[Any], spec_description: str, status: type[Any] | None
) -> dict[str, Any]:
    spec_schema = _schema_of(spec, defaults=True)
    spec_schema["description"] = spec_description
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "API version of this object."},
        "kind": {"type": "string", "description": "Kind of this object."},
        # The API server forbids anything but the type on metadata: it validates it itself.
        "metadata": {"type": "object"},
        "spec": spec_schema,
    }
    if status is not None:
        status_schema = _schema_of(status, defaults=False)
        status_schema["description"] = "Observed state, written by the operator."
        properties["status"] = status_schema
    return {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": properties,
    }


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of ModelEvaluation."""
    return _object_schema(
        "A ModelEvaluation evaluates one model with one framework on one dataset under "
        "an MLPerf scenario, and reports accuracy, latency, throughput and the HW/SW stack.",
        EvaluationResourceSpec,
        "What to evaluate: a model (inline, or a Model by modelRef), framework, dataset, "
        "scenario and hardware.",
        EvaluationStatus,
    )


def sweep_openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of EvaluationSweep."""
    return _object_schema(
        "An EvaluationSweep runs a matrix of ModelEvaluations (models x frameworks x hardware "
        f"x scenarios x batch sizes, at most {MAX_CHILDREN}) as its children, a few at a time, "
        "and keeps a table of their results in its status. Deleting it deletes them.",
        SweepSpec,
        "The matrix, the settings every child shares, and how the children are run.",
        SweepStatus,
    )


def model_openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of Model (no status: nothing reconciles a Model)."""
    return _object_schema(
        "A Model is a reusable model manifest: the model file and its formats, the "
        "preprocessing and postprocessing it needs, and labels such as task and dataset. "
        "ModelEvaluations and EvaluationSweeps name it with modelRef; each evaluation "
        "resolves it when it starts and records the version it used.",
        ModelManifestSpec,
        f"The model, its exports, processing and labels; or basedOn another Model whose "
        f"fields this one inherits (chains up to {MAX_BASED_ON} Models, no cycles).",
        None,
    )


def _crd(
    kind: str,
    plural: str,
    short_names: list[str],
    columns: list[dict[str, Any]],
    schema: dict[str, Any],
    *,
    status: bool = True,
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{API_GROUP}",
            "labels": {"app.kubernetes.io/part-of": "mlmodelscope"},
        },
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["mlmodelscope"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    **({"subresources": {"status": {}}} if status else {}),
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def build_crd() -> dict[str, Any]:
    """The ModelEvaluation CustomResourceDefinition as a dict."""
    return _crd(KIND, PLURAL, ["meval"], PRINTER_COLUMNS, openapi_schema())


def build_sweep_crd() -> dict[str, Any]:
    """The EvaluationSweep CustomResourceDefinition as a dict."""
    return _crd(
        SWEEP_KIND, SWEEP_PLURAL, [SWEEP_SHORT_NAME], SWEEP_PRINTER_COLUMNS, sweep_openapi_schema()
    )


def build_model_crd() -> dict[str, Any]:
    """The Model CustomResourceDefinition as a dict."""
    return _crd(
        MODEL_KIND,
        MODEL_PLURAL,
        [MODEL_SHORT_NAME],
        MODEL_PRINTER_COLUMNS,
        model_openapi_schema(),
        status=False,
    )


HEADER = "# Generated by `mlms crd` from mlmodelscope.spec: do not edit by hand.\n"


def render_crds() -> dict[str, str]:
    """File name -> YAML text of every CRD the project defines."""
    return {
        name: HEADER + yaml.safe_dump(crd, sort_keys=False, width=100, allow_unicode=True)
        for name, crd in (
            (CRD_FILENAME, build_crd()),
            (SWEEP_CRD_FILENAME, build_sweep_crd()),
            (MODEL_CRD_FILENAME, build_model_crd()),
        )
    }


def write_crds(directory: Path) -> list[Path]:
    """Write every CRD into ``directory``; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_crds().items():
        target = directory / name
        target.write_text(text)
        written.append(target)
    return written


def stale_crds(directory: Path) -> list[str]:
    """Names of CRD files in ``directory`` that differ from what the models generate."""
    return [
        name
        for name, text in render_crds().items()
        if not (directory / name).is_file() or (directory / name).read_text() != text
    ]
