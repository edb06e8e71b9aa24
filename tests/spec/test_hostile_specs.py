"""Hostile ModelEvaluation documents against the local validator (`mlms validate`, `mlms run`).

Whatever one field holds, validation either accepts the document or raises
SpecValidationError whose problems name fields under spec. or metadata. (one of them the
field that was changed, or a field a rule ties to it), short enough to read, and without
any credential the document carried. Never another exception, never a RecursionError.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile import (
    BASE,
    CREDENTIAL_URIS,
    PLACES,
    SECRETS,
    Hostile,
    hostile_documents,
    nested,
    replace,
)
from hypothesis import HealthCheck, given, settings
from typer.testing import CliRunner

from mlmodelscope.cli import app
from mlmodelscope.spec import SpecValidationError
from mlmodelscope.spec.document import field_path
from mlmodelscope.spec.resources import parse_resource

HOSTILE = settings(
    max_examples=400,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Reproducible in CI: a fixed sequence of examples, no example database."""

MAX_MESSAGE = 4096
"""A problem longer than this is not a clear message (it echoes a huge input)."""

TIED = {
    "spec.hardware.device": ("spec.framework.executionProvider",),
    "spec.framework.name": ("spec.model.format",),
    "spec.framework": ("spec.model.format",),
    "spec.model.format": ("spec.model.format",),
}
"""Fields whose value another model's rule judges (semantic checks across models)."""


def within(path: str, prefix: str) -> bool:
    """Whether ``path`` is ``prefix`` or a field inside it."""
    return not prefix or path == prefix or path.startswith((f"{prefix}.", f"{prefix}["))


def related(problem: str, hostile: Hostile) -> bool:
    """Whether ``problem`` names the changed field, a field inside it, the model that holds
    it or a sibling (a rule of that model), or a field tied to it across models."""
    field, parent = hostile.field, field_path(hostile.place[:-1])
    if within(problem, parent) or within(field, problem):
        return True
    return any(within(problem, tied) for tied in TIED.get(field, ()))


def check(hostile: Hostile) -> None:
    """The property every hostile document must have."""
    try:
        parse_resource(hostile.document, "hostile.yaml")
    except SpecValidationError as exc:
        problems = exc.problems
        assert problems, "a rejection names at least one problem"
        for problem in problems:
            assert problem.path.split(".")[0].split("[")[0] in ("spec", "metadata"), problem
            assert len(str(problem)) <= MAX_MESSAGE, str(problem)[:300]
        assert any(related(p.path, hostile) for p in problems), (hostile.field, problems)
        for secret in SECRETS:
            assert secret not in str(exc), str(exc)


@HOSTILE
@given(hostile_documents())
def test_any_hostile_field_is_accepted_or_rejected_naming_a_field(hostile: Hostile) -> None:
    check(hostile)


@pytest.mark.parametrize("uri", CREDENTIAL_URIS)
@pytest.mark.parametrize(
    "field",
    [
        ("metadata", "name"),
        ("spec", "model", "name"),
        ("spec", "model", "sha256"),
        ("spec", "model", "format"),
        ("spec", "timeout"),
        ("spec", "hardware", "resources", "limits", "memory"),
        ("spec", "hardware", "gpuProduct"),
        ("spec", "framework", "version"),
    ],
)
def test_a_credential_uri_in_any_string_field_is_never_repeated(
    uri: str, field: tuple[str, ...]
) -> None:
    check(replace(field, uri))


def test_a_credential_in_a_duration_or_quantity_is_not_repeated() -> None:
    """Regression: '<value> is not a duration' and '... not a Kubernetes quantity' repeated a
    URI pasted into the wrong field, credentials and all."""
    for place in [("spec", "timeout"), ("spec", "hardware", "resources", "requests", "cpu")]:
        with pytest.raises(SpecValidationError) as info:
            parse_resource(replace(place, CREDENTIAL_URIS[0]).document, "hostile.yaml")
        assert SECRETS[0] not in str(info.value) and "may hold credentials" in str(info.value)


def test_a_document_nested_a_thousand_levels_deep_is_rejected_without_recursion() -> None:
    for place in [("spec",), ("spec", "model"), ("metadata", "labels"), ("spec", "x")]:
        for as_list in (False, True):
            check(replace(place, nested(5000, as_list=as_list)))


def test_base_document_is_valid() -> None:
    parse_resource(BASE, "base.yaml")


def test_mlms_validate_refuses_deeply_nested_yaml_naming_the_file(tmp_path: Path) -> None:
    file = tmp_path / "deep.yaml"
    file.write_text("spec: " + "[" * 5000 + "]" * 5000 + "\n")
    result = CliRunner().invoke(app, ["validate", str(file)])
    assert result.exit_code == 1, result.output
    assert f"{file}" in result.output and "nested too deeply" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def value_at(place: tuple[str | int, ...]) -> Any:
    node: Any = BASE
    for part in place:
        node = node[part]
    return node


NUMBERS = [
    p for p in PLACES if isinstance(value_at(p), int | float) and not isinstance(value_at(p), bool)
]
FREE_FLOATS = ("factor", "mean", "std")
"""Float fields where any large finite number is a legitimate (if odd) value."""
MAY_BE_NEGATIVE = ("mean", "axis", "tolerationSeconds")


def name_of(place: tuple[str | int, ...]) -> str:
    """The field's own name (``mean`` for ``...normalize.mean[0]``)."""
    return next(p for p in reversed(place) if isinstance(p, str))


def rejected_at(hostile: Hostile) -> list[str]:
    """The problems' paths (empty when the document is accepted), checked like any other."""
    check(hostile)
    try:
        parse_resource(hostile.document, "hostile.yaml")
    except SpecValidationError as exc:
        return [p.path for p in exc.problems]
    return []


@pytest.mark.parametrize("place", NUMBERS, ids=field_path)
@pytest.mark.parametrize(
    "value", [2**63, -(2**63) - 1, 10**30, math.inf, -math.inf, math.nan], ids=repr
)
def test_numbers_beyond_int64_and_infinities_are_refused_naming_the_field(
    place: tuple[str | int, ...], value: float
) -> None:
    if name_of(place) in FREE_FLOATS and math.isfinite(value):
        return  # a huge finite scale factor or mean is odd, not wrong
    paths = rejected_at(replace(place, value))
    field = field_path(place)
    assert any(within(p, field) or within(field, p) for p in paths), (field, value, paths)


@pytest.mark.parametrize("place", NUMBERS, ids=field_path)
def test_negative_counts_sizes_and_durations_are_refused(place: tuple[str | int, ...]) -> None:
    name = name_of(place)
    if name in MAY_BE_NEGATIVE or (name == "shape" and place[1] == "model"):
        return  # -1 is a dynamic dimension of a model tensor; axes count from the end
    assert rejected_at(replace(place, -1)), field_path(place)


@pytest.mark.parametrize(
    ("place", "value", "path", "words"),
    [
        (("spec", "scenario", "batchSizes"), [1, 2**40], "spec.scenario.batchSizes[1]", "65536"),
        (("spec", "model", "inputs", 0, "shape"), [-1, 2**40], "inputs[0].shape[1]", "16777216"),
        (("spec", "dataset", "shape"), [1, 10**12], "spec.dataset.shape[1]", "16777216"),
        (("spec", "scenario", "targetQPS"), 1e300, "spec.scenario.targetQPS", "at most 1000000"),
        (("spec", "scenario", "targetQPS"), "1e300", "spec.scenario.targetQPS", "at most"),
        (("spec", "scenario", "targetQPS"), math.inf, "spec.scenario.targetQPS", "finite"),
        (("spec", "preprocessing", 0, "scale", "factor"), math.inf, "factor", "finite"),
        (("spec", "preprocessing", 1, "normalize", "mean"), [math.nan], "mean[0]", "finite"),
        (("spec", "postprocessing", 0, "softmax", "axis"), 10**30, "softmax.axis", "7"),
        (("spec", "dataset", "limit"), 2**63, "spec.dataset.limit", "2147483647"),
        (("spec", "hardware", "tolerations", 0, "tolerationSeconds"), 2**64, "[0].toleration", ""),
        (("spec", "hardware", "tolerations", 0, "tolerationSeconds"), 60, "[0].toleration", "NoEx"),
    ],
)
def test_enormous_sizes_rates_and_infinities_are_refused(
    place: tuple[str | int, ...], value: Any, path: str, words: str
) -> None:
    """Regression: each of these was accepted, and would have reached the agent (a batch or
    a synthetic sample allocated whole, every Server arrival planned) or the Job."""
    with pytest.raises(SpecValidationError) as info:
        parse_resource(replace(place, value).document, "hostile.yaml")
    assert any(path in str(p) and words in p.message for p in info.value.problems), info.value


@pytest.mark.parametrize("uri", CREDENTIAL_URIS)
def test_a_credential_uri_as_an_unknown_key_is_never_repeated(uri: str) -> None:
    """Regression: the path of an unknown field repeated its name, credentials and all."""
    with pytest.raises(SpecValidationError) as info:
        parse_resource(replace(("spec", "model", uri), 1).document, "hostile.yaml")
    [problem] = info.value.problems
    assert problem.path.startswith("spec.model[") and "unknown field" in problem.message
    assert not any(secret in str(info.value) for secret in SECRETS)


def test_a_huge_value_or_key_is_clipped_in_the_message() -> None:
    with pytest.raises(SpecValidationError) as info:
        parse_resource(replace(("spec", "timeout"), "9" * 1_000_000).document, "hostile.yaml")
    assert len(str(info.value)) < 300
    with pytest.raises(SpecValidationError) as info:
        parse_resource(replace(("spec", "k" * 1_000_000), 1).document, "hostile.yaml")
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(
    ("place", "value"),
    [
        (("spec", "hardware", "gpus"), True),
        (("spec", "hardware", "gpus"), 1.0),
        (("spec", "scenario", "batchSizes"), ["4"]),
        (("spec", "retries"), "3"),
        (("spec", "tracing", "sampling"), "0.5"),
        (("spec", "scenario", "accuracy"), "yes"),
        (("spec", "model", "inputs", 0, "shape"), [-1, 8.0]),
    ],
)
def test_numbers_and_flags_of_the_wrong_json_type_are_refused_like_the_api_server_does(
    place: tuple[str | int, ...], value: Any
) -> None:
    """Regression: pydantic's lax mode read true as 1 GPU, '3' as 3 retries and 1.0 as 1,
    which the API server refuses (type: integer / number / boolean)."""
    assert rejected_at(replace(place, value))


def test_a_null_field_is_absent_as_the_api_server_reads_it() -> None:
    """Regression: `postprocessing:` (null) was refused locally, accepted by the server."""
    optional = replace(("spec", "postprocessing"), None).document
    assert parse_resource(optional, "null.yaml").spec.postprocessing == []
    with pytest.raises(SpecValidationError) as info:
        parse_resource(replace(("spec", "model", "uri"), None).document, "null.yaml")
    assert [str(p) for p in info.value.problems] == ["spec.model.uri: required field is missing"]


@pytest.mark.parametrize(
    ("place", "uri", "words"),
    [
        (("spec", "model", "uri"), "pvc://../etc/passwd", "PersistentVolumeClaim name"),
        (("spec", "model", "uri"), "pvc:///etc/passwd", "PersistentVolumeClaim name"),
        (("spec", "model", "uri"), "pvc://Claim_1/m.onnx", "PersistentVolumeClaim name"),
        (("spec", "model", "uri"), "pvc://claim/../../etc/passwd", "must not contain '..'"),
        (("spec", "model", "uri"), "pvc://claim/m/..", "must not contain '..'"),
        (("spec", "dataset", "uri"), "pvc://claim/../x.npz", "must not contain '..'"),
    ],
)
def test_a_pvc_uri_names_a_claim_and_stays_inside_it(
    place: tuple[str | int, ...], uri: str, words: str
) -> None:
    """Regression: the CRD admitted these; the operator mounted a claim named '..' (the Job
    refused) or the agent refused the path only once its pod ran."""
    document = replace(place, uri).document
    if place[1] == "dataset":
        document["spec"]["dataset"] = {"type": "npz", "uri": uri}
    with pytest.raises(SpecValidationError) as info:
        parse_resource(document, "hostile.yaml")
    field = field_path(place)
    assert any(p.path == field and words in p.message for p in info.value.problems), info.value


def test_a_pvc_uri_inside_its_claim_is_accepted() -> None:
    for uri in ("pvc://models/digits.onnx", "pvc://my.claim", "pvc://c/a..b/..c/m.onnx"):
        parse_resource(replace(("spec", "model", "uri"), uri).document, "pvc.yaml")


S3_USERINFO = "s3://AKIAEXAMPLE:secretkey@bucket/m.onnx"
"""The issue's hostile URI: userinfo can never be valid in s3:// (no bucket name holds ':' or
'@'), so it is refused, naming the field and the fix, and its secret is not repeated."""


@pytest.mark.parametrize(
    ("place", "document_fix"),
    [
        (("spec", "model", "uri"), {}),
        (("spec", "dataset", "uri"), {"dataset": {"type": "npz", "uri": "x"}}),
        (
            ("spec", "postprocessing", 0, "labels", "uri"),
            {"postprocessing": [{"labels": {"uri": "x"}}]},
        ),
    ],
)
def test_userinfo_in_an_s3_uri_is_refused_naming_the_field_and_the_secret_ref(
    place: tuple[str | int, ...], document_fix: dict[str, Any], tmp_path: Path
) -> None:
    document = replace(("spec", "model", "name"), "m").document
    document["spec"].update(document_fix)
    target: Any = document
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = S3_USERINFO
    with pytest.raises(SpecValidationError) as info:
        parse_resource(document, "hostile.yaml")
    [problem] = info.value.problems
    assert problem.path == field_path(place)
    assert "credentialsSecretRef" in problem.message
    assert "secretkey" not in str(info.value) and "AKIAEXAMPLE" not in str(info.value)

    file = tmp_path / "hostile.yaml"
    file.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(app, ["validate", str(file)])
    assert result.exit_code == 1, result.output
    assert field_path(place) in result.output and "credentialsSecretRef" in result.output
    assert "secretkey" not in result.output


def test_userinfo_elsewhere_than_an_s3_uri_stays_valid() -> None:
    """http(s) userinfo is basic auth, and an '@' in an s3:// key is a key."""
    for uri in ("https://alice:pw@models.example/m.onnx", "s3://bucket/keys/a@b.onnx"):
        parse_resource(replace(("spec", "model", "uri"), uri).document, "ok.yaml")
