"""Label syntax of hardware.nodeSelector and hardware.tolerations (issue 32): what the API
server would refuse in the Job's pod is refused in the spec, by pydantic and by the CRD, with
a message that names the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from hostile import CREDENTIAL_URIS, SECRETS
from pydantic import ValidationError
from spec_cases import SWEEP, mutate

from mlmodelscope.spec import SpecValidationError, parse_evaluation, parse_sweep
from mlmodelscope.spec.crd import build_crd, build_sweep_crd
from mlmodelscope.spec.evaluation import Hardware
from mlmodelscope.spec.labels import (
    LABEL_KEY_LENGTHS,
    LABEL_KEY_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_LABEL_KEY,
    is_label_key,
    is_label_value,
)

PREFIX = "a" * 253
LABEL_KEYS = [
    "pool",
    "A",
    "7",
    "a.b-c_D",
    "x" * 63,
    "mlmodelscope.io/pool",
    "nvidia.com/gpu.product",
    "node-role.kubernetes.io/GPU_worker",
    "a1.b-2.c/d",
    f"{PREFIX}/{'b' * 63}",
]
NOT_LABEL_KEYS = [
    "",
    "Bad Key!",
    "-pool",
    "pool-",
    "_pool",
    "x" * 64,
    "pool\n",
    "/pool",
    "example.com/",
    "a/b/c",
    "Example.com/pool",  # the prefix is a DNS subdomain: lower case
    "example_com/pool",
    "-example.com/pool",
    "example..com/pool",
    "example.com./pool",
    f"a{PREFIX}/pool",  # a 254-character prefix
    "example.com/-pool",
    "ünïcode",
    "../x",
    CREDENTIAL_URIS[0],
]


@pytest.mark.parametrize("key", LABEL_KEYS)
def test_label_keys_the_api_server_accepts(key: str) -> None:
    assert is_label_key(key)
    assert Hardware.model_validate({"nodeSelector": {key: "v"}}).node_selector == {key: "v"}
    toleration = {"key": key, "operator": "Exists"}
    assert Hardware.model_validate({"tolerations": [toleration]}).tolerations[0].key == key


@pytest.mark.parametrize("key", NOT_LABEL_KEYS, ids=lambda k: repr(k[:20]))
def test_label_keys_the_api_server_refuses(key: str) -> None:
    assert not is_label_key(key)
    with pytest.raises(ValidationError, match="is not a label key"):
        Hardware.model_validate({"nodeSelector": {"pool": "cpu", key: "v"}})
    with pytest.raises(ValidationError, match=r"key: (must be a label key|required unless)"):
        Hardware.model_validate({"tolerations": [{"key": key}]})


@pytest.mark.parametrize(
    ("value", "valid"),
    [("", True), ("cpu", True), ("NVIDIA-A100_80GB.v2", True), ("x" * 63, True),
     ("x" * 64, False), ("a b!", False), ("-a", False), ("a.", False), ("a/b", False),
     ("a\n", False)],
)  # fmt: skip
def test_label_values(value: str, valid: bool) -> None:
    assert is_label_value(value) is valid
    for hardware in (
        {"nodeSelector": {"pool": value}},
        {"tolerations": [{"key": "dedicated", "value": value}]},
    ):
        if valid:
            Hardware.model_validate(hardware)
        else:
            with pytest.raises(ValidationError, match="is not a label value: write at most 63"):
                Hardware.model_validate(hardware)


def test_the_message_names_the_key_and_the_fix_without_repeating_a_credential() -> None:
    document = mutate("spec.hardware", {"nodeSelector": {"pool": "cpu", "Bad Key!": "x"}})
    with pytest.raises(SpecValidationError) as info:
        parse_evaluation(document, "bad.yaml")
    [problem] = info.value.problems
    assert problem.path == "spec.hardware.nodeSelector"
    assert problem.message.startswith("key 'Bad Key!' is not a label key: write a name of at")
    assert "e.g. nvidia.com/gpu.product" in problem.message
    document = mutate("spec.hardware", {"nodeSelector": {CREDENTIAL_URIS[0]: "x"}})
    with pytest.raises(SpecValidationError) as info:
        parse_evaluation(document, "bad.yaml")
    assert "not a label key" in str(info.value) and SECRETS[0] not in str(info.value)


def test_a_keyless_toleration_needs_operator_exists() -> None:
    assert Hardware.model_validate({"tolerations": [{"operator": "Exists"}]})
    assert Hardware.model_validate({"tolerations": [{"key": "", "operator": "Exists"}]})
    for toleration in ({}, {"key": ""}, {"operator": "Equal", "value": "v"}):
        with pytest.raises(ValidationError, match="key: required unless operator is Exists"):
            Hardware.model_validate({"tolerations": [toleration]})


def test_a_sweeps_template_refuses_a_node_selector_key() -> None:
    good = {**SWEEP, "spec": {**SWEEP["spec"], "template": {"dataset": {"type": "digits"}}}}
    assert parse_sweep(good)
    template: dict[str, Any] = {"dataset": {"type": "digits"}, "hardware": {}}
    template["hardware"]["nodeSelector"] = {"Bad Key!": "x"}
    with pytest.raises(SpecValidationError) as info:
        parse_sweep({**SWEEP, "spec": {**SWEEP["spec"], "template": template}})
    assert [p.path for p in info.value.problems] == ["spec.template.hardware.nodeSelector"]


def _hardware_schema(crd: dict[str, Any], *path: str) -> dict[str, Any]:
    node: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in ("spec", *path, "hardware"):
        node = node["properties"][name]
    return node


@pytest.mark.parametrize(
    "hardware",
    [_hardware_schema(build_crd()), _hardware_schema(build_sweep_crd(), "template")],
    ids=["ModelEvaluation", "EvaluationSweep template"],
)
def test_the_crd_checks_the_same_syntax(hardware: dict[str, Any]) -> None:
    """The map's keys by a CEL rule over them (a structural schema has no propertyNames),
    bounded by maxProperties and, at run time, a size test before the regular expressions;
    values and the toleration's fields by patterns and rules of the same expressions. The
    expressions hold no backslash, which a CEL string literal would read as an escape."""
    selector = hardware["properties"]["nodeSelector"]
    assert selector["maxProperties"] == 64
    assert selector["additionalProperties"] == {
        "type": "string",
        "maxLength": 63,
        "pattern": LABEL_VALUE_PATTERN,
    }
    [rule] = [r for r in hardware["x-kubernetes-validations"] if r["fieldPath"] == ".nodeSelector"]
    assert rule["rule"] == (
        f"!has(self.nodeSelector) || self.nodeSelector.all(k, k.size() <= {MAX_LABEL_KEY} && "
        f"k.matches('{LABEL_KEY_PATTERN}') && k.matches('{LABEL_KEY_LENGTHS}'))"
    )
    assert rule["message"].startswith("a key is not a label key: write a name")
    toleration = hardware["properties"]["tolerations"]["items"]
    assert toleration["properties"]["key"]["maxLength"] == MAX_LABEL_KEY
    assert toleration["properties"]["value"]["pattern"] == LABEL_VALUE_PATTERN
    key_rules = [r for r in toleration["x-kubernetes-validations"] if r["fieldPath"] == ".key"]
    assert [r["reason"] for r in key_rules] == ["FieldValueInvalid", "FieldValueRequired"]
    assert f"self.key.matches('{LABEL_KEY_PATTERN}')" in key_rules[0]["rule"]
    for pattern in (LABEL_KEY_PATTERN, LABEL_KEY_LENGTHS, LABEL_VALUE_PATTERN):
        assert "\\" not in pattern and "'" not in pattern
