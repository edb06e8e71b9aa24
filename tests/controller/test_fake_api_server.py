"""The fake API server (tests/fakes.py) answers as the real kube-apiserver does, for what the
operator's unit tests rely on: each check runs against both, the real one on the dev cluster."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from meval_docs import evaluation_doc

from fakes import FakeApiServer, FakeKube, matches_labels, merge_patch
from mlmodelscope.contract.kube import (
    Kube,
    KubeError,
    all_evaluations_path,
    configmap_path,
    evaluation_path,
)
from mlmodelscope.devcluster.pytest_plugin import wait_for


@dataclass
class Api:
    kube: Kube
    namespace: str
    real: bool


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.cluster)])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    if request.param == "fake":
        server = FakeApiServer()
        server.add_namespace("fake-ns")
        yield Api(FakeKube(server), "fake-ns", real=False)
        return
    request.getfixturevalue("crds")
    namespace = request.getfixturevalue("namespace")
    yield Api(request.getfixturevalue("kube"), namespace, real=True)


def configmap(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}


def evaluation(api: Api, name: str = "e") -> dict[str, Any]:
    doc = evaluation_doc(name=name, namespace=api.namespace)
    for generated in ("uid", "generation", "creationTimestamp"):
        del doc["metadata"][generated]
    return api.kube.create(evaluation_path(api.namespace), doc)


def conflict(exc: pytest.ExceptionInfo[KubeError], reason: str) -> bool:
    return exc.value.status == 409 and exc.value.reason == reason


def test_create_twice_is_already_exists_and_a_missing_object_is_404(api: Api) -> None:
    path = configmap_path(api.namespace)
    created = api.kube.create(path, configmap("a"))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    assert created["metadata"]["namespace"] == api.namespace
    with pytest.raises(KubeError) as exc:
        api.kube.create(path, configmap("a"))
    assert conflict(exc, "AlreadyExists")
    assert api.kube.create_if_absent(path, configmap("a")) is False
    assert api.kube.get_or_none(configmap_path(api.namespace, "missing")) is None
    with pytest.raises(KubeError) as missing:
        api.kube.get(configmap_path(api.namespace, "missing"))
    assert missing.value.status == 404 and missing.value.reason == "NotFound"
    api.kube.delete(configmap_path(api.namespace, "missing"))  # already gone is fine


def test_creating_in_a_missing_namespace_is_404(api: Api) -> None:
    with pytest.raises(KubeError) as exc:
        api.kube.create(configmap_path("no-such-namespace-here"), configmap("a"))
    assert exc.value.status == 404 and exc.value.reason == "NotFound"


def test_a_patch_on_a_stale_resource_version_is_a_conflict(api: Api) -> None:
    path = configmap_path(api.namespace, "a")
    created = api.kube.create(configmap_path(api.namespace), configmap("a"))
    version = created["metadata"]["resourceVersion"]
    patched = api.kube.merge_patch(
        path, {"metadata": {"resourceVersion": version}, "data": {"k": "v"}}
    )
    assert patched["metadata"]["resourceVersion"] != version
    with pytest.raises(KubeError) as exc:
        api.kube.merge_patch(path, {"metadata": {"resourceVersion": version}, "data": {"k": "w"}})
    assert conflict(exc, "Conflict")
    assert api.kube.get(path)["data"] == {"k": "v"}
    same = api.kube.merge_patch(path, {"data": {"k": "v"}})
    assert same["metadata"]["resourceVersion"] == patched["metadata"]["resourceVersion"]
    nulled = api.kube.merge_patch(path, {"data": {"k": None}})
    assert not nulled.get("data")


def test_spec_changes_bump_the_generation_and_status_is_its_own_subresource(api: Api) -> None:
    created = evaluation(api)
    path = evaluation_path(api.namespace, "e")
    assert created["metadata"]["generation"] == 1 and "status" not in created
    relabelled = api.kube.merge_patch(path, {"metadata": {"labels": {"x": "y"}}})
    assert relabelled["metadata"]["generation"] == 1
    ignored = api.kube.merge_patch(path, {"status": {"phase": "Running"}})
    assert "status" not in ignored  # the object's own endpoint keeps the status as it was
    written = api.kube.merge_patch(
        path + "/status", {"status": {"phase": "Pending"}, "spec": {"timeout": "5m"}}
    )
    assert written["status"]["phase"] == "Pending"
    assert written["metadata"]["generation"] == 1
    assert written["spec"].get("timeout") == created["spec"].get("timeout")
    edited = api.kube.merge_patch(path, {"spec": {"timeout": "5m"}})
    assert edited["metadata"]["generation"] == 2 and edited["status"]["phase"] == "Pending"


def test_label_and_field_selectors_select_the_same_objects(api: Api) -> None:
    path = configmap_path(api.namespace)
    for name, labels in (("a", {"t": "1", "u": "x"}), ("b", {"t": "2"}), ("c", {})):
        api.kube.create(path, configmap(name, **labels))

    def names(selector: str) -> list[str]:
        return sorted(
            o["metadata"]["name"]
            for o in api.kube.list(path, selector)
            if o["metadata"]["name"] in "abc"
        )

    assert names("t=1") == ["a"]
    assert names("t==1,u=x") == ["a"]
    assert names("t!=1") == ["b", "c"]
    assert names("t in (1,2)") == ["a", "b"]
    assert names("t notin (1)") == ["b", "c"]
    assert names("t") == ["a", "b"]
    assert names("!t") == ["c"]
    by_name = api.kube.request("GET", path, params={"fieldSelector": "metadata.name=b"})
    assert [o["metadata"]["name"] for o in by_name["items"]] == ["b"]


def test_lists_come_in_pages_and_across_namespaces(api: Api) -> None:
    path = configmap_path(api.namespace)
    for i in range(5):
        api.kube.create(path, configmap(f"p{i}", page="yes"))
    sizes = [len(page) for page in api.kube.pages(path, "page=yes", limit=2)]
    assert sizes == [2, 2, 1]
    evaluation(api, "everywhere")
    names = [
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in api.kube.list(all_evaluations_path())
    ]
    assert (api.namespace, "everywhere") in names


def test_owned_objects_go_with_their_owner(api: Api) -> None:
    owner = evaluation(api, "owner")
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    child = configmap("child")
    child["metadata"]["ownerReferences"] = [reference]
    api.kube.create(configmap_path(api.namespace), child)
    api.kube.delete(evaluation_path(api.namespace, "owner"))
    gone = configmap_path(api.namespace, "child")
    wait_for("the garbage collector", lambda: api.kube.get_or_none(gone) is None, 60)


def test_a_finalizer_holds_a_deleted_object_until_it_is_removed(api: Api) -> None:
    body = configmap("held")
    body["metadata"]["finalizers"] = ["mlmodelscope.io/test"]
    api.kube.create(configmap_path(api.namespace), body)
    path = configmap_path(api.namespace, "held")
    api.kube.delete(path)
    held = api.kube.get(path)
    assert held["metadata"]["deletionTimestamp"]
    api.kube.merge_patch(path, {"metadata": {"finalizers": None}})
    wait_for("the object to go", lambda: api.kube.get_or_none(path) is None, 30)


def test_the_fake_logs_watch_events_and_counts_requests() -> None:
    server = FakeApiServer()
    server.add_namespace("n")
    kube = FakeKube(server)
    kube.create(configmap_path("n"), configmap("a"))
    kube.merge_patch(configmap_path("n", "a"), {"data": {"k": "v"}})
    kube.delete(configmap_path("n", "a"))
    assert [(e.type, e.key) for e in server.changes(resource="configmaps")] == [
        ("ADDED", ("n", "a")),
        ("MODIFIED", ("n", "a")),
        ("DELETED", ("n", "a")),
    ]
    assert server.requests == {
        ("create", "configmaps"): 1,
        ("patch", "configmaps"): 1,
        ("delete", "configmaps"): 1,
    }


def test_selector_and_merge_patch_helpers() -> None:
    assert matches_labels({"a": "1"}, "a in (1, 2)")
    assert not matches_labels({"a": "1"}, "a,b")
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": [1]}}) == {
        "a": {"c": 2, "d": [1]}
    }
