"""Per-namespace policy on the real control plane (issue #15, defect 9): a Namespace's
``policy.mlmodelscope.io/*`` annotations narrow the operator's policy there and never widen it.

The operator is a `mlms operator --standalone` subprocess watching the test's namespaces;
evaluations that run do so on the exec node (the agent really runs). The reads the operator
makes are also made here as a ServiceAccount without the right, against the real authorizer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cluster_evaluations import (
    apply,
    condition,
    evaluation,
    events_with,
    get,
    jobs,
    wait_phase,
)
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube
from mlmodelscope.controller import namespace_policy
from mlmodelscope.controller.policy import ALL, NONE
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

FAST = {"MLMS_OPERATOR_RESYNC_SECONDS": "1", "MLMS_OPERATOR_START_TIMEOUT_SECONDS": "3"}
ACME = "ghcr.io/acme/"
"""The operator-wide allowed image prefix in these tests."""
NARROW = {
    "policy.mlmodelscope.io/allowed-image-prefixes": "ghcr.io/acme/vision/,evil.io/",
    "policy.mlmodelscope.io/allow-pvcs": "false",
    "policy.mlmodelscope.io/allow-secret-refs": "true",
}
"""A platform team's narrowing (vision images only, no claims), plus two attempts to widen
what the operator forbids (evil.io images, Secret references): those must have no effect."""

MakeNamespace = Callable[[dict[str, str]], str]


@pytest.fixture
def make_namespace(cluster: Cluster, namespace: str) -> Iterator[MakeNamespace]:
    """Further namespaces beside the test's own, with annotations; deleted after."""
    kube = Kube(cluster.api_client())
    made: list[str] = []

    def make(annotations: dict[str, str]) -> str:
        name = f"{namespace}-{len(made) + 1}"
        body = {"apiVersion": "v1", "kind": "Namespace"}
        kube.create(
            "/api/v1/namespaces", {**body, "metadata": {"name": name, "annotations": annotations}}
        )
        made.append(name)
        return name

    try:
        yield make
    finally:
        for name in made:
            cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def image(ref: str) -> dict[str, object]:
    """spec.framework with an image (the exec node runs the agent whatever the image)."""
    return {"name": "onnxruntime", "intraOpThreads": 1, "image": ref}


def denial(kube: Kube, namespace: str, name: str) -> str:
    """The message of an evaluation that must end Failed/PolicyDenied."""
    ev = wait_phase(kube, namespace, name, ("Failed", "Succeeded"), 60)
    failed = condition(ev, "Failed")
    assert failed["reason"] == "PolicyDenied", failed
    assert "jobName" not in ev["status"]
    assert events_with(kube, namespace, name, "PolicyDenied")
    return str(failed["message"])


def test_an_annotated_namespace_denies_what_another_runs_and_cannot_widen_the_operator(
    cluster: Cluster,
    namespace: str,
    make_namespace: MakeNamespace,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    digits_onnx: Path,
) -> None:
    """The same specs in a plain namespace and in one whose annotations narrow the policy:
    an image outside the namespace's prefixes, and a pvc:// claim, get a Job in the first
    and end Failed/PolicyDenied naming the annotation and the namespace in the second; an
    image and a Secret reference the operator forbids are denied in the second as the
    operator's setting says, although its annotations allow them; an evaluation within both
    policies succeeds there."""
    narrow = make_namespace(NARROW)
    start_operator(
        MLMS_OPERATOR_NAMESPACES=f"{namespace},{narrow}",
        MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES=ACME,
        **FAST,
    )
    nlp = evaluation("nlp", digits_onnx, framework=image("ghcr.io/acme/nlp/agent:1"))
    claim = evaluation("claim", digits_onnx)
    claim["spec"]["model"]["uri"] = "pvc://models/digits.onnx"
    evil = evaluation("evil", digits_onnx, framework=image("evil.io/miner:1"))
    secret = evaluation("secret", digits_onnx)
    secret["spec"]["model"]["credentialsSecretRef"] = {"name": "db-password"}
    vision = evaluation("vision", digits_onnx, framework=image("ghcr.io/acme/vision/agent:1"))
    for manifest in (nlp, claim, evil, secret, vision):
        apply(cluster, narrow, manifest)
    for manifest in (nlp, claim):
        apply(cluster, namespace, manifest)

    message = denial(kube, narrow, "nlp")
    assert "spec.framework.image 'ghcr.io/acme/nlp/agent:1'" in message, message
    assert f"allowed in namespace {narrow!r}" in message
    assert "policy.mlmodelscope.io/allowed-image-prefixes='ghcr.io/acme/vision/,evil.io/'" in (
        message
    )
    assert "MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES" in message
    message = denial(kube, narrow, "claim")
    assert "PersistentVolumeClaim 'models'" in message and f"namespace {narrow!r}" in message
    assert "policy.mlmodelscope.io/allow-pvcs='false'" in message, message
    assert "narrows MLMS_OPERATOR_ALLOW_PVCS=true" in message

    message = denial(kube, narrow, "evil")  # the annotation's evil.io/ widens nothing
    assert "an administrator may add its prefix to MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES" in (
        message
    )
    assert "only narrows" in message, message
    message = denial(kube, narrow, "secret")  # nor does its allow-secret-refs: true
    assert "MLMS_OPERATOR_ALLOW_SECRET_REFS=false" in message and "only narrows" in message

    assert (
        wait_phase(kube, narrow, "vision", ("Failed", "Succeeded"), 120)["status"]["phase"]
        == "Succeeded"
    )
    assert [j["metadata"]["name"] for j in jobs(kube, narrow)] == ["vision-g1"]

    assert (
        wait_phase(kube, namespace, "nlp", ("Failed", "Succeeded"), 120)["status"]["phase"]
        == "Succeeded"
    )
    # past the policy: its Job exists (its pod waits for a claim that does not exist)
    wait_for(
        "the claim's Job",
        lambda: "claim-g1" in {j["metadata"]["name"] for j in jobs(kube, namespace)},
        60,
    )
    assert (get(kube, namespace, "claim")["status"] or {}).get("phase") != "Failed"


def test_a_malformed_annotation_denies_every_evaluation_of_its_namespace_only(
    cluster: Cluster,
    namespace: str,
    make_namespace: MakeNamespace,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    digits_onnx: Path,
) -> None:
    """Fail closed: an annotation the operator cannot parse denies even a plain evaluation
    there, naming the annotation and the fix; the operator keeps serving other namespaces."""
    broken = make_namespace({"policy.mlmodelscope.io/allow-pvcs": "models;data"})
    start_operator(MLMS_OPERATOR_NAMESPACES=f"{namespace},{broken}", **FAST)
    apply(cluster, broken, evaluation("plain", digits_onnx))
    apply(cluster, namespace, evaluation("plain", digits_onnx))
    message = denial(kube, broken, "plain")
    assert (
        f"Namespace {broken!r} has annotation policy.mlmodelscope.io/allow-pvcs='models;data'"
        in (message)
    )
    assert "malformed" in message and "must fix or remove it" in message, message
    assert jobs(kube, broken) == []
    assert (
        wait_phase(kube, namespace, "plain", ("Failed", "Succeeded"), 120)["status"]["phase"]
        == "Succeeded"
    )


def test_a_queued_evaluation_is_denied_when_its_namespace_narrowed_while_it_waited(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    start_operator: Callable[..., OperatorProcess],
    digits_onnx: Path,
) -> None:
    """Limit 1, held by an evaluation no node fits; a second one, allowed when it queued,
    waits. The namespace is then annotated to forbid its image: once the slot frees it ends
    Failed/PolicyDenied naming the annotation, and gets no Job."""
    start_operator(MLMS_OPERATOR_MAX_RUNNING="1", MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES=ACME, **FAST)
    holder = evaluation("holder", digits_onnx, hardware={"nodeSelector": {"no-such": "node"}})
    apply(cluster, namespace, holder)
    wait_for("the holder's Job", lambda: bool(jobs(kube, namespace)), 60)
    apply(cluster, namespace, evaluation("waiter", digits_onnx, framework=image(ACME + "nlp:1")))
    wait_phase(kube, namespace, "waiter", ("Queued",), 60)
    vision_only = "policy.mlmodelscope.io/allowed-image-prefixes=ghcr.io/acme/vision/"
    cluster.kubectl("annotate", "namespace", namespace, vision_only)
    time.sleep(namespace_policy.TTL_SECONDS)  # the operator's cached read of the namespace
    cluster.kubectl("delete", "meval", "holder", "-n", namespace)
    message = denial(kube, namespace, "waiter")
    assert "policy.mlmodelscope.io/allowed-image-prefixes='ghcr.io/acme/vision/'" in message
    assert [j["metadata"]["name"] for j in jobs(kube, namespace)] in ([], ["holder-g1"])


def test_namespace_rules_are_read_through_a_short_cache(
    cluster: Cluster, make_namespace: MakeNamespace, kube: Kube
) -> None:
    """Within the TTL a decision reads no Namespace (an annotation change is seen after it)."""
    name = make_namespace({"policy.mlmodelscope.io/allow-pvcs": "false"})
    now = [0.0]
    cache = namespace_policy.NamespacePolicies(ttl=10.0, clock=lambda: now[0])
    assert cache.rules(kube, name).pvcs == NONE
    cluster.kubectl("annotate", "namespace", name, "--overwrite",
                    "policy.mlmodelscope.io/allow-pvcs=true")  # fmt: skip
    now[0] = 9.9
    assert cache.rules(kube, name).pvcs == NONE
    now[0] = 10.0
    assert cache.rules(kube, name).pvcs == ALL


def test_a_namespace_the_operator_may_not_read_denies_with_the_fix(
    cluster: Cluster, namespace: str, make_namespace: MakeNamespace
) -> None:
    """As an account without get on namespaces (the real authorizer answers 403): every
    evaluation there is denied, saying which right is missing."""
    name = make_namespace({})
    client = cluster.api_client()
    client.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:default")
    rules = namespace_policy.read_rules(Kube(client), name)
    [problem] = rules.problems
    assert f"may not read Namespace {name!r} (403 Forbidden)" in problem, problem
    assert "get on namespaces" in problem


def test_a_missing_namespace_fails_closed(kube: Kube) -> None:
    [problem] = namespace_policy.read_rules(kube, f"absent-{int(time.time())}").problems
    assert "does not exist" in problem
