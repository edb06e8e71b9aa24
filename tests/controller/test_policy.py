"""Operator policy (#15, defect 9): what a spec may ask its Job to use, checked before any Job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from mlmodelscope.controller import namespace_policy, policy, status
from mlmodelscope.controller.settings import OperatorSettings, SettingsError
from mlmodelscope.controller.status import Observed
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


def test_a_claim_named_by_any_file_field_is_checked_naming_those_fields(
    make_evaluation: Make,
) -> None:
    """A folder dataset's images and a labels file on a claim the policy does not allow: one
    denial for the claim, naming both fields (the Job would mount it)."""
    ev = make_evaluation(
        model={"uri": "pvc://models/m.onnx"},
        dataset={"type": "imagefolder", "path": "pvc://private/val"},
        postprocessing=[{"labels": {"uri": "pvc://private/names.txt"}}, {"argmax": {}}],
    )
    [problem] = denials(ev, {"MLMS_OPERATOR_ALLOW_PVCS": "models"})
    assert "pvc://private (spec.dataset.path, spec.postprocessing[0].labels.uri)" in problem


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
    change = status.policy_denied(Observed.of({}), 3, "denied by the operator's policy: x", "t")
    assert change.patch["phase"] == "Failed"
    failed = next(c for c in change.patch["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PolicyDenied"
    assert change.event is not None and change.event.reason == "PolicyDenied"
    again = status.policy_denied(Observed.of({**change.patch}), 3, "x", "t2")
    assert again is status.NO_CHANGE


# ------------------------------------------------ per namespace: annotations only narrow

NS = "team-a"


def narrowed(
    ev: ModelEvaluation, annotations: dict[str, str], env: dict[str, str] | None = None
) -> list[str]:
    """Denials with the operator's settings (``env``) narrowed by a Namespace's annotations."""
    settings = OperatorSettings.from_env(env or {})
    rules = namespace_policy.rules_from_annotations(NS, annotations)
    effective = replace(settings.policy, namespace=rules)
    return policy.denials(ev, effective, settings.agent_images())


def test_a_namespace_without_policy_annotations_changes_nothing(make_evaluation: Make) -> None:
    ev = make_evaluation(model={"uri": "pvc://models/m.onnx"})
    rules = namespace_policy.rules_from_annotations(NS, {"owner": "team-a", "x.io/y": "1"})
    assert rules == policy.NamespaceRules(NS)
    assert narrowed(ev, {"owner": "team-a"}) == denials(ev) == []


def test_a_namespace_forbids_claims_the_operator_allows_naming_annotation_and_setting(
    make_evaluation: Make,
) -> None:
    ev = make_evaluation(model={"uri": "pvc://models/m.onnx"})
    [problem] = narrowed(ev, {"policy.mlmodelscope.io/allow-pvcs": "false"})
    assert "PersistentVolumeClaim 'models'" in problem
    assert "not allowed in namespace 'team-a'" in problem
    assert "policy.mlmodelscope.io/allow-pvcs='false'" in problem
    assert "narrows MLMS_OPERATOR_ALLOW_PVCS=true" in problem
    assert "whoever may edit Namespace 'team-a'" in problem
    assert narrowed(ev, {"policy.mlmodelscope.io/allow-pvcs": "models,other"}) == []


def test_allowances_intersect_names_and_and_booleans(make_evaluation: Make) -> None:
    """Operator {a, b} and namespace {b, c}: only b; true and false: false."""
    env = {"MLMS_OPERATOR_ALLOW_SECRET_REFS": "a,b"}
    ann = {"policy.mlmodelscope.io/allow-secret-refs": "b,c"}

    def with_secret(name: str) -> ModelEvaluation:
        return make_evaluation(
            model={"uri": "s3://bucket/m.onnx", "credentialsSecretRef": {"name": name}}
        )

    assert narrowed(with_secret("b"), ann, env) == []
    [a] = narrowed(with_secret("a"), ann, env)
    assert "in namespace 'team-a'" in a and "allow-secret-refs='b,c'" in a
    [c] = narrowed(with_secret("c"), ann, env)
    assert "MLMS_OPERATOR_ALLOW_SECRET_REFS=a,b" in c and "in namespace" not in c
    everything = {"MLMS_OPERATOR_ALLOW_SECRET_REFS": "true"}
    [off] = narrowed(
        with_secret("b"), {"policy.mlmodelscope.io/allow-secret-refs": "no"}, everything
    )
    assert "allow-secret-refs='false'" in off and "ALLOW_SECRET_REFS=true" in off


def test_a_namespace_cannot_widen_what_the_operator_forbids(make_evaluation: Make) -> None:
    """A tenant's annotation allowing more than the operator has no effect; the message says
    why the annotation did not help."""
    secret = make_evaluation(
        model={"uri": "s3://bucket/m.onnx", "credentialsSecretRef": {"name": "db-password"}}
    )
    [problem] = narrowed(secret, {"policy.mlmodelscope.io/allow-secret-refs": "true"})
    assert "MLMS_OPERATOR_ALLOW_SECRET_REFS=false" in problem
    assert "policy.mlmodelscope.io/allow-secret-refs on Namespace 'team-a' allows it" in problem
    assert "only narrows" in problem
    image = make_evaluation(framework={"name": "onnxruntime", "image": "evil.io/miner:1"})
    for prefixes in ("evil.io/", "*"):
        ann = {"policy.mlmodelscope.io/allowed-image-prefixes": prefixes}
        [problem] = narrowed(image, ann)
        assert "MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES" in problem and "only narrows" in problem
    keyless = make_evaluation(hardware={"tolerations": [{"operator": "Exists"}]})
    env = {"MLMS_OPERATOR_ALLOWED_TOLERATIONS": "pool"}
    ann = {"policy.mlmodelscope.io/allowed-tolerations": "true"}
    [problem] = narrowed(keyless, ann, env)
    assert "MLMS_OPERATOR_ALLOWED_TOLERATIONS=pool" in problem


def test_namespace_image_prefixes_must_also_pass_the_operators(make_evaluation: Make) -> None:
    """Operator ghcr.io/acme/, namespace ghcr.io/acme/vision/ and elsewhere.io/: only images
    under ghcr.io/acme/vision/ pass both; the operator's agent repositories stay allowed."""
    env = {"MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES": "ghcr.io/acme/"}
    ann = {"policy.mlmodelscope.io/allowed-image-prefixes": "ghcr.io/acme/vision/,elsewhere.io/"}

    def image(ref: str) -> ModelEvaluation:
        return make_evaluation(framework={"name": "onnxruntime", "image": ref})

    assert narrowed(image("ghcr.io/acme/vision/agent:1"), ann, env) == []
    [inside] = narrowed(image("ghcr.io/acme/nlp/agent:1"), ann, env)
    assert "not under an image prefix allowed in namespace 'team-a'" in inside
    assert "allowed-image-prefixes='ghcr.io/acme/vision/,elsewhere.io/'" in inside
    assert "narrows MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES" in inside
    [outside] = narrowed(image("elsewhere.io/agent:1"), ann, env)
    assert "an administrator may add its prefix to MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES" in outside
    own = OperatorSettings.from_env({}).agent_images()[0]
    only_own = {"policy.mlmodelscope.io/allowed-image-prefixes": ""}
    assert narrowed(image(own), only_own, env) == []
    assert narrowed(image("ghcr.io/acme/vision/agent:1"), only_own, env)


def test_namespace_tolerations_intersect_and_keyless_needs_both_true(make_evaluation: Make) -> None:
    ann = {"policy.mlmodelscope.io/allowed-tolerations": "pool"}
    ev = make_evaluation(
        hardware={"tolerations": [{"key": "pool"}, {"key": "gpu-a100"}, {"operator": "Exists"}]}
    )
    problems = narrowed(ev, ann)
    assert [p.split(" tolerates ")[0] for p in problems] == [
        "spec.hardware.tolerations[1]",
        "spec.hardware.tolerations[2]",
    ]
    assert all("allowed-tolerations='pool'" in p for p in problems)
    assert "set the annotation to true" in problems[1]


@pytest.mark.parametrize(
    ("key", "value", "expects"),
    [
        ("allow-pvcs", "maybe;not", "true, false, or comma-separated claim names"),
        ("allow-secret-refs", "a b", "comma-separated Secret names"),
        ("allowed-tolerations", "x=y", "comma-separated taint keys"),
        ("allowed-image-prefixes", "ghcr.io/a, b c", "comma-separated image prefixes"),
    ],
)
def test_a_malformed_annotation_denies_every_evaluation_of_the_namespace(
    make_evaluation: Make, key: str, value: str, expects: str
) -> None:
    """Fail closed: an annotation the operator cannot read is not read as no policy."""
    [problem] = narrowed(make_evaluation(), {f"policy.mlmodelscope.io/{key}": value})
    assert f"Namespace 'team-a' has annotation policy.mlmodelscope.io/{key}={value!r}" in problem
    assert "which is malformed (expected " in problem and expects in problem
    assert "must fix or remove it" in problem
    assert "every evaluation in the namespace is denied" in problem


def test_an_unknown_policy_annotation_denies_and_suggests_the_known_one(
    make_evaluation: Make,
) -> None:
    """A typo must not leave the namespace silently wider than its administrator meant."""
    [problem] = narrowed(make_evaluation(), {"policy.mlmodelscope.io/allow-pvc": "false"})
    assert "policy.mlmodelscope.io/allow-pvc, which is not an operator policy annotation" in (
        problem
    )
    assert "did you mean policy.mlmodelscope.io/allow-pvcs?" in problem
