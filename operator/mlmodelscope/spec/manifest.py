"""The Model kind: a reusable model manifest, and how a ``modelRef`` resolves to it.

A Model holds what every evaluation of one model shares: the model block (URI, digest,
format, tensors), the same network in other formats (exports), the preprocessing and
postprocessing it needs, and labels such as task and dataset. ModelEvaluations and sweep
entries name it with ``modelRef`` instead of repeating it. A Model may be ``basedOn`` another
and replace some of its fields (a variant with other preprocessing, a fine-tuned copy with
another URI); resolution walks that chain, refusing unknown names and cycles.

Resolution is a pure function of a lookup (name -> Model or None): the operator looks Models
up in the API server, ``mlms run`` and ``mlms validate`` in the files they were given.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mlmodelscope.spec.base import Rule, SpecModel
from mlmodelscope.spec.document import (
    ModelEvaluationResource,
    ObjectMeta,
    Problem,
    SpecValidationError,
    check_kind,
    problems_from_validation_error,
)
from mlmodelscope.spec.evaluation import (
    EXPORT_RULES,
    FORMATS_BY_FRAMEWORK,
    FrameworkName,
    ModelExport,
    ModelReference,
    ModelSource,
    PostprocessStep,
    PreprocessStep,
)

MODEL_KIND: Final = "Model"
MODEL_PLURAL: Final = "models"
MODEL_SHORT_NAME: Final = "mlmodel"
MAX_BASED_ON: Final = 8
"""The longest basedOn chain resolution follows; a longer one is refused as a likely mistake."""
ANNOTATION_MANIFEST: Final = "mlmodelscope.io/model-manifest"
"""On a resolved ModelEvaluation document (the spec the agent loads): JSON of the
:class:`~mlmodelscope.contract.result.ModelManifestRef` the run records."""

LABEL_TEXT = r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$"


class ModelManifestSpec(SpecModel):
    """A reusable model manifest: the model, its other formats, its processing and labels."""

    model: ModelSource | None = None
    """The model and where to fetch it (the fields of a ModelEvaluation's spec.model).
    Required unless basedOn names a Model to take it from."""

    exports: Annotated[list[ModelExport], Field(max_length=4)] = []
    """The same network in other formats, for frameworks that cannot load model.format
    (e.g. TorchScript for pytorch beside ONNX for onnxruntime): an evaluation uses model.uri
    when its framework loads model.format, otherwise the first export it loads."""

    preprocessing: Annotated[list[PreprocessStep] | None, Field(max_length=32)] = None
    """Per-sample steps from dataset sample to model input, as the model was trained."""

    postprocessing: Annotated[list[PostprocessStep] | None, Field(max_length=16)] = None
    """Steps from model output to predictions."""

    task: Annotated[str | None, Field(max_length=63, pattern=LABEL_TEXT)] = None
    """What the model does, e.g. image-classification, text-classification, fill-mask."""

    dataset: Annotated[str | None, Field(max_length=63, pattern=LABEL_TEXT)] = None
    """The dataset the model was trained on or is meant to be evaluated with, e.g.
    imagenet-1k, digits."""

    description: Annotated[str, Field(max_length=4096)] = ""
    """Free text: provenance, licence, how the file was built and hashed."""

    based_on: ModelReference | None = None
    """Another Model in the same namespace this one derives from: every field set here
    replaces that Model's, the others are inherited (exports only while model is inherited).
    Chains are followed up to 8 Models; a cycle is refused."""

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            cel="has(self.model) || has(self.basedOn)",
            message="set model, or basedOn to take it from another Model",
            field="model",
            check=lambda m: m.model is not None or m.based_on is not None,
            reason="FieldValueRequired",
        ),
        *EXPORT_RULES,
    )


class ModelManifest(BaseModel):
    """A Model resource, as stored in the cluster or written in a file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["mlmodelscope.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Model"]
    metadata: ObjectMeta
    spec: ModelManifestSpec


def parse_model(document: Any, source: str = "<document>") -> ModelManifest:
    """Validate one Model document, raising SpecValidationError that names every bad field."""
    document = check_kind(document, source, MODEL_KIND)
    try:
        return ModelManifest.model_validate(document)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc, ModelManifest)
        raise SpecValidationError(source, problems, MODEL_KIND) from None


# ---------------------------------------------------------------------------------- resolving


ModelLookup = Callable[[str], "ModelManifest | None"]
"""Finds a Model by name in the namespace being resolved; None when there is none."""

NO_MODELS: Final = "no Models were given"
"""What a lookup over nothing says (``mlms validate`` or ``mlms run`` without Model files)."""


class UnresolvedModelError(ValueError):
    """A modelRef or basedOn cannot be resolved; ``problem`` says where and what to do."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


@dataclass(frozen=True)
class ResolvedModel:
    """A Model with its basedOn chain applied: everything an evaluation takes from it."""

    chain: tuple[ModelManifest, ...]
    """The Model named first, then the Models it is based on, in order."""
    model: ModelSource
    exports: tuple[ModelExport, ...]
    preprocessing: list[PreprocessStep] | None
    postprocessing: list[PostprocessStep] | None
    task: str | None
    dataset: str | None

    @property
    def name(self) -> str:
        return self.chain[0].metadata.name

    def model_for(self, framework: FrameworkName) -> dict[str, Any] | None:
        """The spec.model document for ``framework``: the model itself, or the first export
        the framework loads (with that export's URI, format and digest); None if none."""
        loads = FORMATS_BY_FRAMEWORK[framework]
        model = self.model.model_dump(mode="json", by_alias=True, exclude_unset=True)
        if self.model.format in loads:
            return model
        for export in self.exports:
            if export.format in loads:
                model.pop("sha256", None)
                exported = export.model_dump(mode="json", by_alias=True, exclude_unset=True)
                return {**model, **exported}
        return None

    def formats(self) -> list[str]:
        return [self.model.format.value, *(e.format.value for e in self.exports)]

    def provenance(self, namespace: str | None, sources: Mapping[str, str]) -> dict[str, Any]:
        """The run's record of what it resolved (contract ``ModelManifestRef``, as JSON)."""
        chain = []
        for manifest in self.chain:
            extra = manifest.metadata.model_extra or {}
            entry: dict[str, Any] = {"name": manifest.metadata.name}
            if manifest.metadata.uid:
                entry["uid"] = manifest.metadata.uid
            if extra.get("resourceVersion"):
                entry["resource_version"] = str(extra["resourceVersion"])
            if manifest.metadata.name in sources:
                entry["source"] = sources[manifest.metadata.name]
            chain.append(entry)
        document: dict[str, Any] = {"name": self.name, "chain": chain}
        if namespace:
            document["namespace"] = namespace
        for key in ("task", "dataset"):
            if getattr(self, key):
                document[key] = getattr(self, key)
        return document


def _missing(name: str, chain: list[str], field: str, where: str | None) -> Problem:
    """The not-found problem. ``where`` None: the caller does not know where the Models came
    from (a sweep's entries, checked by `mlms validate` and by the operator alike), so the
    message says how to give a Model in both places."""
    if chain:
        via = " is basedOn ".join(f"{n!r}" for n in [*chain, name])
        found = where or "not found"
        return Problem(field, f"Model {via}, and Model {name!r} {found}; create it or fix basedOn")
    if where is None:
        return Problem(
            field,
            f"Model {name!r} not found; create it in the cluster (e.g. kubectl apply -f "
            "examples/catalog/), or pass the file or folder that defines it to mlms validate "
            "or mlms run (--models DIR), or correct the name",
        )
    return Problem(
        field,
        f"Model {name!r} {where}; create it (e.g. kubectl apply -f examples/catalog/) or "
        "correct the name",
    )


def resolve_model(
    name: str, lookup: ModelLookup, field: str = "spec.modelRef.name", where: str | None = None
) -> ResolvedModel:
    """Follow ``name`` and its basedOn chain; raises UnresolvedModelError naming ``field``
    for an unknown Model, a cycle, or a chain longer than MAX_BASED_ON. ``where`` finishes
    the not-found message (None: "not found", with both the cluster's and the CLI's fix)."""
    chain: list[ModelManifest] = []
    current = name
    while True:
        names = [m.metadata.name for m in chain]
        if current in names:
            loop = " -> ".join([*names[names.index(current) :], current])
            raise UnresolvedModelError(
                Problem(
                    field,
                    f"Model {name!r}: basedOn forms a cycle ({loop}); make one of them set "
                    "model instead of basedOn",
                )
            )
        if len(chain) == MAX_BASED_ON:
            raise UnresolvedModelError(
                Problem(
                    field,
                    f"Model {name!r}: the basedOn chain is longer than {MAX_BASED_ON} Models "
                    f"({' -> '.join(names)} -> ...); base variants on the original model",
                )
            )
        found = lookup(current)
        if found is None:
            raise UnresolvedModelError(_missing(current, names, field, where))
        chain.append(found)
        if found.spec.based_on is None:
            break
        current = found.spec.based_on.name
    return _merge(tuple(chain))


def _merge(chain: tuple[ModelManifest, ...]) -> ResolvedModel:
    """Apply the chain from its root: each derived Model replaces the fields it sets."""
    model: ModelSource | None = None
    exports: tuple[ModelExport, ...] = ()
    fields: dict[str, Any] = {
        "preprocessing": None,
        "postprocessing": None,
        "task": None,
        "dataset": None,
    }
    for manifest in reversed(chain):
        spec = manifest.spec
        if spec.model is not None:
            model, exports = spec.model, tuple(spec.exports)
        elif "exports" in spec.model_fields_set:
            exports = tuple(spec.exports)
        for key in fields:
            if getattr(spec, key) is not None:
                fields[key] = getattr(spec, key)
    assert model is not None, "the root of a chain has a model (rule of ModelManifestSpec)"
    return ResolvedModel(chain=chain, model=model, exports=exports, **fields)


def lookup_in(models: Mapping[str, ModelManifest]) -> ModelLookup:
    """A lookup over Models already read (from files)."""
    return models.get


def unresolvable(_: str) -> ModelManifest | None:
    """The lookup when no Models were given: every name is unknown."""
    return None


def framework_mismatch(resolved: ResolvedModel, framework: FrameworkName, field: str) -> Problem:
    loads = ", ".join(sorted(f.value for f in FORMATS_BY_FRAMEWORK[framework]))
    return Problem(
        field,
        f"Model {resolved.name!r} is available as {', '.join(resolved.formats())}, and "
        f"framework {framework.value!r} loads {loads}: add an export in that format to the "
        "Model, or use another framework",
    )


def resolve_evaluation(
    document: Any,
    lookup: ModelLookup,
    source: str,
    where: str | None = None,
    sources: Mapping[str, str] | None = None,
) -> Any:
    """``document`` with spec.modelRef replaced by what the Model holds: spec.model (or the
    export the framework loads), preprocessing and postprocessing unless the evaluation sets
    them, and the annotation recording which Models at which versions. Documents without a
    modelRef come back unchanged. Raises SpecValidationError naming the field at fault.

    ``where`` finishes the not-found message (e.g. "not found in namespace 'default'");
    ``sources`` maps Model names to the files they came from (local runs)."""
    spec = document.get("spec") if isinstance(document, dict) else None
    if not isinstance(spec, dict) or "modelRef" not in spec:
        return document
    try:
        resource = ModelEvaluationResource.model_validate(document)
    except ValidationError as exc:
        problems = problems_from_validation_error(exc, ModelEvaluationResource)
        raise SpecValidationError(source, problems) from None
    reference = resource.spec.model_ref
    assert reference is not None, "modelRef is set (checked above)"
    try:
        resolved = resolve_model(reference.name, lookup, where=where)
    except UnresolvedModelError as exc:
        raise SpecValidationError(source, [exc.problem]) from None
    model = resolved.model_for(resource.spec.framework.name)
    if model is None:
        problem = framework_mismatch(resolved, resource.spec.framework.name, "spec.modelRef.name")
        raise SpecValidationError(source, [problem])
    resolved_spec = {k: v for k, v in spec.items() if k != "modelRef"}
    resolved_spec = {"model": model, **resolved_spec}
    for key in ("preprocessing", "postprocessing"):
        steps = getattr(resolved, key)
        if key not in spec and steps is not None:
            resolved_spec[key] = [
                s.model_dump(mode="json", by_alias=True, exclude_unset=True) for s in steps
            ]
    metadata = dict(document.get("metadata") or {})
    record = resolved.provenance(metadata.get("namespace"), sources or {})
    annotations = dict(metadata.get("annotations") or {})
    annotations[ANNOTATION_MANIFEST] = json.dumps(record, sort_keys=True)
    metadata["annotations"] = annotations
    return {**document, "metadata": metadata, "spec": resolved_spec}
