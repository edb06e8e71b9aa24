"""Files that hold any of the project's kinds (ModelEvaluation, EvaluationSweep, Model),
validated document by document: what `mlms validate` reads, and what `mlms run` loads.

A ``modelRef`` resolves against the Models of the files given (:class:`FileModels`): the
same file, the other files of the command line, and ``--models`` files or folders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlmodelscope.spec.document import (
    API_VERSION_FULL,
    KIND,
    LoadedEvaluation,
    ModelEvaluation,
    Problem,
    SpecValidationError,
    parse_evaluation,
    read_documents,
)
from mlmodelscope.spec.manifest import (
    MODEL_KIND,
    NO_MODELS,
    ModelLookup,
    ModelManifest,
    UnresolvedModelError,
    parse_model,
    resolve_evaluation,
    resolve_model,
)
from mlmodelscope.spec.sweep import SWEEP_KIND, EvaluationSweep, expand, parse_sweep

KINDS = (KIND, SWEEP_KIND, MODEL_KIND)
YAML_SUFFIXES = (".yaml", ".yml")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")

Resource = ModelEvaluation | EvaluationSweep | ModelManifest


@dataclass(frozen=True)
class CheckedDocument:
    """One document of a file: its resource when valid, otherwise the error naming every
    problem. ``children`` counts the ModelEvaluations a valid sweep creates."""

    source: str
    resource: Resource | None
    error: SpecValidationError | None
    children: int = 0


def yaml_files(paths: Iterable[Path | str]) -> list[Path]:
    """The files named, with every .yaml/.yml file under a named folder (sorted)."""
    files: list[Path] = []
    seen: set[Path] = set()
    for path in map(Path, paths):
        found = sorted(p for p in path.rglob("*") if p.suffix in YAML_SUFFIXES)
        for file in found if path.is_dir() else [path]:
            if file.resolve() not in seen:  # a file named twice is read once
                seen.add(file.resolve())
                files.append(file)
    return files


def _where(file: Path, index: int, document: Any) -> str:
    metadata = document.get("metadata") if isinstance(document, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{file} (document {index + 1}{f', {name}' if name else ''})"


def _documents(file: Path) -> Iterator[tuple[str, Any]]:
    for index, document in enumerate(read_documents(file, " or ".join(KINDS))):
        yield _where(file, index, document), document


def _absolute_uris(document: dict[str, Any], base: Path) -> dict[str, Any]:
    """A Model read from a file: relative model and export paths resolve against that file's
    folder (as an evaluation's do against its own), wherever the Model is used from."""
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return document
    spec = dict(spec)
    for key in ("model",):
        if isinstance(spec.get(key), dict):
            spec[key] = _absolute(spec[key], base)
    if isinstance(spec.get("exports"), list):
        spec["exports"] = [
            _absolute(e, base) if isinstance(e, dict) else e for e in spec["exports"]
        ]
    return {**document, "spec": spec}


def _absolute(block: dict[str, Any], base: Path) -> dict[str, Any]:
    uri = block.get("uri")
    if not isinstance(uri, str) or _SCHEME.match(uri) or uri.startswith("/"):
        return block
    return {**block, "uri": str((base / uri).resolve())}


@dataclass
class FileModels:
    """Models read from files: a lookup for ``modelRef`` and ``basedOn``, and the problems
    of the Model documents that did not validate or repeat a name."""

    models: dict[str, ModelManifest] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    errors: list[SpecValidationError] = field(default_factory=list)

    def add(self, document: Any, source: str, base: Path) -> ModelManifest | None:
        """Validate one Model document and keep it (None when invalid or repeated)."""
        if isinstance(document, dict):
            document = _absolute_uris(document, base)
        try:
            manifest = parse_model(document, source)
        except SpecValidationError as exc:
            self.errors.append(exc)
            return None
        name = manifest.metadata.name
        if name in self.models:
            problem = Problem(
                "metadata.name", f"Model {name!r} is also defined in {self.sources[name]}"
            )
            self.errors.append(SpecValidationError(source, [problem], MODEL_KIND))
            return None
        self.models[name], self.sources[name] = manifest, source
        return manifest

    @property
    def where(self) -> str:
        """The end of a not-found message: where the Models were looked for."""
        if not self.models:
            return f"not found: {NO_MODELS}; pass the file or folder that defines it (--models)"
        return (
            f"not found among the {len(self.models)} Models given "
            f"({', '.join(sorted(self.models))}); pass the file that defines it (--models)"
        )

    def lookup(self) -> ModelLookup:
        return self.models.get

    @classmethod
    def read(cls, paths: Iterable[Path | str]) -> FileModels:
        """The Model documents of these files and folders (other kinds are skipped)."""
        found = cls()
        for file in yaml_files(paths):
            try:
                documents = list(_documents(file))
            except SpecValidationError as exc:
                found.errors.append(exc)
                continue
            for where, document in documents:
                if isinstance(document, dict) and document.get("kind") == MODEL_KIND:
                    found.add(document, where, file.resolve().parent)
        return found


def parse_resource(document: Any, source: str, models: FileModels | None = None) -> Resource:
    """Validate one document of any kind, by its ``kind``; modelRefs resolve against
    ``models`` (none given: every modelRef is refused as unknown)."""
    models = models or FileModels()
    kind = document.get("kind") if isinstance(document, dict) else None
    if kind == MODEL_KIND:
        return parse_model(document, source)
    if kind == SWEEP_KIND:
        return parse_sweep(document, source, models.lookup())
    if kind == KIND or not isinstance(document, dict):
        resolved = resolve_evaluation(
            document, models.lookup(), source, models.where, models.sources
        )
        return parse_evaluation(resolved, source)
    raise SpecValidationError(
        source,
        [
            Problem(
                "kind",
                f"expected kind {', '.join(KINDS)} (apiVersion {API_VERSION_FULL}), got {kind}",
            )
        ],
        " or ".join(KINDS),
    )


def check_files(
    paths: Iterable[Path | str], model_paths: Iterable[Path | str] = ()
) -> tuple[list[CheckedDocument], list[SpecValidationError]]:
    """Every document of these files and folders, each validated on its own, its modelRefs
    resolved against every Model given (in ``paths`` or ``model_paths``). Returns the
    documents and the errors of files that are unusable as a whole (unreadable, not YAML,
    empty)."""
    files = yaml_files(paths)
    models = FileModels.read([*files, *model_paths])
    model_errors = {e.source: e for e in models.errors if e.kind == MODEL_KIND}
    checked: list[CheckedDocument] = []
    unusable = [  # Models of --models files only: nothing else reports them
        e
        for e in models.errors
        if not any(e.source == str(f) or e.source.startswith(f"{f} (") for f in files)
    ]
    for file in files:
        try:
            documents = list(_documents(file))
        except SpecValidationError as exc:
            unusable.append(exc)
            continue
        for where, document in documents:
            if where in model_errors:
                checked.append(CheckedDocument(where, None, model_errors[where]))
                continue
            try:
                resource = parse_resource(document, where, models)
            except SpecValidationError as exc:
                checked.append(CheckedDocument(where, None, exc))
                continue
            if isinstance(resource, ModelManifest):
                try:  # its basedOn chain: unknown names and cycles
                    resolve_model(
                        resource.metadata.name, models.lookup(), "spec.basedOn.name", models.where
                    )
                except UnresolvedModelError as exc:
                    error = SpecValidationError(where, [exc.problem], MODEL_KIND)
                    checked.append(CheckedDocument(where, None, error))
                    continue
            children = 0
            if isinstance(resource, EvaluationSweep):
                children = len(expand(resource, models.lookup()))
            checked.append(CheckedDocument(where, resource, None, children))
    return checked, unusable


def check_file(path: Path | str) -> list[CheckedDocument]:
    """Every document of one YAML file, validated; raises SpecValidationError only when the
    file as a whole is unusable (unreadable, not YAML, empty)."""
    checked, unusable = check_files([path])
    if unusable:
        raise unusable[0]
    return checked


def load_runnable(
    path: Path | str, model_paths: Iterable[Path | str] = ()
) -> list[LoadedEvaluation]:
    """The ModelEvaluations of a file, validated and with their modelRefs resolved against
    the Models of that file and of ``model_paths``: what `mlms run` runs. Model documents in
    the file are read, not run; any other kind is refused."""
    file = Path(path)
    models = FileModels.read([file, *model_paths])
    if models.errors:
        raise models.errors[0]
    loaded = []
    for where, document in _documents(file):
        kind = document.get("kind") if isinstance(document, dict) else None
        if kind == MODEL_KIND:
            continue
        if kind == SWEEP_KIND:
            raise SpecValidationError(
                where,
                [
                    Problem(
                        "kind",
                        "mlms run runs ModelEvaluations; a sweep runs in a cluster "
                        "(kubectl apply), or validate it with mlms validate",
                    )
                ],
            )
        resolved = resolve_evaluation(
            document, models.lookup(), where, models.where, models.sources
        )
        evaluation = parse_evaluation(resolved, where)
        loaded.append(LoadedEvaluation(evaluation, where, file.resolve().parent))
    if not loaded:
        raise SpecValidationError(str(file), [Problem("", f"no {KIND} document found")])
    return loaded
