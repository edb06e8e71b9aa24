"""``scenario.repetitionProcess``: same by default (unset, so earlier specs hash as they did),
fresh only with two repetitions or more and the builtin driver, refused alike by the Python
check and the CRD's CEL rules (whose cases run on a real API server in test_crd_cluster.py)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from spec_cases import GOOD, mutate

from mlmodelscope.agent.provenance import spec_hash
from mlmodelscope.spec import SpecValidationError, parse_evaluation
from mlmodelscope.spec.crd import build_crd
from mlmodelscope.spec.evaluation import RepetitionProcess, Scenario


def _scenario_schema() -> dict[str, Any]:
    crd = build_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    scenario: dict[str, Any] = spec["properties"]["scenario"]
    return scenario


def test_unset_is_same_and_keeps_the_spec_hash() -> None:
    """Unset stays out of the spec's canonical JSON: a spec written before the field hashes
    as it did, so its results keep grouping with earlier runs."""
    before = parse_evaluation(mutate("spec.scenario", {"repetitions": 3}), "a.yaml").spec
    assert before.scenario.repetition_process is None
    assert (
        "repetitionProcess" not in before.model_dump(by_alias=True, exclude_none=True)["scenario"]
    )
    fresh = mutate("spec.scenario", {"repetitions": 3, "repetitionProcess": "fresh"})
    assert spec_hash(parse_evaluation(fresh, "b.yaml").spec) != spec_hash(before)


@pytest.mark.parametrize("repetitions", [2, 100])
def test_fresh_with_two_repetitions_or_more_is_accepted(repetitions: int) -> None:
    scenario = Scenario.model_validate({"repetitions": repetitions, "repetitionProcess": "fresh"})
    assert scenario.repetition_process == RepetitionProcess.FRESH


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ({"repetitionProcess": "fresh"}, "set repetitions 2 or more"),
        ({"repetitionProcess": "fresh", "repetitions": 1}, "set repetitions 2 or more"),
        ({"repetitionProcess": "fresh", "driver": "loadgen"}, "set driver builtin"),
    ],
)
def test_fresh_is_refused_naming_the_field_and_the_fix(
    scenario: dict[str, Any], expected: str
) -> None:
    with pytest.raises(SpecValidationError) as caught:
        parse_evaluation(mutate("spec.scenario", scenario), "bad.yaml")
    messages = [str(p) for p in caught.value.problems]
    assert any(
        m.startswith("spec.scenario.repetitionProcess: ") and expected in m for m in messages
    ), messages


def test_same_needs_nothing_else() -> None:
    assert Scenario.model_validate({"repetitionProcess": "same"}).repetitions == 1
    assert parse_evaluation(GOOD, "good.yaml").spec.scenario.repetition_process is None


def test_the_crd_carries_the_choice_and_the_same_rules() -> None:
    schema = _scenario_schema()
    field = schema["properties"]["repetitionProcess"]
    assert field["enum"] == ["same", "fresh"] and "default" not in field
    validator = jsonschema.Draft4Validator(schema)  # OpenAPI v3's flavour of JSON Schema
    validator.validate({"repetitions": 2, "repetitionProcess": "fresh"})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"repetitionProcess": "forked"})
    cel = {
        r["message"]: r
        for r in schema["x-kubernetes-validations"]
        if "repetitionProcess" in r["rule"]
    }
    python = {r.message: r for r in Scenario.rules if r.field == "repetitionProcess"}
    assert set(cel) == set(python) and len(cel) == 2
    for message, rule in cel.items():
        assert rule["fieldPath"] == ".repetitionProcess"
        assert rule["rule"] == python[message].cel
        assert "self.repetitionProcess != 'fresh'" in rule["rule"]
