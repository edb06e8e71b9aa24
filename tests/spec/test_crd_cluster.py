"""The generated CRD on a real kube-apiserver: examples are accepted, and every bad spec the
pydantic models reject on the schema or CEL level is rejected by the server naming the same
field. Local and in-cluster validation come from one source, so they must agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from spec_cases import BAD_SPECS, mutate  # the same cases the local validation meets

from mlmodelscope.devcluster.cluster import Cluster

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted(
    [*(ROOT / "examples").glob("*.yaml"), *(ROOT / "examples").glob("cluster/*.yaml")]
)
SEMANTIC = {"format for framework", "cuda provider on cpu"}
"""Cases only the operator can judge (InvalidSpec): the CRD schema cannot express them."""


@pytest.fixture(scope="module")
def crd_cluster(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    cluster.wait_established("modelevaluations.mlmodelscope.io")
    return cluster


def server_dry_run(cluster: Cluster, namespace: str, document: dict[str, Any]) -> str:
    """kubectl's strict server-side validation, as a user's `kubectl apply` gets it."""
    proc = cluster.kubectl(
        "apply", "-n", namespace, "--dry-run=server", "--validate=strict", "-f", "-",
        input=yaml.safe_dump(document), check=False,
    )  # fmt: skip
    return "" if proc.returncode == 0 else proc.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT / "examples")))
def test_examples_are_accepted_by_the_api_server(
    crd_cluster: Cluster, namespace: str, example: Path
) -> None:
    for document in yaml.safe_load_all(example.read_text()):
        assert server_dry_run(crd_cluster, namespace, document) == ""


def test_api_server_names_the_field_like_pydantic(crd_cluster: Cluster, namespace: str) -> None:
    checked = 0
    for case in BAD_SPECS:
        field, value, path, _text = case.values
        if case.id in SEMANTIC:
            continue
        error = server_dry_run(crd_cluster, namespace, mutate(field, value))
        assert error, f"{case.id}: the API server accepted a spec pydantic rejects"
        assert path in error, f"{case.id}: expected {path} in {error}"
        checked += 1
    assert checked >= 10


def test_apply_and_print_columns(crd_cluster: Cluster, namespace: str) -> None:
    document = yaml.safe_load((ROOT / "examples" / "digits-server.yaml").read_text())
    crd_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(document))
    stored = yaml.safe_load(
        crd_cluster.kubectl(
            "get", "meval", "-n", namespace, "digits-server-peak", "-o", "yaml"
        ).stdout
    )
    # server-side defaults come from the same models
    assert stored["spec"]["hardware"]["device"] == "cpu"
    assert stored["spec"]["scenario"]["warmup"] == 10
    header = crd_cluster.kubectl("get", "meval", "-n", namespace).stdout.splitlines()[0]
    for column in (
        "PHASE",
        "MODEL",
        "FRAMEWORK",
        "DEVICE",
        "SCENARIO",
        "P50(MS)",
        "METRIC",
        "VALUE",
    ):
        assert column in header
    explain = crd_cluster.kubectl("explain", "modelevaluation.spec.scenario.targetQPS").stdout
    assert "FindPeakPerformance" in explain
