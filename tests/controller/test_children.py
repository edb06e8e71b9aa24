"""The objects an evaluation's Job needs (controller/children.py), against the shared fake API
server: all created in one go, existing ones made current, foreign ones never adopted."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from meval_docs import evaluation_doc

from fakes import FakeApiServer, FakeKube, Request
from mlmodelscope.contract.kube import configmap_path, evaluation_path
from mlmodelscope.controller import children, names
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.runs import ForeignChildError
from mlmodelscope.controller.runtime.fanout import Fanout
from mlmodelscope.controller.settings import SERVICE_ACCOUNT, OperatorSettings
from mlmodelscope.controller.specs import parse_body
from mlmodelscope.spec import ModelEvaluation

NAMESPACE = "team-a"
CREATED = {
    ("create", "configmaps"): 2,
    ("create", "serviceaccounts"): 1,
    ("create", "roles"): 1,
    ("create", "rolebindings"): 1,
}


def setup(settings: OperatorSettings | None = None) -> tuple[Context, FakeKube]:
    kube = FakeKube(FakeApiServer())
    kube.server.add_namespace(NAMESPACE)
    return Context(settings=settings or OperatorSettings(), kube=kube), kube


def stored(kube: FakeKube) -> ModelEvaluation:
    return parse_body(
        kube.server.seed(evaluation_path(NAMESPACE), evaluation_doc("e", NAMESPACE)), kube
    )


def test_a_new_evaluation_gets_its_five_children_and_nothing_is_read() -> None:
    ctx, kube = setup()
    evaluation = stored(kube)
    kube.requests.clear()
    assert children.ensure(ctx, evaluation) is None  # the results ConfigMap is new: empty
    assert dict(kube.requests) == CREATED
    for name in ("e-spec", "e-results"):
        owned = kube.get(configmap_path(NAMESPACE, name))
        assert names.owned_by(owned, evaluation.metadata.uid)


def test_with_a_shared_job_account_only_the_configmaps_are_made() -> None:
    ctx, kube = setup(OperatorSettings(results_access=SERVICE_ACCOUNT, job_service_account="x"))
    evaluation = stored(kube)
    kube.requests.clear()
    children.ensure(ctx, evaluation)
    assert dict(kube.requests) == {("create", "configmaps"): 2}


def test_the_children_are_created_at_once_and_the_binding_after_its_role() -> None:
    """Four creates are in flight together: each waits in the server's hook until all four
    have arrived (one after another they would time out). The RoleBinding comes after them:
    the API server checks a binding against its Role (404 while the Role is missing)."""
    ctx, kube = setup()
    evaluation = stored(kube)
    arrived = threading.Barrier(4, timeout=10)
    seen: list[str] = []

    class Concurrent(FakeKube):
        def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
            if method == "POST":
                seen.append(path)
                if not path.endswith("/rolebindings"):
                    arrived.wait()
                elif not kube.server.of("roles", NAMESPACE):
                    raise AssertionError("the RoleBinding was created before its Role")
            return super().request(method, path, body, **kw)

    concurrent = Concurrent(kube.server)
    children.ensure(Context(settings=ctx.settings, kube=concurrent, fanout=Fanout(8)), evaluation)
    assert len(seen) == 5 and seen[-1].endswith("/rolebindings")


def test_the_order_is_the_one_declared_beside_the_access_objects() -> None:
    """agent_access.OBJECTS says the RoleBinding comes after its Role; a child waiting for an
    object that is not among them is an error, not a child left out."""
    ctx, kube = setup()
    waves = children.waves(children.wanted(ctx, stored(kube)))
    assert [[c.resource for c in wave] for wave in waves] == [
        ["configmaps", "configmaps", "serviceaccounts", "roles"],
        ["rolebindings"],
    ]
    astray = dataclasses.replace(waves[1][0], after="clusterroles")
    with pytest.raises(ValueError, match="rolebindings after clusterroles"):
        children.waves([*waves[0], astray])


def test_an_edit_makes_the_configmaps_current_and_empties_the_results() -> None:
    ctx, kube = setup()
    first = stored(kube)
    children.ensure(ctx, first)
    published = {"data": {"result-1": "{}"}}
    kube.merge_patch(configmap_path(NAMESPACE, "e-results"), published)
    edit = {"spec": {"scenario": {"batchSizes": [4]}}}
    second = parse_body(kube.merge_patch(evaluation_path(NAMESPACE, "e"), edit), kube)
    kube.requests.clear()
    results = children.ensure(ctx, second)
    assert results is not None and not results.get("data")
    labels = results["metadata"]["labels"]
    assert labels[names.LABEL_GENERATION] == "2"
    spec = kube.get(configmap_path(NAMESPACE, "e-spec"))
    assert spec["metadata"]["labels"][names.LABEL_GENERATION] == "2"
    assert "batchSizes:\n    - 4" in next(iter(spec["data"].values()))
    # Each exists: one create tried and one read per child, a patch for each ConfigMap.
    assert kube.requests[("patch", "configmaps")] == 2
    assert kube.requests[("get", "serviceaccounts")] == 1


def test_a_child_of_another_object_is_not_adopted() -> None:
    """An earlier evaluation's account, not yet garbage-collected: wait, never adopt it; the
    others are still made (owned by this evaluation, they go with it)."""
    ctx, kube = setup()
    evaluation = stored(kube)
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": names.agent_service_account_name("e"),
            "namespace": NAMESPACE,
            "ownerReferences": [{"uid": "someone-else", "kind": "ModelEvaluation", "name": "e"}],
        },
    }
    kube.server.seed(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", account)
    with pytest.raises(ForeignChildError, match="ServiceAccount e-agent belongs to another"):
        children.ensure(ctx, evaluation)
    assert {c["metadata"]["name"] for c in kube.server.of("configmaps", NAMESPACE)} == {
        "e-spec",
        "e-results",
    }


def test_a_failed_create_is_raised_after_the_others_finished() -> None:
    ctx, kube = setup()
    evaluation = stored(kube)

    def refuse_roles(request: Request) -> None:
        if request.method == "POST" and "/roles" in request.path:
            raise OSError("connection reset")

    kube.server.before = refuse_roles
    with pytest.raises(OSError, match="connection reset"):
        children.ensure(ctx, evaluation)
    assert len(kube.server.of("serviceaccounts", NAMESPACE)) == 1
    assert len(kube.server.of("configmaps", NAMESPACE)) == 2
    assert kube.server.of("rolebindings", NAMESPACE) == []  # never without its Role
