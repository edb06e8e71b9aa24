"""Spec validation: good examples pass, bad specs fail naming the exact field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_cases import BAD_SPECS, GOOD, mutate

from mlmodelscope.spec import (
    EvaluationSpec,
    SpecValidationError,
    load_evaluations,
    parse_duration,
    parse_evaluation,
)

EXAMPLES_DIR = Path(__file__).parents[2] / "examples"
EXAMPLES = sorted([*EXAMPLES_DIR.glob("*.yaml"), *EXAMPLES_DIR.glob("cluster/*.yaml")])


def test_good_spec_parses_with_defaults() -> None:
    evaluation = parse_evaluation(GOOD)
    assert evaluation.spec.scenario.type == "SingleStream"
    assert evaluation.spec.scenario.batch_sizes == [1]
    assert evaluation.spec.hardware.gpu_count == 0


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(EXAMPLES_DIR)))
def test_every_example_validates(example: Path) -> None:
    assert load_evaluations(example)


@pytest.mark.parametrize(("field", "value", "path", "expected"), BAD_SPECS)
def test_bad_spec_names_the_field(field: str, value: Any, path: str, expected: str) -> None:
    with pytest.raises(SpecValidationError) as info:
        parse_evaluation(mutate(field, value), "bad.yaml")
    messages = [str(p) for p in info.value.problems]
    assert any(m.startswith(f"{path}: ") and expected in m for m in messages), messages


def test_enough_bad_specs() -> None:
    assert len(BAD_SPECS) >= 10


def test_error_lists_every_problem_and_the_source(tmp_path: Path) -> None:
    document = mutate("spec.scenario", {"type": "Server", "batchSizes": [2, 2]})
    file = tmp_path / "two.yaml"
    file.write_text(yaml.safe_dump_all([GOOD, document]))
    with pytest.raises(SpecValidationError) as info:
        load_evaluations(file)
    text = str(info.value)
    assert "document 2" in text
    assert "spec.scenario" in text


def test_wrong_kind_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(SpecValidationError, match="kind: ModelEvaluation"):
        parse_evaluation({**GOOD, "kind": "Pod"})
    file = tmp_path / "broken.yaml"
    file.write_text("spec: [unclosed")
    with pytest.raises(SpecValidationError, match="not valid YAML"):
        load_evaluations(file)


def test_fractional_qps_may_be_a_string() -> None:
    spec = EvaluationSpec.model_validate(
        {**GOOD["spec"], "scenario": {"type": "Server", "targetQPS": "12.5"}}
    )
    assert spec.scenario.target_qps == 12.5
    spec = EvaluationSpec.model_validate(
        {**GOOD["spec"], "scenario": {"type": "Server", "targetQPS": "auto"}}
    )
    assert spec.scenario.target_qps == "auto"


@pytest.mark.parametrize(
    ("text", "seconds"), [("500ms", 0.5), ("1m30s", 90.0), ("2h", 7200.0), ("10us", 1e-5)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_roundtrip_keeps_camel_case() -> None:
    evaluation = parse_evaluation(mutate("spec.scenario", {"type": "Server", "targetQPS": 5}))
    dumped = evaluation.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["spec"]["scenario"]["targetQPS"] == 5
    assert parse_evaluation(dumped) == evaluation
