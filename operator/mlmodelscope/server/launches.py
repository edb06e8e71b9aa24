"""What the Launch form asks for, and the documents it becomes.

A :class:`LaunchForm` names a Model of the server's catalog (``mlms serve --catalog``), the
frameworks to run it in, a scenario, batch sizes, a dataset, a task (a Model's task is only
a label, so a segmentation or image-to-image launch gives ``spec.task`` itself) and where it
runs. :func:`build_documents` turns it into one ModelEvaluation per framework (``modelRef``
to the Model, as ``examples/sweeps/digits-catalog.yaml`` does); with ``kind: sweep``,
:func:`build_sweep` turns it into one EvaluationSweep (models x frameworks x devices x batch
sizes) and its children, as :func:`mlmodelscope.spec.sweep.expand` makes them. Both are
validated by the loader `mlms validate` uses (:func:`mlmodelscope.spec.resources.parse_resource`,
modelRefs resolved against the catalog). Every problem comes back as a :class:`FieldProblem`
located on the form's field (``["body", "batch_sizes", 0]``) and naming the spec path it came
from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mlmodelscope.spec.document import API_VERSION_FULL, KIND, ModelEvaluation, SpecValidationError
from mlmodelscope.spec.manifest import ModelManifest
from mlmodelscope.spec.resources import FileModels, parse_resource
from mlmodelscope.spec.sweep import SWEEP_KIND, EvaluationSweep, SweepChild, expand

FRAMEWORKS: Final = ("onnxruntime", "pytorch", "tensorflow")
SCENARIOS: Final = ("SingleStream", "MultiStream", "Server", "Offline")
DEVICES: Final = ("cpu", "gpu")
DATASETS_BY_NAME: Final = {"digits": {"type": "digits", "split": "test"}}
"""A Model's ``spec.dataset`` label -> the dataset a launch uses when the form gives none."""


class LaunchForm(BaseModel):
    """A launch: one ModelEvaluation per framework, or one EvaluationSweep (``kind: sweep``),
    validated by the spec."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["evaluation", "sweep"] = Field(
        "evaluation",
        description="evaluation: one ModelEvaluation per framework; sweep: one EvaluationSweep "
        "over models x frameworks x devices x batch sizes, one child per combination.",
    )
    model: str = Field(
        min_length=1, max_length=253, description="A Model of the server's catalog (--catalog)."
    )
    models: list[str] = Field(
        [],
        max_length=16,
        description="Sweep only: more catalog Models for spec.matrix.models, after model.",
    )
    frameworks: list[str] = Field(
        min_length=1, max_length=8, description="Frameworks to run it in, one evaluation each."
    )
    devices: list[str] = Field(
        [],
        max_length=2,
        description="Sweep only: spec.matrix.hardware devices (cpu, gpu), one child each; "
        "none: the template's (cpu).",
    )
    scenario: str = Field("SingleStream", max_length=32, description="spec.scenario.type.")
    batch_sizes: list[int] = Field(
        [1],
        min_length=1,
        max_length=64,
        description="spec.scenario.batchSizes; a sweep's spec.matrix.batchSizes (one child each).",
    )
    dataset: dict[str, Any] | None = Field(
        None,
        description='spec.dataset, e.g. {"type": "digits", "split": "test"}; default: the '
        "Model's dataset where the agent knows it by name (digits).",
    )
    task: dict[str, Any] | None = Field(
        None,
        description='spec.task by its spec names, e.g. {"type": "segmentation", "numClasses": '
        '4} with a masks dataset, or {"type": "image-to-image"} with a pairs dataset; '
        "default: classification. A sweep's template gets it.",
    )
    hardware: dict[str, Any] | None = Field(
        None,
        description="spec.hardware by its spec names (device, gpus, nodeSelector, tolerations, "
        "resources, ...), e.g. to run on a GPU or a node pool; a sweep's template gets it.",
    )
    scenario_settings: dict[str, Any] = Field(
        {},
        description="Other spec.scenario fields, by their spec names (warmup, minQueryCount, "
        "minDuration, ...).",
    )
    name: str | None = Field(
        None,
        max_length=253,
        description="Prefix of the evaluations' names (default: the model's): NAME-FRAMEWORK; "
        "a sweep's name (its children: NAME-MODEL-FRAMEWORK[-DEVICE]-bBATCH).",
    )


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with the form: ``loc`` as FastAPI reports it, and what is wrong."""

    loc: tuple[str | int, ...]
    message: str


@dataclass(frozen=True)
class BuiltEvaluation:
    """One generated document, valid, with the fields the launch queue lists."""

    name: str
    model: str
    framework: str
    document: dict[str, Any]
    evaluation: ModelEvaluation


class InvalidLaunchError(ValueError):
    """The form does not make valid evaluations; ``problems`` names every field at fault."""

    def __init__(self, problems: Sequence[FieldProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{'.'.join(map(str, p.loc))}: {p.message}" for p in problems))


def evaluation_name(form: LaunchForm, framework: str) -> str:
    return f"{form.name or form.model}-{framework}"


def document_for(form: LaunchForm, framework: str, dataset: dict[str, Any]) -> dict[str, Any]:
    """The ModelEvaluation of ``form`` in ``framework``, as `mlms run --models CATALOG` reads
    it."""
    scenario = {"type": form.scenario, "batchSizes": list(form.batch_sizes)}
    scenario.update(form.scenario_settings)
    spec: dict[str, Any] = {
        "modelRef": {"name": form.model},
        "framework": {"name": framework},
        "dataset": dataset,
        **({"task": form.task} if form.task is not None else {}),
        "scenario": scenario,
    }
    if form.hardware is not None:
        spec["hardware"] = form.hardware
    return {
        "apiVersion": API_VERSION_FULL,
        "kind": KIND,
        "metadata": {"name": evaluation_name(form, framework)},
        "spec": spec,
    }


def default_dataset(form: LaunchForm, catalog: FileModels) -> dict[str, Any] | None:
    """The form's dataset, else the one the Model names when the agent knows it (digits)."""
    if form.dataset is not None:
        return form.dataset
    manifest: ModelManifest | None = catalog.models.get(form.model)
    label = manifest.spec.dataset if manifest is not None else None
    known = DATASETS_BY_NAME.get(label or "")
    return dict(known) if known is not None else None


def build_documents(form: LaunchForm, catalog: FileModels) -> list[BuiltEvaluation]:
    """One valid ModelEvaluation per framework of ``form``; raises :class:`InvalidLaunchError`
    naming every problem of every document (each once)."""
    problems: dict[tuple[tuple[str | int, ...], str], None] = {}
    dataset = default_dataset(form, catalog)
    if form.model not in catalog.models:
        known = ", ".join(sorted(catalog.models)) or "none: start mlms serve with --catalog"
        problems[(("body", "model"), f"no Model {form.model!r} in the catalog ({known})")] = None
    elif dataset is None:
        problems[(("body", "dataset"), _no_dataset(form, catalog))] = None
    seen: set[str] = set()
    for index, framework in enumerate(form.frameworks):
        if framework in seen:
            problems[(("body", "frameworks", index), f"{framework} is given twice")] = None
        seen.add(framework)
    for field in ("models", "devices"):
        if getattr(form, field):
            problems[(("body", field), 'only for a sweep (kind: "sweep")')] = None
    if problems:
        raise InvalidLaunchError([FieldProblem(loc, msg) for loc, msg in problems])
    assert dataset is not None
    built = []
    for index, framework in enumerate(form.frameworks):
        document = document_for(form, framework, dataset)
        try:
            resource = parse_resource(document, f"launch ({framework})", catalog)
        except SpecValidationError as exc:
            for problem in exc.problems:
                loc = form_location(problem.path, index)
                if problem.path == "spec.modelRef.name":  # the Model is known: no format for
                    loc = ("body", "frameworks", index)  # this framework
                problems[(loc, f"{problem.path}: {problem.message}")] = None
            continue
        assert isinstance(resource, ModelEvaluation)
        name = document["metadata"]["name"]
        built.append(BuiltEvaluation(name, form.model, framework, document, resource))
    if problems:
        raise InvalidLaunchError([FieldProblem(loc, msg) for loc, msg in problems])
    return built


@dataclass(frozen=True)
class BuiltSweep:
    """One generated EvaluationSweep, valid, and its children as the spec expands them."""

    name: str
    document: dict[str, Any]
    sweep: EvaluationSweep
    children: list[SweepChild]


def entry_name(model: str) -> str:
    """A Model's name as a ``spec.matrix.models`` entry name (a DNS label of at most 40)."""
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:40].rstrip("-") or "model"


def sweep_document(form: LaunchForm, dataset: dict[str, Any]) -> dict[str, Any]:
    """The EvaluationSweep of ``form``, as a GitOps user would commit it: a modelRef entry per
    Model (each brings its own processing, as ``examples/sweeps/digits-catalog.yaml``), the
    frameworks, devices and batch sizes as axes, the scenario and dataset in the template."""
    matrix: dict[str, Any] = {
        "models": [
            {"name": entry_name(model), "modelRef": {"name": model}}
            for model in (form.model, *form.models)
        ],
        "frameworks": list(form.frameworks),
    }
    if form.devices:
        matrix["hardware"] = [{"device": device} for device in form.devices]
    matrix["batchSizes"] = list(form.batch_sizes)
    return {
        "apiVersion": API_VERSION_FULL,
        "kind": SWEEP_KIND,
        "metadata": {"name": form.name or form.model},
        "spec": {
            "matrix": matrix,
            "template": {
                "dataset": dataset,
                **({"task": form.task} if form.task is not None else {}),
                "scenario": {"type": form.scenario, **form.scenario_settings},
                **({"hardware": form.hardware} if form.hardware is not None else {}),
            },
        },
    }


def build_sweep(form: LaunchForm, catalog: FileModels) -> BuiltSweep:
    """One valid EvaluationSweep of ``form`` (``kind: sweep``) and its children, in matrix
    order; raises :class:`InvalidLaunchError` naming every problem (each once)."""
    problems: dict[tuple[tuple[str | int, ...], str], None] = {}
    known = ", ".join(sorted(catalog.models)) or "none: start mlms serve with --catalog"
    for loc, model in _model_fields(form):
        if model not in catalog.models:
            problems[(loc, f"no Model {model!r} in the catalog ({known})")] = None
    dataset = default_dataset(form, catalog)
    if not problems and dataset is None:
        problems[(("body", "dataset"), _no_dataset(form, catalog))] = None
    if problems:
        raise InvalidLaunchError([FieldProblem(loc, msg) for loc, msg in problems])
    assert dataset is not None
    document = sweep_document(form, dataset)
    try:
        resource = parse_resource(document, "launch (sweep)", catalog)
    except SpecValidationError as exc:
        found = [
            FieldProblem(sweep_location(p.path, form), f"{p.path}: {p.message}")
            for p in exc.problems
        ]
        raise InvalidLaunchError(list(dict.fromkeys(found))) from None
    assert isinstance(resource, EvaluationSweep)
    children = expand(resource, catalog.lookup())
    return BuiltSweep(resource.metadata.name, document, resource, children)


def _model_fields(form: LaunchForm) -> list[tuple[tuple[str | int, ...], str]]:
    """(form field, Model name) of every Model of a sweep, in matrix order."""
    return [(("body", "model"), form.model)] + [
        (("body", "models", index), model) for index, model in enumerate(form.models)
    ]


def sweep_location(path: str, form: LaunchForm) -> tuple[str | int, ...]:
    """The form field a problem of the sweep at ``path`` belongs to."""
    parts = _parts(path)
    if parts[:1] == ["metadata"]:
        return ("body", "name")
    if parts[:2] == ["spec", "template"]:
        return form_location("spec" + _path_of(parts[2:]), 0)
    if parts[:2] != ["spec", "matrix"] or len(parts) < 3:
        return ("body",)
    axis, index = parts[2], parts[3:4]
    if axis == "models":
        fields = _model_fields(form)
        if index and isinstance(index[0], int) and index[0] < len(fields):
            return fields[index[0]][0]
        return ("body", "models")
    field = {"frameworks": "frameworks", "hardware": "devices", "batchSizes": "batch_sizes"}
    return ("body", field.get(str(axis), str(axis)), *index)


def _no_dataset(form: LaunchForm, catalog: FileModels) -> str:
    manifest = catalog.models.get(form.model)
    label = manifest.spec.dataset if manifest is not None else None
    known = ", ".join(sorted(DATASETS_BY_NAME))
    about = f"Model {form.model} is for dataset {label!r}" if label else "no default dataset"
    return (
        f"required: {about}, which a launch fills in only for {known}; give spec.dataset, "
        'e.g. {"type": "imagefolder", "path": "/data/val"}'
    )


_PATH_PART = re.compile(r"\.?([A-Za-z0-9_-]+)|\[(\d+)\]|\[([^\]]*)\]")


def _parts(path: str) -> list[str | int]:
    """``spec.scenario.batchSizes[0]`` -> ``["spec", "scenario", "batchSizes", 0]``."""
    parts: list[str | int] = []
    for name, index, quoted in _PATH_PART.findall(path):
        if name:
            parts.append(name)
        elif index:
            parts.append(int(index))
        else:
            parts.append(quoted)
    return parts


_NAME: Final = re.compile(r"[A-Za-z0-9_-]+")


def _path_of(parts: Sequence[str | int]) -> str:
    """A path's tail as :func:`_parts` reads it back: ``["scenario", "batchSizes", 0]`` ->
    ``.scenario.batchSizes[0]`` (an index stays an index, a key with dots stays one key)."""
    return "".join(
        f".{p}" if isinstance(p, str) and _NAME.fullmatch(p) else f"[{p}]" for p in parts
    )


def form_location(path: str, framework_index: int) -> tuple[str | int, ...]:
    """The form field a spec problem at ``path`` belongs to."""
    parts = _parts(path)
    head, rest = parts[:2], parts[2:]
    if parts[:1] == ["metadata"]:
        return ("body", "name")
    if head == ["spec", "framework"]:
        return ("body", "frameworks", framework_index)
    if head == ["spec", "scenario"]:
        if rest[:1] == ["type"]:
            return ("body", "scenario")
        if rest[:1] == ["batchSizes"]:
            return ("body", "batch_sizes", *rest[1:2])
        return ("body", "scenario_settings", *rest)
    if head == ["spec", "dataset"]:
        return ("body", "dataset", *rest)
    if head == ["spec", "hardware"]:
        return ("body", "hardware", *rest)
    if head == ["spec", "task"]:
        return ("body", "task", *rest)
    if head and head[0] == "spec" and len(head) > 1 and head[1] in _FROM_THE_MODEL:
        return ("body", "model")
    return ("body", *parts) if parts else ("body",)


_FROM_THE_MODEL: Final = {"modelRef", "model", "preprocessing", "postprocessing"}
"""Spec sections a launch takes from the catalog's Model: their problems are the model's."""


def as_yaml(documents: Iterable[dict[str, Any]]) -> str:
    """The documents as one YAML stream, in the order of the form's frameworks."""
    return yaml.safe_dump_all(list(documents), sort_keys=False, default_flow_style=None)
