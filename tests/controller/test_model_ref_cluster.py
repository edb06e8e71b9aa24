"""Model manifests and modelRef against the real control plane: an evaluation resolves its
Model (and basedOn chain) when it starts, runs the digits model for real, and records which
Model versions it used; editing the Model afterwards changes nothing recorded; unknown Models
and cycles end Failed/InvalidSpec naming spec.modelRef.name; a sweep of Models creates
children that name the Model, and a sweep naming an unknown Model creates none."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_evaluations import (
    ENDED,
    EXEC_CPU,
    apply,
    children,
    sweep_manifest,
    sweep_status,
    wait_sweep,
)
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, configmap_path, evaluation_path, model_path
from mlmodelscope.contract.wire import RESULT_KEY, SPEC_KEY
from mlmodelscope.controller import names
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.spec.manifest import ANNOTATION_MANIFEST
from mlmodelscope.store import open_store

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

API = "mlmodelscope.io/v1alpha1"
QUICK = {"batchSizes": [8], "warmup": 2, "minQueryCount": 20, "minDuration": "20ms",
         "stability": {"maxWindows": 2}}  # fmt: skip
SCALED = [{"scale": {"factor": 0.0625}}, {"layout": {"from": "HWC", "to": "CHW"}}]


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def operator(
    start_operator: Callable[..., OperatorProcess], agent_rbac: str, store_url: str
) -> OperatorProcess:
    return start_operator(
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, MLMS_OPERATOR_STORE_URL=store_url
    )


def digits_model(name: str, models: Path) -> dict[str, Any]:
    """The digits CNN as a Model: ONNX, with a TorchScript export for pytorch."""
    return {
        "apiVersion": API,
        "kind": "Model",
        "metadata": {"name": name},
        "spec": {
            "task": "image-classification",
            "dataset": "digits",
            "model": {
                "name": "digits-cnn",
                "uri": f"file://{models / 'digits.onnx'}",
                "format": "onnx",
                "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
                "outputs": [{"name": "logits", "shape": [-1, 10]}],
            },
            "exports": [
                {"format": "torchscript", "uri": f"file://{models / 'digits.torchscript.pt'}"}
            ],
            "preprocessing": SCALED,
            "postprocessing": [{"softmax": {}}, {"topk": {"k": 5}}],
        },
    }


def variant(name: str, base: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Model", "metadata": {"name": name},
            "spec": {"basedOn": {"name": base}, **spec}}  # fmt: skip


def evaluation(name: str, ref: str, framework: str = "pytorch") -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModelEvaluation",
        "metadata": {"name": name},
        "spec": {
            "modelRef": {"name": ref},
            "framework": {"name": framework},
            "dataset": {"type": "digits"},
            "scenario": QUICK,
            "hardware": {"nodeSelector": EXEC_CPU},
            "timeout": "5m",
        },
    }


def status_of(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return dict(kube.get(evaluation_path(namespace, name)).get("status") or {})


def wait_ended(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    wait_for(
        f"{name} to end",
        lambda: status_of(kube, namespace, name).get("phase") in ENDED,
        300,
    )
    return status_of(kube, namespace, name)


def test_an_evaluation_resolves_its_model_once_and_records_the_version(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    operator: OperatorProcess,
    digits_onnx: Path,
    store_url: str,
) -> None:
    models = digits_onnx.parent
    apply(cluster, namespace, digits_model("digits-cnn", models))
    apply(cluster, namespace, variant("digits-unscaled", "digits-cnn",
                                      preprocessing=[SCALED[1]]))  # fmt: skip
    versions = {
        name: kube.get(model_path(namespace, name))["metadata"]["resourceVersion"]
        for name in ("digits-cnn", "digits-unscaled")
    }
    apply(cluster, namespace, evaluation("by-ref", "digits-cnn"))
    apply(cluster, namespace, evaluation("by-variant", "digits-unscaled", "onnxruntime"))
    good, variant_status = (wait_ended(kube, namespace, n) for n in ("by-ref", "by-variant"))
    assert good["phase"] == "Succeeded", good.get("message")
    assert variant_status["phase"] == "Succeeded", variant_status.get("message")
    assert good["summary"]["top1"] > 0.9

    # The spec the agent ran is the resolved one, with the versions it was resolved from.
    cm = kube.get(configmap_path(namespace, names.spec_configmap_name("by-ref")))
    ran = yaml.safe_load(cm["data"][SPEC_KEY])
    assert ran["spec"]["model"]["format"] == "torchscript"  # pytorch got the export
    assert ran["spec"]["preprocessing"] == SCALED
    record = json.loads(ran["metadata"]["annotations"][ANNOTATION_MANIFEST])
    assert record["chain"] == [
        {"name": "digits-cnn", "uid": record["chain"][0]["uid"],
         "resource_version": versions["digits-cnn"]},
    ]  # fmt: skip

    # ... and the result (and the store) say so too.
    with open_store(store_url) as store:
        wait_for("runs recorded", lambda: len(_ids(store)) == 2, 60)
        documents = {d["evaluation"]["name"]: d for d in map(store.get, _ids(store))}
    manifest = documents["by-variant"]["evaluation"]["model_manifest"]
    assert [(m["name"], m["resource_version"]) for m in manifest["chain"]] == [
        ("digits-unscaled", versions["digits-unscaled"]),
        ("digits-cnn", versions["digits-cnn"]),
    ]
    assert documents["by-variant"]["spec"]["preprocessing"] == [SCALED[1]]
    assert documents["by-variant"]["accuracy"]["top1"] < good["summary"]["top1"]

    # Editing the Model later rewrites no history: status, result and spec stay as run.
    cluster.kubectl(
        "patch", "model", "digits-cnn", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"preprocessing": [SCALED[1]]}}),
    )  # fmt: skip
    results = kube.get(configmap_path(namespace, names.results_configmap_name("by-ref")))
    operator.stop()
    operator.start()  # a restarted operator reconciles every evaluation again
    apply(cluster, namespace, evaluation("after-edit", "digits-cnn"))
    after = wait_ended(kube, namespace, "after-edit")  # so the restarted operator has worked
    assert after["phase"] == "Succeeded" and after["summary"]["top1"] < good["summary"]["top1"]
    assert status_of(kube, namespace, "by-ref")["runId"] == good["runId"]
    again = kube.get(configmap_path(namespace, names.results_configmap_name("by-ref")))
    assert again["data"][RESULT_KEY] == results["data"][RESULT_KEY]
    cm_after = kube.get(configmap_path(namespace, names.spec_configmap_name("by-ref")))
    assert yaml.safe_load(cm_after["data"][SPEC_KEY])["spec"]["preprocessing"] == SCALED

    table = cluster.kubectl("get", "meval", "-n", namespace).stdout
    assert "MODELREF" in table and "digits-unscaled" in table, table
    models_table = cluster.kubectl("get", "mlmodel", "-n", namespace).stdout  # the short name
    assert models_table.split("\n")[0].split()[:6] == [
        "NAME", "MODEL", "FORMAT", "TASK", "DATASET", "BASEDON",
    ], models_table  # fmt: skip


def _ids(store: Any) -> list[str]:
    return [run.run_id for run in store.list_runs()]


def test_unknown_models_and_cycles_end_invalid_spec(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess
) -> None:
    apply(cluster, namespace, variant("loop-a", "loop-b"))
    apply(cluster, namespace, variant("loop-b", "loop-a"))
    apply(cluster, namespace, evaluation("unknown", "no-such-model"))
    apply(cluster, namespace, evaluation("cyclic", "loop-a"))
    unknown, cyclic = (wait_ended(kube, namespace, n) for n in ("unknown", "cyclic"))
    for st in (unknown, cyclic):
        failed = next(c for c in st["conditions"] if c["type"] == "Failed")
        assert st["phase"] == "Failed" and failed["reason"] == "InvalidSpec", st
    assert (
        f"spec.modelRef.name: Model 'no-such-model' not found in namespace '{namespace}'"
        in unknown["message"]
    )
    assert "basedOn forms a cycle (loop-a -> loop-b -> loop-a)" in cyclic["message"]
    assert kube.list(f"/apis/batch/v1/namespaces/{namespace}/jobs") == []


def test_a_sweep_of_models_runs_children_that_name_the_model(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    operator: OperatorProcess,
    digits_onnx: Path,
) -> None:
    apply(cluster, namespace, digits_model("digits-cnn", digits_onnx.parent))
    matrix = {"models": [{"name": "cnn", "modelRef": {"name": "digits-cnn"}}],
              "frameworks": ["onnxruntime", "pytorch"]}  # fmt: skip
    manifest = sweep_manifest("by-model", matrix, parallelism=2)
    del manifest["spec"]["template"]["preprocessing"]  # the Model's applies
    apply(cluster, namespace, manifest)
    st = wait_sweep(kube, namespace, "by-model", lambda s: s.get("phase") in ENDED, "ended")
    assert st["phase"] == "Succeeded", st.get("message")
    assert all(row["top1"] > 0.9 for row in st["children"]), st["children"]
    for child in children(kube, namespace, "by-model"):
        assert child["spec"]["modelRef"] == {"name": "digits-cnn"}
        assert "model" not in child["spec"]

    bad = sweep_manifest("unknown-model", {
        "models": [{"name": "x", "modelRef": {"name": "nope"}}], "frameworks": ["onnxruntime"],
    })  # fmt: skip
    apply(cluster, namespace, bad)
    st = wait_sweep(kube, namespace, "unknown-model", lambda s: s.get("phase") == "Failed", "fail")
    assert "spec.matrix.models[0].modelRef.name: Model 'nope' not found" in st["message"]
    assert children(kube, namespace, "unknown-model") == []
    assert sweep_status(kube, namespace, "unknown-model")["created"] == 0
