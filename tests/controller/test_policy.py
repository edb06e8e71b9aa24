"""Operator policy (#15, defect 9): what a spec may ask its Job to use, checked before any Job."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mlmodelscope.controller import policy, status
from mlmodelscope.controller.settings import OperatorSettings, SettingsError
from mlmodelscope.spec import ModelEvaluation

Make = Callable[..., ModelEvaluation]


def denials(ev: ModelEvaluation, env: dict[str, str] | None = None) -> list[str]:
    settings = OperatorSettings.from_env(env or {})
    return policy.denials(ev, settings.policy, settings.agent_images())


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("ghcr.io/x/agent:1.0-cpu", "ghcr.io/x/agent"),
        ("registry.local:5000/agent", "registry.local:5000/agent"),
        ("registry.local:5000/agent:2@sha256:abc", "registry.local:5000/agent"),
        ("busybox", "busybox"),
    ],
)
def test_repository_drops_tag_and_digest_not_port(image: str, repo: str) -> None:
    assert policy.repository(image) == repo


def test_prefixes_match_whole_segments() -> None:
    assert policy.image_allowed("ghcr.io/acme/agent:1", ["ghcr.io/acme"])
    assert policy.image_allowed("ghcr.io/acme:1", ["ghcr.io/acme"])
    assert policy.image_allowed("ghcr.io/acme/a/b:1", ["ghcr.io/acme/"])
    assert not policy.image_allowed("ghcr.io/acme-evil/agent:1", ["ghcr.io/acme"])
    assert not policy.image_allowed("ghcr.io/acme-evil/agent:1", ["ghcr.io/acme/"])
    assert policy.image_allowed("anything:1", ["*"])
    assert policy.image_allowed("ghcr.io/acme/agent:1", ["ghcr.io/acme/agent:1"])
    assert not policy.image_allowed("ghcr.io/acme/agent:2", ["ghcr.io/acme/agent:1"])


def test_defaults_allow_the_operators_own_images_and_examples(make_evaluation: Make) -> None:
    ev = make_evaluation(
        model={"uri": "pvc://models/digits.onnx"},
        hardware={"tolerations": [{"key": "pool", "operator": "Exists"}]},
    )
    assert denials(ev) == []
    own = OperatorSettings.from_env({}).agent_images()[0]
    assert denials(make_evaluation(framework={"name": "onnxruntime", "image": own})) == []
    same_repo = own.rpartition(":")[0] + ":custom-tag"
    assert denials(make_evaluation(framework={"name": "onnxruntime", "image": same_repo})) == []


def test_a_foreign_image_is_denied_naming_field_value_and_setting(make_evaluation: Make) -> None:
    ev = make_evaluation(framework={"name": "onnxruntime", "image": "evil.io/miner:1"})
    [problem] = denials(ev)
    assert "spec.framework.image 'evil.io/miner:1'" in problem
    assert "MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES" in problem
    assert "ghcr.io/mlmodelscope/agent-" in problem
    assert denials(ev, {"MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES": "evil.io/"}) == []
    assert denials(ev, {"MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES": "*"}) == []


def test_a_configured_agent_image_elsewhere_is_allowed(make_evaluation: Make) -> None:
    env = {"MLMS_OPERATOR_IMAGE_ONNXRUNTIME_CPU": "registry.local:5000/ort:1-cpu"}
    ev = make_evaluation(framework={"name": "onnxruntime", "image": "registry.local:5000/ort:2"})
    assert denials(ev, env) == []


def test_secret_refs_are_denied_unless_allowed(make_evaluation: Make) -> None:
    ev = make_evaluation(
        model={"uri": "s3://bucket/m.onnx", "credentialsSecretRef": {"name": "db-password"}}
    )
    [problem] = denials(ev)
    assert "spec.model.credentialsSecretRef 'db-password'" in problem
    assert "MLMS_OPERATOR_ALLOW_SECRET_REFS=false" in problem
    assert denials(ev, {"MLMS_OPERATOR_ALLOW_SECRET_REFS": "true"}) == []
    assert denials(ev, {"MLMS_OPERATOR_ALLOW_SECRET_REFS": "hf-token,db-password"}) == []
    assert denials(ev, {"MLMS_OPERATOR_ALLOW_SECRET_REFS": "hf-token"})


def test_claims_can_be_limited_to_a_list(make_evaluation: Make) -> None:
    ev = make_evaluation(
        model={"uri": "pvc://models/m.onnx"}, dataset={"uri": "pvc://private/data.npz"}
    )
    [problem] = denials(ev, {"MLMS_OPERATOR_ALLOW_PVCS": "models"})
    assert "pvc://private" in problem and "'private'" in problem
    assert "MLMS_OPERATOR_ALLOW_PVCS=models" in problem
    assert len(denials(ev, {"MLMS_OPERATOR_ALLOW_PVCS": "false"})) == 2


def test_tolerations_by_key_and_a_keyless_one_only_with_true(make_evaluation: Make) -> None:
    env = {"MLMS_OPERATOR_ALLOWED_TOLERATIONS": "pool"}
    ok = make_evaluation(hardware={"tolerations": [{"key": "pool", "operator": "Exists"}]})
    assert denials(ok, env) == []
    bad = make_evaluation(hardware={"tolerations": [{"key": "dedicated"}, {"operator": "Exists"}]})
    problems = denials(bad, env)
    assert "spec.hardware.tolerations[0] tolerates 'dedicated'" in problems[0]
    assert "spec.hardware.tolerations[1] tolerates every taint" in problems[1]
    assert "MLMS_OPERATOR_ALLOWED_TOLERATIONS=pool" in problems[0]


def test_the_gpu_toleration_the_operator_adds_is_not_the_specs(make_evaluation: Make) -> None:
    ev = make_evaluation(
        hardware={"device": "gpu", "gpus": 1},
        framework={"name": "onnxruntime", "executionProvider": "CUDAExecutionProvider"},
    )
    assert denials(ev, {"MLMS_OPERATOR_ALLOWED_TOLERATIONS": "false"}) == []


@pytest.mark.parametrize(
    "env",
    [
        {"MLMS_OPERATOR_ALLOW_SECRET_REFS": "a b"},
        {"MLMS_OPERATOR_ALLOW_PVCS": "claim;x"},
        {"MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES": "ghcr.io/a, b c"},
    ],
)
def test_bad_values_stop_the_operator(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match=next(iter(env))):
        OperatorSettings.from_env(env)


def test_policy_denied_is_a_failed_run_with_a_warning_event() -> None:
    change = status.policy_denied({}, 3, "denied by the operator's policy: x", "t")
    assert change.patch["phase"] == "Failed"
    failed = next(c for c in change.patch["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PolicyDenied"
    assert change.event is not None and change.event.reason == "PolicyDenied"
    again = status.policy_denied({**change.patch}, 3, "x", "t2")
    assert again is status.NO_CHANGE
