"""Hostile ModelEvaluations on a real kube-apiserver with the generated CRD: the server and
the local validator agree. A document the server accepts passes the pydantic models the CRD
is generated from; one they refuse, the server refuses too, naming the same field.

Semantic checks (a format the framework cannot load) are the operator's, so the schema-level
model (ModelEvaluationResource) is the local side here; the operator's side is tested in
tests/controller/test_hostile_operator_cluster.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile import Hostile, hostile_requests, replace
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.spec.document import ModelEvaluationResource, problems_from_validation_error

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def crd_cluster(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.wait_established("modelevaluations.mlmodelscope.io")
    return cluster


SERVER_STRICTER = {"spec.scenario.targetQPS"}
"""Where the server refuses what the models accept: a fractional targetQPS must be a string
in the CRD (int-or-string), while `mlms run` also reads 12.5 as a number."""


def server_verdict(cluster: Cluster, namespace: str, hostile: Hostile) -> str:
    """'' when the API server accepts the document (server-side dry run with strict field
    validation, as `kubectl apply` does), else its error."""
    proc = cluster.kubectl(
        "apply", "-n", namespace, "--dry-run=server", "--validate=strict", "-f", "-",
        input=json.dumps(hostile.document), check=False,
    )  # fmt: skip
    return "" if proc.returncode == 0 else proc.stderr


def local_problems(hostile: Hostile) -> list[str]:
    """The paths the CRD's source models name ([] when they accept the document)."""
    try:
        ModelEvaluationResource.model_validate(hostile.document)
    except ValidationError as exc:
        return [p.path for p in problems_from_validation_error(exc, ModelEvaluationResource)]
    return []


def named(path: str, error: str) -> bool:
    """Whether the server's error names ``path``; for an unknown key the local message
    quotes or hides (spec.model['../x']), the server's unknown field under the same parent."""
    if path in error:
        return True
    head, bracket, _key = path.partition("[")
    return bool(bracket) and not head.endswith("]") and f'unknown field "{head}.' in error


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(hostile=hostile_requests())
def test_the_api_server_and_the_local_models_agree_on_hostile_documents(
    crd_cluster: Cluster, namespace: str, hostile: Hostile
) -> None:
    error = server_verdict(crd_cluster, namespace, hostile)
    paths = local_problems(hostile)
    if not error:
        assert paths == [], f"{hostile.field}: the server accepted what pydantic refuses: {paths}"
        return
    if not paths and hostile.field in SERVER_STRICTER:
        assert hostile.field in error, error
        return
    assert paths, f"{hostile.field}: pydantic accepted what the server refuses: {error}"
    assert any(named(p, error) for p in paths), f"{hostile.field}: {paths} not in {error}"


FIXED = [
    (("spec", "model", "uri"), "pvc://../etc/passwd"),
    (("spec", "model", "uri"), "pvc://claim/../../etc/passwd"),
    (("spec", "dataset", "path"), "pvc://claim/../../etc/passwd"),
    (("spec", "dataset", "annotations"), "pvc://../etc/passwd"),
    (("spec", "scenario", "batchSizes"), [1, 2**40]),
    (("spec", "model", "inputs", 0, "shape"), [-1, 2**40]),
    (("spec", "scenario", "targetQPS"), 10_000_000),
    (("spec", "postprocessing", 0, "softmax", "axis"), 99),
    (("spec", "hardware", "tolerations", 0, "tolerationSeconds"), 60),
    (("spec", "hardware", "gpus"), True),
    (("spec", "hardware", "nodeSelector"), {"Bad Key!": "gpu"}),
    (("spec", "hardware", "nodeSelector"), {"a" * 254 + "/pool": "gpu"}),
    (("spec", "hardware", "nodeSelector", "pool"), "a b!"),
    (("spec", "hardware", "tolerations", 0, "key"), "nvidia.com/gpu product"),
    (("spec", "hardware", "tolerations", 0, "key"), ""),
    (("spec", "hardware", "tolerations", 0, "value"), "-v"),
]
"""The values this issue's fixes made the models refuse (issue 15; the label syntax of
nodeSelector and tolerations, issue 32): the CRD refuses them the same way."""


def test_the_api_server_refuses_what_the_hostile_input_fixes_refuse(
    crd_cluster: Cluster, namespace: str
) -> None:
    for place, value in FIXED:
        hostile = replace(place, value)
        paths = local_problems(hostile)
        error = server_verdict(crd_cluster, namespace, hostile)
        assert paths and error, (hostile.field, paths, error)
        assert any(named(p, error) for p in paths), (paths, error)


def test_the_api_server_refuses_userinfo_in_an_s3_uri_without_repeating_it(
    crd_cluster: Cluster, namespace: str
) -> None:
    """The issue's hostile URI is refused at admission, naming the field and the fix; the
    error repeats no part of the credential, and nothing is created (no status, no Event)."""
    hostile = replace(("spec", "model", "uri"), "s3://AKIAEXAMPLE:secretkey@bucket/m.onnx")
    proc = crd_cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(hostile.document), check=False
    )
    assert proc.returncode != 0
    assert "spec.model.uri" in proc.stderr and "credentialsSecretRef" in proc.stderr
    assert "secretkey" not in proc.stderr + proc.stdout
    assert "AKIAEXAMPLE" not in proc.stderr + proc.stdout
    listed = crd_cluster.kubectl("get", "modelevaluations,events", "-n", namespace, "-o", "json")
    assert "secretkey" not in listed.stdout
