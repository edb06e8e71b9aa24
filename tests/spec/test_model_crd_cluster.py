"""The Model CRD on a real kube-apiserver: the catalog is admitted, hostile Models and
evaluations (no model, both model and modelRef, an export repeating the format) are refused
naming the field pydantic names, sweeps of Models are admitted, and `kubectl explain` reads
the manifest's docstrings."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_server import explain, server_dry_run
from spec_cases import DIGITS, evaluation, model, ref_sweep

from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.spec import SpecValidationError, parse_evaluation
from mlmodelscope.spec.manifest import parse_model

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).parents[2]
CATALOG = sorted((ROOT / "examples" / "catalog").glob("*.yaml"))


@pytest.fixture(scope="module")
def model_cluster(cluster: Cluster) -> Cluster:
    cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    for crd in ("modelevaluations", "evaluationsweeps", "models"):
        cluster.wait_established(f"{crd}.mlmodelscope.io")
    return cluster


def test_the_catalog_is_admitted(model_cluster: Cluster, namespace: str) -> None:
    assert CATALOG, "examples/catalog/ holds the Model manifests"
    for path in CATALOG:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                assert server_dry_run(model_cluster, namespace, document) == "", path


def both() -> dict[str, Any]:
    document = evaluation()
    del document["metadata"]["namespace"]
    document["spec"]["model"] = DIGITS["spec"]["model"]
    return document


def neither() -> dict[str, Any]:
    document = evaluation()
    del document["metadata"]["namespace"]
    del document["spec"]["modelRef"]
    return document


def repeated_export() -> dict[str, Any]:
    document = copy.deepcopy(DIGITS)
    document["spec"]["exports"] = [{"format": "onnx", "uri": "file:///m.onnx"}]
    return document


HOSTILE = [
    pytest.param(model("m"), parse_model, "spec.model", "set model, or basedOn", id="empty"),
    pytest.param(
        repeated_export(), parse_model, "spec.exports", "an export repeats", id="export repeats"
    ),
    pytest.param(both(), parse_evaluation, "spec", "set exactly one of model, modelRef", id="both"),
    pytest.param(
        neither(), parse_evaluation, "spec", "set exactly one of model, modelRef", id="neither"
    ),
]


@pytest.mark.parametrize(("document", "parse", "path", "message"), HOSTILE)
def test_admission_refuses_what_python_refuses(
    model_cluster: Cluster,
    namespace: str,
    document: dict[str, Any],
    parse: Any,
    path: str,
    message: str,
) -> None:
    with pytest.raises(SpecValidationError, match=message):
        parse(document)
    error = server_dry_run(model_cluster, namespace, document)
    assert path in error and message in error, error


def test_a_sweep_of_models_is_admitted(model_cluster: Cluster, namespace: str) -> None:
    assert server_dry_run(model_cluster, namespace, DIGITS) == ""
    sweep = ref_sweep({"name": "cnn", "modelRef": {"name": "digits-cnn"}})
    assert server_dry_run(model_cluster, namespace, sweep) == ""
    entry = {"name": "x", "modelRef": {"name": "digits-cnn"}, "model": DIGITS["spec"]["model"]}
    error = server_dry_run(model_cluster, namespace, ref_sweep(entry))
    assert "set exactly one of model, modelRef" in error, error


def test_kubectl_explain_reads_well(model_cluster: Cluster) -> None:
    top = explain(model_cluster, "models")
    assert "reusable model manifest" in top and "records the version it used" in top
    spec = explain(model_cluster, "models.spec")
    for field in ("model", "exports", "preprocessing", "postprocessing", "task", "basedOn"):
        assert field in spec
    based_on = explain(model_cluster, "models.spec.basedOn")
    assert "every field set here replaces that Model's" in based_on
    ref = explain(model_cluster, "modelevaluation.spec.modelRef")
    assert "Resolved once, when the evaluation starts" in ref
    entry = explain(model_cluster, "evaluationsweep.spec.matrix.models.modelRef")
    assert "resolves it when it starts" in entry
