"""ModelEvaluation documents: the same YAML for `kubectl apply` and for `mlms run`.

Loading turns pydantic's errors into one line per problem that names the field path the way a
Kubernetes user writes it (``spec.scenario.targetQPS``) and says what is accepted.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlmodelscope import API_GROUP, API_VERSION
from mlmodelscope.spec.base import SpecError, quoted
from mlmodelscope.spec.evaluation import (
    FORMATS_BY_FRAMEWORK,
    NAME_PATTERN,
    Device,
    EvaluationResourceSpec,
    EvaluationSpec,
)
from mlmodelscope.spec.status import EvaluationStatus

KIND = "ModelEvaluation"
PLURAL = "modelevaluations"
API_VERSION_FULL = f"{API_GROUP}/{API_VERSION}"


class ObjectMeta(BaseModel):
    """The parts of metadata the project reads; everything else Kubernetes sets is kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=NAME_PATTERN)]
    namespace: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    generation: int | None = None
    uid: str | None = None


class ModelEvaluation(BaseModel):
    """A ModelEvaluation resource, as stored in the cluster or written in a file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["mlmodelscope.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ModelEvaluation"]
    metadata: ObjectMeta
    spec: EvaluationSpec
    status: EvaluationStatus | None = None


class ModelEvaluationResource(BaseModel):
    """A ModelEvaluation as written, before its spec.modelRef (if any) is resolved: the
    schema of the CRD. Everything that runs reads the resolved :class:`ModelEvaluation`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["mlmodelscope.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["ModelEvaluation"]
    metadata: ObjectMeta
    spec: EvaluationResourceSpec
    status: EvaluationStatus | None = None


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document: where (a field path) and what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecValidationError(ValueError):
    """A document failed validation; ``problems`` names every field at fault."""

    def __init__(self, source: str, problems: Sequence[Problem], kind: str = KIND) -> None:
        self.source = source
        self.problems = list(problems)
        self.kind = kind
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{source} is not a valid {kind}:\n{lines}")


@dataclass(frozen=True)
class LoadedEvaluation:
    """A validated document and where it came from (relative model paths resolve there)."""

    evaluation: ModelEvaluation
    source: str
    base_dir: Path | None


# ----------------------------------------------------------------------------- error formatting


_PLAIN_KEY = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_./]{0,252}")
"""A key a path shows as written: a field name, or a label key such as nvidia.com/gpu.product."""


def field_path(loc: Iterable[int | str]) -> str:
    """``spec.model.inputs[0].shape``; a key that is no plain name (an unknown field called
    ``../x``, a URI, a megabyte of text) is shown quoted in brackets, clipped, never a URI."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            path += f"[{quoted(part)}]"
        else:
            path += f".{part}" if path else part
    return path


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside Optional[...], list[...] or Annotated[...], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, Annotated, dict):
        for arg in get_args(annotation):
            found = _unwrap_model(arg)
            if found is not None:
                return found
    return None


def _model_at(root: type[BaseModel], loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model class that owns the field at ``loc`` (walking aliases and list indices)."""
    current: type[BaseModel] | None = root
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in current.model_fields.items() if (f.alias or n) == part or n == part),
            None,
        )
        if field is None:
            return None
        current = _unwrap_model(field.annotation)
    return current


def _known_fields(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _problem_from_error(error: Any, root: type[BaseModel], prefix: str) -> Problem:
    loc = [p for p in error["loc"] if not (isinstance(p, str) and "[" in p)]
    path = field_path([*([prefix] if prefix else []), *loc])
    kind = error["type"]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, SpecError):
        path = f"{path}.{cause.field}" if cause.field else path
        return Problem(path, cause.message)
    if kind == "extra_forbidden":
        owner = _model_at(root, loc[:-1])
        name = str(loc[-1])
        if owner is not None:
            known = _known_fields(owner)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return Problem(path, f"unknown field; {hint}fields allowed here: {', '.join(known)}")
        return Problem(path, "unknown field")
    if kind == "missing":
        return Problem(path, "required field is missing")
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    return Problem(path, message)


def problems_from_validation_error(
    exc: ValidationError, root: type[BaseModel] = ModelEvaluation, prefix: str = ""
) -> list[Problem]:
    """One Problem per pydantic error, de-duplicated (union members repeat themselves)."""
    seen: dict[str, Problem] = {}
    for error in exc.errors():
        problem = _problem_from_error(error, root, prefix)
        seen.setdefault(str(problem), problem)
    return list(seen.values())


# ----------------------------------------------------------------------------- semantic checks


def semantic_problems(spec: EvaluationSpec) -> list[Problem]:
    """Problems the CRD schema cannot express; the operator ends such evaluations in
    Failed/InvalidSpec and ``mlms run`` refuses them before loading anything."""
    problems = []
    allowed = FORMATS_BY_FRAMEWORK[spec.framework.name]
    if spec.model.format not in allowed:
        loaders = [f.value for f, fmts in FORMATS_BY_FRAMEWORK.items() if spec.model.format in fmts]
        problems.append(
            Problem(
                "spec.model.format",
                f"{spec.model.format.value!r} cannot be loaded by framework "
                f"{spec.framework.name.value!r}, which loads "
                f"{', '.join(sorted(f.value for f in allowed))}; use framework "
                f"{' or '.join(loaders)} or export the model to a supported format",
            )
        )
    provider = spec.framework.execution_provider
    if provider and provider != "CPUExecutionProvider" and spec.hardware.device == Device.CPU:
        problems.append(
            Problem(
                "spec.framework.executionProvider",
                f"{provider} needs hardware.device: gpu; use CPUExecutionProvider on cpu",
            )
        )
    return problems


# ----------------------------------------------------------------------------- loading


def check_kind(document: Any, source: str, kind: str) -> dict[str, Any]:
    """``document`` as a mapping of ``kind`` (apiVersion mlmodelscope.io/v1alpha1), before
    its fields are validated; SpecValidationError naming kind or apiVersion otherwise."""
    if not isinstance(document, dict):
        raise SpecValidationError(source, [Problem("", "expected a mapping (a YAML object)")], kind)
    found, api_version = document.get("kind"), document.get("apiVersion")
    if found != kind or api_version != API_VERSION_FULL:
        raise SpecValidationError(
            source,
            [
                Problem(
                    "kind" if found != kind else "apiVersion",
                    f"expected apiVersion: {API_VERSION_FULL} and kind: {kind}, "
                    f"got apiVersion: {api_version} and kind: {found}",
                )
            ],
            kind,
        )
    return document


def parse_evaluation(document: Any, source: str = "<document>") -> ModelEvaluation:
    """Validate one parsed document, raising SpecValidationError that names every bad field."""
    document = check_kind(document, source, KIND)
    spec = document.get("spec")
    if isinstance(spec, dict) and ("modelRef" in spec or "model" not in spec):
        return _unresolved(document, source)
    try:
        evaluation = ModelEvaluation.model_validate(document)
    except ValidationError as exc:
        raise SpecValidationError(source, problems_from_validation_error(exc)) from None
    semantic = semantic_problems(evaluation.spec)
    if semantic:
        raise SpecValidationError(source, semantic)
    return evaluation


def _unresolved(document: dict[str, Any], source: str) -> ModelEvaluation:
    """A document that names a Model (or no model at all): report its own problems first,
    then that the reference needs resolving (callers that can resolve do so first)."""
    try:
        ModelEvaluationResource.model_validate(document)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc, ModelEvaluationResource)
        raise SpecValidationError(source, problems) from None
    name = (document["spec"].get("modelRef") or {}).get("name")
    raise SpecValidationError(
        source,
        [
            Problem(
                "spec.modelRef",
                f"names Model {name!r}, which was not given: pass the file that defines it "
                "too (mlms validate|run --models FILE_OR_DIR), or inline spec.model",
            )
        ],
    )


def iter_documents(text: str) -> Iterator[Any]:
    """Non-empty YAML documents in ``text``, expanding ``kind: List`` items."""
    for document in yaml.safe_load_all(text):
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind") == "List":
            yield from document.get("items") or []
        else:
            yield document


def read_documents(file: Path, expected: str = KIND) -> list[Any]:
    """The YAML documents of ``file``; SpecValidationError when it cannot be read, is not
    YAML, or holds no document (``expected`` names the kinds it should hold)."""
    try:
        text = file.read_text()
    except OSError as exc:
        raise SpecValidationError(
            str(file), [Problem("", f"cannot read the file: {exc}")]
        ) from None
    try:
        documents = list(iter_documents(text))
    except yaml.YAMLError as exc:
        raise SpecValidationError(str(file), [Problem("", f"not valid YAML: {exc}")]) from None
    except RecursionError:  # PyYAML composes nodes recursively: ~1000 nested [ or { end it
        problem = Problem("", "not readable: its YAML is nested too deeply (hundreds of levels)")
        raise SpecValidationError(str(file), [problem]) from None
    if not documents:
        raise SpecValidationError(str(file), [Problem("", f"no {expected} document found")])
    return documents


def load_evaluations(path: Path | str) -> list[LoadedEvaluation]:
    """Every ModelEvaluation in a YAML file (multi-document files allowed), validated."""
    file = Path(path)
    documents = read_documents(file)
    loaded = []
    for index, document in enumerate(documents):
        name = document.get("metadata", {}).get("name") if isinstance(document, dict) else None
        where = f"{file} (document {index + 1}{f', {name}' if name else ''})"
        evaluation = parse_evaluation(document, where)
        loaded.append(LoadedEvaluation(evaluation, where, file.resolve().parent))
    return loaded
