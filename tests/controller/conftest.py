"""Fixtures for the operator tests: ModelEvaluation documents and validated objects, and, for
the tests on the real control plane, the CRDs, the agent's RBAC and operators to start."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from meval_docs import evaluation_doc
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.spec import ModelEvaluation, parse_evaluation

REPO = Path(__file__).resolve().parents[2]
AGENT_SA = "mlmodelscope-agent"

DocFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def make_doc() -> DocFactory:
    return evaluation_doc


@pytest.fixture
def make_evaluation() -> Callable[..., ModelEvaluation]:
    def build(**kwargs: Any) -> ModelEvaluation:
        return parse_evaluation(evaluation_doc(**kwargs))

    return build


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    """The project's CRDs, applied as shipped in crds/, and served."""
    kube = Kube(cluster.api_client())
    for path in sorted((REPO / "crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        crd_path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"

        def established(p: str = crd_path) -> bool:
            conditions = (kube.get(p).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_for(f"CRD {name} to be established", established, 60)


@pytest.fixture(scope="session")
def digits_onnx() -> Path:
    from mlmodelscope.agent.digits import ensure_digits_models

    return ensure_digits_models() / "digits.onnx"


@pytest.fixture
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster.api_client())


@pytest.fixture
def agent_rbac(cluster: Cluster, namespace: str) -> str:
    """A shared agent ServiceAccount with the Role docs/operator.md asks for with
    ``service-account`` results access (patch ConfigMaps, as tests/packaging/rbac_table.py's
    AGENT), in the test namespace. Tests that pass it as MLMS_OPERATOR_JOB_SERVICE_ACCOUNT run
    that mode; the default, per-evaluation accounts, needs no fixture (the operator creates
    them: test_agent_access_cluster.py)."""
    manifests = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT_SA}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": AGENT_SA},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": AGENT_SA},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_SA},
            "subjects": [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": namespace}],
        },
    ]
    for manifest in manifests:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    return AGENT_SA


@pytest.fixture
def start_operator(
    cluster: Cluster, namespace: str, crds: None, tmp_path: Path
) -> Iterator[Callable[..., OperatorProcess]]:
    """Start (and always stop) operators for this test's namespace; settings as keywords,
    e.g. ``start_operator(MLMS_OPERATOR_MAX_RUNNING="2")``. ``standalone=False`` leaves out
    ``--standalone`` (peering, with MLMS_OPERATOR_PEERING). Each operator logs to its own
    file; restarts write on after the previous operator's lines unless ``log`` names one."""
    started: list[OperatorProcess] = []

    def start(
        *args: str, standalone: bool = True, log: str = "operator.log", **env: str
    ) -> OperatorProcess:
        op = OperatorProcess(cluster, namespace, tmp_path / log, env, list(args), standalone)
        op.start()
        started.append(op)
        return op

    try:
        yield start
    finally:
        for op in started:
            op.stop()
        if started:
            sys.stderr.write(f"--- operator log ({namespace})\n{started[-1].tail(60)}\n")
