"""The operator's Jobs in the project's images, on the real node, under Pod Security `restricted`.

Unlike the exec node (the agent as a host process from this venv), here each evaluation's pod
runs the framework's agent image in a container: the image's Python and wheels, its user, a
read-only root, the model from a PersistentVolumeClaim and the results published to the API
server through the `kubernetes` Service, as on any cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_evaluations import examples_claim
from operator_process import OperatorProcess

from mlmodelscope.agent.digits import FRAMEWORK_FORMATS, MODEL_FILES, digits_evaluation
from mlmodelscope.contract.kube import Kube, configmap_path, evaluation_path, job_path
from mlmodelscope.contract.wire import RESULT_KEY
from mlmodelscope.controller import names
from mlmodelscope.controller.settings import image_variable
from mlmodelscope.devcluster import node, registry
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.spec.evaluation import Device, FrameworkName

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
ON_REAL_NODE = {"nodeSelector": dict(node.SELECTOR), "tolerations": [dict(node.TOLERATION)]}
SCENARIO = {"batchSizes": [1, 8], "warmup": 2, "minQueryCount": 20, "minDuration": "10ms"}


def agent_images(node_images: dict[str, str]) -> dict[str, str]:
    """The operator's image variables for the CPU agents, as pushed to the cluster's registry
    (what a platform team sets through the chart's operator.images)."""
    return {
        image_variable(FrameworkName(f), Device.CPU): node_images[f"agent-{f}-cpu"]
        for f in FRAMEWORKS
    }


def models_claim(cluster: Cluster, namespace: str) -> str:
    """A claim in ``namespace`` bound to a hostPath volume holding the digits CNN in every
    format (the dev cluster's example models folder), as a platform team provides models."""
    claim = "digits-models"
    volume = f"{namespace}-models"
    manifests = examples_claim(cluster, namespace, claim, volume)
    for manifest in manifests:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    return claim


def test_each_framework_image_runs_its_evaluation_under_restricted(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    node_images: dict[str, str],
    agent_rbac: str,
    start_operator: Callable[..., OperatorProcess],
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    claim = models_claim(cluster, namespace)
    images = agent_images(node_images)
    operator = start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, **images)
    for framework in FRAMEWORKS:
        model_file = MODEL_FILES[FRAMEWORK_FORMATS[framework]]
        doc = digits_evaluation(
            Path("/unused"),
            framework,
            f"digits-{framework}",
            model={"uri": f"pvc://{claim}/{model_file}"},
            hardware=ON_REAL_NODE,
            scenario=SCENARIO,
            timeout="8m",
        )
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))

    def finished() -> dict[str, Any] | None:
        items = {
            f: kube.get(evaluation_path(namespace, f"digits-{f}")).get("status") or {}
            for f in FRAMEWORKS
        }
        done = all(s.get("phase") in ("Succeeded", "Failed") for s in items.values())
        return items if done else None

    statuses = wait_for(
        "the three evaluations to finish on the real node",
        finished,
        480,
        detail=lambda: operator.tail(40),
        interval=2,
    )
    for framework, status in statuses.items():
        assert status["phase"] == "Succeeded", (framework, status)
        assert status["stack"]["node"] == node.NAME
        assert status["stack"]["framework"] == framework
        assert status["summary"]["top1"] > 0.9, (framework, status["summary"])
        assert all(row["throughput"] > 0 for row in status["results"])
        # the agent in its image wrote the whole result document through the API server, not
        # only the termination message's summary
        results = kube.get(
            configmap_path(namespace, names.results_configmap_name(f"digits-{framework}"))
        )
        document = json.loads((results.get("data") or {}).get(RESULT_KEY) or "{}")
        assert document.get("kind") == "EvaluationResult", results.get("data")
        assert document["backend"]["framework"] == framework
        # Job creation -> first timed query includes the agent's own start-up (the Job's
        # creationTimestamp is whole seconds: one second of slack)
        startup = status["startup"]
        assert 0 < startup["agentSeconds"] <= startup["jobSeconds"] + 1, (framework, startup)
        print(f"start-up {framework}: {startup}")  # the figures of docs/benchmarks.md (-s)
        (job,) = [
            j
            for j in kube.list(job_path(namespace), names.MANAGED_SELECTOR)
            if j["metadata"]["name"].startswith(f"digits-{framework}-")
        ]
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == images[image_variable(FrameworkName(framework), Device.CPU)]
        assert container["image"].startswith(f"{registry.NAME}/")
        pod_status = kube.list(
            f"/api/v1/namespaces/{namespace}/pods", f"job-name={job['metadata']['name']}"
        )[0]["status"]
        digest = container["image"].rpartition("@")[2]
        assert pod_status["containerStatuses"][0]["imageID"].endswith(digest)
        assert status["stack"].get("image") in (None, container["image"])


def test_an_evaluation_over_its_memory_limit_ends_oomkilled_by_the_real_kubelet(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    node_images: dict[str, str],
    agent_rbac: str,
    start_operator: Callable[..., OperatorProcess],
) -> None:
    """The kernel kills the agent in its memory cgroup, the kubelet reports OOMKilled, and the
    evaluation says so with the limit and the field to raise (issue 15, defect 7)."""
    claim = models_claim(cluster, namespace)
    images = agent_images(node_images)
    operator = start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, **images)
    doc = digits_evaluation(
        Path("/unused"),
        "pytorch",
        "hungry",
        model={"uri": f"pvc://{claim}/{MODEL_FILES['torchscript']}"},
        hardware={
            **ON_REAL_NODE,
            "resources": {"requests": {"memory": "96Mi"}, "limits": {"memory": "96Mi"}},
        },
        scenario=SCENARIO,
        timeout="5m",
    )
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))

    def ended() -> dict[str, Any] | None:
        status = kube.get(evaluation_path(namespace, "hungry")).get("status") or {}
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    status = wait_for("the evaluation to end", ended, 240, detail=lambda: operator.tail(40))
    assert status["phase"] == "Failed", status
    (failed,) = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "OOMKilled", failed
    assert "memory limit of 96Mi" in failed["message"]
    assert "spec.hardware.resources.limits.memory" in failed["message"]
    (pod,) = kube.list(f"/api/v1/namespaces/{namespace}/pods")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137
