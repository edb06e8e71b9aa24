"""Which namespaces the operator reads (controller/scope.py)."""

from __future__ import annotations

import pytest
from meval_docs import evaluation_doc

from fakes import FakeApiServer, FakeKube
from mlmodelscope.contract.kube import evaluation_path
from mlmodelscope.controller import scope
from mlmodelscope.controller.admission import admit
from mlmodelscope.controller.context import Context
from mlmodelscope.controller.settings import OperatorSettings


@pytest.mark.parametrize(
    ("namespace", "patterns", "covered"),
    [
        ("a", (), True),
        ("team-a", ("team-a",), True),
        ("team-b", ("team-a",), False),
        ("ml-x", ("ml-*",), True),
        ("ml-secret", ("ml-*", "!ml-secret"), False),
        ("other", ("!kube-system",), True),
        ("kube-system", ("!kube-system",), False),
    ],
)
def test_the_patterns_cover_the_watched_namespaces(
    namespace: str, patterns: tuple[str, ...], covered: bool
) -> None:
    assert scope.covers(namespace, patterns) is covered


@pytest.mark.parametrize(
    ("patterns", "plain"),
    [
        ((), None),
        (("team-a", "team-b"), ("team-a", "team-b")),
        (("team-a", "ml-*"), None),
        (("!kube-system",), None),
    ],
)
def test_plain_names_are_read_one_namespace_at_a_time(
    patterns: tuple[str, ...], plain: tuple[str, ...] | None
) -> None:
    assert scope.plain_names(patterns) == plain


@pytest.mark.parametrize(
    ("patterns", "reconciled"),
    [
        (("team-a",), {"team-a"}),
        (("team-*",), {"team-a", "team-b"}),
        ((), {"team-a", "team-b", "other"}),
    ],
)
def test_the_resync_lists_only_the_watched_namespaces(
    patterns: tuple[str, ...], reconciled: set[str]
) -> None:
    """With a glob the resync lists cluster-wide: what it keeps is still only what the
    operator watches."""
    server = FakeApiServer()
    kube = FakeKube(server)
    for namespace in ("team-a", "team-b", "other"):
        server.add_namespace(namespace)
        doc = evaluation_doc(name="e", namespace=namespace)
        doc["status"] = {"phase": "Pending", "jobName": "e-g1", "observedGeneration": 1}
        server.seed(evaluation_path(namespace), doc)
    ctx = Context(settings=OperatorSettings(namespaces=patterns), kube=kube)
    listing = admit.sync_ledger(ctx)
    assert {namespace for namespace, _ in listing.evaluations} == reconciled
