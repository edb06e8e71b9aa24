"""Kube's paged LIST against the real API server: every object once, in pages of the limit."""

from __future__ import annotations

from mlmodelscope.contract.kube import Kube, configmap_path
from mlmodelscope.devcluster.cluster import Cluster


def test_pages_walk_the_continue_tokens_and_list_joins_them(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    for i in range(7):
        body = {"metadata": {"name": f"paged-{i}", "labels": {"paged": "yes"}}, "data": {}}
        kube.create(configmap_path(namespace), body)
    pages = list(kube.pages(configmap_path(namespace), "paged=yes", limit=3))
    assert [len(p) for p in pages] == [3, 3, 1]
    names = [item["metadata"]["name"] for page in pages for item in page]
    assert sorted(names) == [f"paged-{i}" for i in range(7)]
    listed = kube.list(configmap_path(namespace), "paged=yes")
    assert sorted(item["metadata"]["name"] for item in listed) == sorted(names)
