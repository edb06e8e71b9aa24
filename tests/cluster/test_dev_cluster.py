"""The dev cluster behaves like a real GPU cluster: scheduling, controllers, admission, exec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from mlmodelscope.devcluster import examples, nodes, versions
from mlmodelscope.devcluster.cluster import Cluster, pid_alive
from mlmodelscope.devcluster.node import NAME as REAL_NODE
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
EXEC_CPU = {nodes.SIMULATION_LABEL: "exec", nodes.POOL_LABEL: "cpu"}


def apply(cluster: Cluster, manifest: dict[str, Any], namespace: str | None = None) -> None:
    args = ["apply", "--server-side", "-f", "-"]
    if namespace:
        args += ["-n", namespace]
    cluster.kubectl(*args, input=json.dumps(manifest))


def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api_client())


def batch(cluster: Cluster) -> client.BatchV1Api:
    return client.BatchV1Api(cluster.api_client())


def job_manifest(
    name: str,
    command: list[str],
    *,
    node_selector: dict[str, str],
    gpus: int = 0,
    pod_failure_policy: dict[str, Any] | None = None,
    tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "mlmodelscope/agent:dev",
        "command": command,
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": node_selector,
        "containers": [container],
    }
    if gpus:
        container["resources"] = {"limits": {nodes.GPU_RESOURCE: str(gpus)}}
        pod_spec["tolerations"] = [GPU_TOLERATION]
    if tolerations:
        pod_spec["tolerations"] = [*pod_spec.get("tolerations", []), *tolerations]
    spec: dict[str, Any] = {"backoffLimit": 0, "template": {"spec": pod_spec}}
    if pod_failure_policy:
        spec["podFailurePolicy"] = pod_failure_policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def job_condition(cluster: Cluster, ns: str, name: str, kinds: tuple[str, ...]) -> Any:
    job = batch(cluster).read_namespaced_job_status(name, ns)
    for cond in job.status.conditions or []:
        if cond.type in kinds and cond.status == "True":
            return cond
    return None


def job_pod(cluster: Cluster, ns: str, name: str) -> client.V1Pod | None:
    pods = core(cluster).list_namespaced_pod(ns, label_selector=f"job-name={name}").items
    return pods[0] if pods else None


def terminated(pod: client.V1Pod) -> Any:
    statuses = pod.status.container_statuses or []
    return statuses[0].state.terminated if statuses and statuses[0].state else None


# ---- control plane --------------------------------------------------------------------------


def test_kubectl_and_python_client_share_the_kubeconfig(cluster: Cluster) -> None:
    out = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert out["clientVersion"]["gitVersion"] == versions.KUBERNETES_VERSION
    assert out["serverVersion"]["gitVersion"] == versions.KUBERNETES_VERSION
    code = client.VersionApi(cluster.api_client()).get_code()
    assert code.git_version == versions.KUBERNETES_VERSION
    names = {n.metadata.name for n in core(cluster).list_node().items}
    real = {REAL_NODE} if cluster.real_node else set()
    assert names == {n.name for n in nodes.all_nodes()} | real


def test_cached_start_takes_under_30_seconds(cluster: Cluster) -> None:
    assert cluster.state is not None and cluster.state.ready_seconds is not None
    assert cluster.state.ready_seconds < 30


def test_crds_apply_and_are_served(cluster: Cluster, namespace: str) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.devcluster.mlmodelscope.io"},
        "spec": {
            "group": "devcluster.mlmodelscope.io",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    apply(cluster, crd)
    try:
        cluster.wait_established(crd["metadata"]["name"])
        custom = client.CustomObjectsApi(cluster.api_client())
        body = {
            "apiVersion": "devcluster.mlmodelscope.io/v1",
            "kind": "Widget",
            "metadata": {"name": "w1"},
            "spec": {"size": 3},
        }
        wait_for(
            "the Widget API to be served",
            lambda: _try(
                lambda: custom.create_namespaced_custom_object(
                    "devcluster.mlmodelscope.io", "v1", namespace, "widgets", body
                )
            ),
            timeout=30,
        )
        got = custom.get_namespaced_custom_object(
            "devcluster.mlmodelscope.io", "v1", namespace, "widgets", "w1"
        )
        assert got["spec"] == {"size": 3}
        listed = cluster.kubectl("get", "widgets", "-n", namespace, "-o", "name").stdout
        assert "widget.devcluster.mlmodelscope.io/w1" in listed
    finally:
        cluster.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=false", check=False)


@pytest.mark.parametrize(
    "path", sorted((REPO / "crds").glob("*.yaml")), ids=lambda p: getattr(p, "name", str(p))
)
def test_project_crds_apply_and_are_served(cluster: Cluster, path: Path) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(path))
    cluster.wait_established(yaml.safe_load(path.read_text())["metadata"]["name"])
    kind = cluster.kubectl("get", "-f", str(path), "-o", "jsonpath={.spec.names.plural}").stdout
    assert cluster.kubectl("get", kind, "-A").returncode == 0


def _try(fn: Callable[[], object]) -> bool:
    try:
        fn()
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


# ---- scheduling onto simulated GPU nodes ----------------------------------------------------


@pytest.mark.parametrize("gpu", [nodes.H100_80GB, nodes.A100_80GB], ids=["h100", "a100"])
def test_gpu_job_lands_on_requested_product_and_completes(
    cluster: Cluster, namespace: str, gpu: nodes.GPU
) -> None:
    name = "gpu-job"
    cmd = ["python", "-c", "print('hello from a GPU pod')"]
    selector = {"nvidia.com/gpu.product": gpu.product}
    # The H100 pool has only a kwok node: the Job must tolerate simulation to land there.
    manifest = job_manifest(
        name, cmd, node_selector=selector, gpus=1, tolerations=[nodes.SIMULATED_TOLERATION]
    )
    apply(cluster, manifest, namespace)
    wait_for("the Job to complete", lambda: job_condition(cluster, namespace, name, ("Complete",)))
    pod = job_pod(cluster, namespace, name)
    assert pod is not None
    node = core(cluster).read_node(pod.spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.product"] == gpu.product
    assert pod.status.phase == "Succeeded"


def test_pod_asking_for_more_gpus_than_any_node_stays_pending(
    cluster: Cluster, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "too-big"},
        "spec": {
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "command": ["true"],
                    "resources": {"limits": {nodes.GPU_RESOURCE: "100"}},
                }
            ],
        },
    }
    apply(cluster, pod, namespace)

    def unschedulable() -> Any:
        p = core(cluster).read_namespaced_pod("too-big", namespace)
        for cond in p.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return cond
        return None

    cond = wait_for("the scheduler to give up", unschedulable, timeout=30)
    assert cond.reason == "Unschedulable"
    assert "nvidia.com/gpu" in (cond.message or "")

    def failed_scheduling() -> Any:
        events = core(cluster).list_namespaced_event(namespace).items
        return [e for e in events if e.reason == "FailedScheduling"]

    events = wait_for("a FailedScheduling event", failed_scheduling, timeout=30)
    assert "Insufficient nvidia.com/gpu" in events[0].message
    time.sleep(2)
    again = core(cluster).read_namespaced_pod("too-big", namespace)
    assert again.status.phase == "Pending" and not again.spec.node_name


def test_pods_that_do_not_tolerate_simulation_stay_off_kwok_nodes(
    cluster: Cluster, namespace: str
) -> None:
    # No selector at all: the only node without a taint the pod lacks is the CPU exec node.
    name = "anywhere"
    cmd = ["python", "-c", "print('ran for real')"]
    apply(cluster, job_manifest(name, cmd, node_selector={}), namespace)
    wait_for("the Job to complete", lambda: job_condition(cluster, namespace, name, ("Complete",)))
    pod = job_pod(cluster, namespace, name)
    assert pod is not None and pod.spec.node_name == "cpu-exec-0"
    # Asking for a kwok node without the toleration: the scheduler says why not.
    pod_manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "wants-kwok"},
        "spec": {
            "nodeSelector": {nodes.SIMULATION_LABEL: "kwok", nodes.POOL_LABEL: "cpu"},
            "containers": [{"name": "main", "image": "x", "command": ["true"]}],
        },
    }
    apply(cluster, pod_manifest, namespace)

    def unschedulable() -> Any:
        p = core(cluster).read_namespaced_pod("wants-kwok", namespace)
        for cond in p.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return cond
        return None

    cond = wait_for("the scheduler to give up", unschedulable, timeout=30)
    assert "untolerated taint" in cond.message
    assert not core(cluster).read_namespaced_pod("wants-kwok", namespace).spec.node_name


# ---- controllers --------------------------------------------------------------------------


def test_owner_referenced_child_is_garbage_collected(cluster: Cluster, namespace: str) -> None:
    api = core(cluster)
    owner = api.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap.from_dict({"metadata": {"name": "owner"}, "data": {"a": "1"}}),
    )
    child = {
        "metadata": {
            "name": "child",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "owner",
                    "uid": owner.metadata.uid,
                }
            ],
        },
        "data": {"b": "2"},
    }
    api.create_namespaced_config_map(namespace, client.V1ConfigMap.from_dict(child))
    api.delete_namespaced_config_map("owner", namespace)

    def child_gone() -> bool:
        return not _try(lambda: api.read_namespaced_config_map("child", namespace))

    wait_for("the garbage collector to delete the child", child_gone, timeout=60)


def test_restricted_namespace_rejects_privileged_pod(cluster: Cluster, namespace: str) -> None:
    api = core(cluster)
    api.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    pod = client.V1Pod.from_dict(
        {
            "metadata": {"name": "privileged"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "command": ["true"],
                        "securityContext": {"privileged": True},
                    }
                ]
            },
        }
    )
    with pytest.raises(client.ApiException) as err:
        api.create_namespaced_pod(namespace, pod)
    assert err.value.status == 403
    assert "violates PodSecurity" in str(err.value.body)


# ---- exec nodes: real processes -------------------------------------------------------------


def test_exec_job_exit_code_reaches_pod_and_job_status(cluster: Cluster, namespace: str) -> None:
    name = "exits-three"
    script = "import sys; open('/dev/termination-log', 'w').write('bad input: 42'); sys.exit(3)"
    policy = {
        "rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}},
        ]
    }
    manifest = job_manifest(
        name, ["python", "-c", script], node_selector=EXEC_CPU, pod_failure_policy=policy
    )
    apply(cluster, manifest, namespace)
    cond = wait_for("the Job to fail", lambda: job_condition(cluster, namespace, name, ("Failed",)))
    assert cond.reason == "PodFailurePolicy"
    assert "exit code 3" in cond.message
    pod = job_pod(cluster, namespace, name)
    assert pod is not None and pod.status.phase == "Failed"
    assert pod.spec.node_name == "cpu-exec-0"
    state = terminated(pod)
    assert state.exit_code == 3
    assert state.reason == "Error"
    assert state.message == "bad input: 42"


def test_exec_pod_sees_env_and_volumes(cluster: Cluster, namespace: str) -> None:
    api = core(cluster)
    api.create_namespaced_config_map(
        namespace, client.V1ConfigMap.from_dict({"metadata": {"name": "cfg"}, "data": {"g": "hi"}})
    )
    api.create_namespaced_secret(
        namespace,
        client.V1Secret.from_dict({"metadata": {"name": "sec"}, "stringData": {"pw": "s3cret"}}),
    )
    script = """
import json, os, pathlib
pathlib.Path('/data/out.txt').write_text('written')
summary = {
    'name': os.environ['POD_NAME'], 'ns': os.environ['POD_NS'],
    'pw': os.environ['PW'], 'g': os.environ['G'],
    'file': open('/etc/cfg/g').read(),
    'out': pathlib.Path(os.environ['DATA_DIR'], 'out.txt').read_text(),
    'mapped': sorted(json.loads(os.environ['MLMS_PATH_MAP'])),
    'cuda': os.environ['CUDA_VISIBLE_DEVICES'],
}
print('summary', summary)
open('/dev/termination-log', 'w').write(json.dumps(summary))
"""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "env-and-volumes"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": EXEC_CPU,
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "scratch", "emptyDir": {}},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "mlmodelscope/agent:dev",
                    "command": ["python", "-c", script],
                    "env": [
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {
                            "name": "POD_NS",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "pw"}}},
                        {
                            "name": "G",
                            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "g"}},
                        },
                        {"name": "DATA_DIR", "value": "/data"},
                    ],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/etc/cfg"},
                        {"name": "scratch", "mountPath": "/data"},
                    ],
                }
            ],
        },
    }
    apply(cluster, pod, namespace)

    def done() -> client.V1Pod | None:
        p = api.read_namespaced_pod("env-and-volumes", namespace)
        return p if p.status.phase in ("Succeeded", "Failed") else None

    final = wait_for("the exec pod to finish", done)
    state = terminated(final)
    assert final.status.phase == "Succeeded", state
    assert state.exit_code == 0 and state.reason == "Completed"
    summary = json.loads(state.message)
    mapped = set(summary.pop("mapped"))
    assert summary == {
        "name": "env-and-volumes",
        "ns": namespace,
        "pw": "s3cret",
        "g": "hi",
        "file": "hi",
        "out": "written",
        "cuda": "",
    }
    assert {"/data", "/etc/cfg", "/dev/termination-log"} <= mapped
    logs = list((cluster.pods_dir).glob(f"{namespace}_env-and-volumes_*/main.log"))
    assert logs and "summary" in logs[0].read_text()


def test_examples_claim_is_bound_and_exec_pods_read_its_host_folder(cluster: Cluster) -> None:
    api = core(cluster)
    claim = api.read_namespaced_persistent_volume_claim(examples.CLAIM, examples.NAMESPACE)
    assert claim.status.phase == "Bound" and claim.spec.volume_name == examples.CLAIM
    volume = api.read_persistent_volume(examples.CLAIM)
    assert volume.status.phase == "Bound"
    assert volume.spec.claim_ref.uid == claim.metadata.uid  # bound by the PV controller
    assert volume.spec.host_path.path == str(cluster.examples_dir)
    assert "digits.onnx" in {p.name for p in cluster.examples_dir.iterdir()}
    name = f"reads-claim-{os.getpid()}"
    script = (
        "import os, json; open('/dev/termination-log', 'w')"
        ".write(json.dumps(sorted(os.listdir('/models'))))"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [
                {
                    "name": "models",
                    "persistentVolumeClaim": {"claimName": examples.CLAIM, "readOnly": True},
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "command": ["python", "-c", script],
                    "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
                }
            ],
        },
    }
    apply(cluster, pod, examples.NAMESPACE)
    try:

        def done() -> client.V1Pod | None:
            p = api.read_namespaced_pod(name, examples.NAMESPACE)
            return p if p.status.phase in ("Succeeded", "Failed") else None

        final = wait_for("the pod reading the claim to finish", done, timeout=60)
        state = terminated(final)
        assert final.status.phase == "Succeeded", state.message
        assert final.spec.node_name == "cpu-exec-0"
        assert json.loads(state.message) == sorted(p.name for p in cluster.examples_dir.iterdir())
    finally:
        api.delete_namespaced_pod(name, examples.NAMESPACE, grace_period_seconds=0)


def test_the_default_service_account_may_not_touch_configmaps_in_default(cluster: Cluster) -> None:
    """Each evaluation's pods run as its own ServiceAccount, which may patch only its own
    results ConfigMap (issue 15, defect 9), so the dev cluster grants the default account
    nothing on ConfigMaps."""
    sa = f"--as=system:serviceaccount:{examples.NAMESPACE}:default"
    for verb in ("patch", "get", "create", "delete"):
        denied = cluster.kubectl(
            "auth", "can-i", verb, "configmaps", "-n", "default", sa, check=False
        )
        assert denied.stdout.strip() == "no", verb


def test_gpu_exec_node_runs_the_pod_on_cpu(cluster: Cluster, namespace: str) -> None:
    name = "gpu-exec"
    script = (
        "import os; open('/dev/termination-log','w')"
        ".write(os.environ['MLMS_SIMULATED_GPUS'] + '|' + os.environ['CUDA_VISIBLE_DEVICES'])"
    )
    selector = {
        nodes.SIMULATION_LABEL: "exec",
        "nvidia.com/gpu.product": nodes.A100_80GB.product,
    }
    apply(
        cluster,
        job_manifest(name, ["python", "-c", script], node_selector=selector, gpus=2),
        namespace,
    )
    wait_for("the Job to complete", lambda: job_condition(cluster, namespace, name, ("Complete",)))
    pod = job_pod(cluster, namespace, name)
    assert pod is not None and pod.spec.node_name == "a100-exec-0"
    assert terminated(pod).message == "2|"


def test_exec_pod_runs_init_containers_and_restarts_on_failure(
    cluster: Cluster, namespace: str
) -> None:
    # The main container fails the first time and succeeds once restarted (OnFailure);
    # the emptyDir, as on a kubelet, survives the restart and carries the init container's file.
    main = (
        "import pathlib, sys; d = pathlib.Path('/work'); seen = d / 'seen'\n"
        "assert (d / 'init.txt').read_text() == 'from init'\n"
        "if not seen.exists(): seen.write_text('1'); sys.exit(1)\n"
        "open('/dev/termination-log', 'w').write('second run')"
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "restarts"},
        "spec": {
            "restartPolicy": "OnFailure",
            "nodeSelector": EXEC_CPU,
            "volumes": [{"name": "work", "emptyDir": {}}],
            "initContainers": [
                {
                    "name": "init",
                    "image": "x",
                    "command": ["sh", "-c", "printf 'from init' > /work/init.txt"],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                }
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "command": ["python", "-c", main],
                    "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                }
            ],
        },
    }
    apply(cluster, pod, namespace)

    def done() -> client.V1Pod | None:
        p = core(cluster).read_namespaced_pod("restarts", namespace)
        return p if p.status.phase in ("Succeeded", "Failed") else None

    final = wait_for("the pod to finish after a restart", done, timeout=60)
    assert final.status.phase == "Succeeded"
    status = final.status.container_statuses[0]
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 1
    assert status.state.terminated.message == "second run"
    assert final.status.init_container_statuses[0].state.terminated.exit_code == 0


def test_a_container_that_cannot_start_is_retried_not_failed(
    cluster: Cluster, namespace: str
) -> None:
    # A kubelet keeps a restartPolicy=Always pod whose command is missing and retries it with
    # back-off; failing the pod would make a Deployment replace it in a tight loop.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "no-such-command"},
        "spec": {
            "nodeSelector": EXEC_CPU,
            "containers": [{"name": "main", "image": "x", "command": ["mlms-no-such-command"]}],
        },
    }
    apply(cluster, pod, namespace)

    def retried() -> client.V1Pod | None:
        p = core(cluster).read_namespaced_pod("no-such-command", namespace)
        statuses = p.status.container_statuses or []
        return p if statuses and statuses[0].restart_count >= 2 else None

    final = wait_for("two restarts of a container that cannot start", retried, timeout=30)
    assert final.status.phase != "Failed"
    last = final.status.container_statuses[0].last_state.terminated
    assert "mlms-no-such-command" in last.message


def test_host_paths_are_not_rewritten_under_a_mount_of_the_same_prefix(
    cluster: Cluster, namespace: str
) -> None:
    # An emptyDir mounted at the first folder of this venv's path (/tmp for a checkout in
    # /tmp) maps container paths there, but the venv on PATH is a host path and stays one.
    top = "/" + Path(sys.prefix).parts[1]
    code = "import sys; open('/dev/termination-log', 'w').write(sys.prefix)"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "shadowed-prefix"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": EXEC_CPU,
            "volumes": [{"name": "top", "emptyDir": {}}],
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "command": ["python", "-c", code],
                    "volumeMounts": [{"name": "top", "mountPath": top}],
                }
            ],
        },
    }
    apply(cluster, pod, namespace)

    def done() -> client.V1Pod | None:
        p = core(cluster).read_namespaced_pod("shadowed-prefix", namespace)
        return p if p.status.phase in ("Succeeded", "Failed") else None

    final = wait_for("the pod to finish", done, timeout=60)
    state = final.status.container_statuses[0].state.terminated
    assert final.status.phase == "Succeeded", state.message
    assert state.message == sys.prefix


def _running_pid(cluster: Cluster, namespace: str, name: str) -> int:
    def pid() -> int | None:
        p = core(cluster).read_namespaced_pod(name, namespace)
        statuses = p.status.container_statuses or []
        if p.status.phase == "Running" and statuses and statuses[0].state.running:
            return int(statuses[0].container_id.rsplit("/", 1)[1])
        return None

    return wait_for(f"{name} to run", pid)


def _sleeper(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": EXEC_CPU,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "main", "image": "x", "command": ["sleep", "600"]},
            ],
            **spec,
        },
    }


def test_deleting_an_exec_pod_kills_its_process(cluster: Cluster, namespace: str) -> None:
    apply(cluster, _sleeper("sleeper"), namespace)
    pid = _running_pid(cluster, namespace, "sleeper")
    assert pid_alive(pid)
    core(cluster).delete_namespaced_pod("sleeper", namespace)
    wait_for(
        "the pod to be removed",
        lambda: not _try(lambda: core(cluster).read_namespaced_pod("sleeper", namespace)),
        timeout=30,
    )
    assert not pid_alive(pid)


def test_active_deadline_kills_exec_pod(cluster: Cluster, namespace: str) -> None:
    apply(cluster, _sleeper("deadline", activeDeadlineSeconds=2), namespace)
    pid = _running_pid(cluster, namespace, "deadline")

    def failed() -> client.V1Pod | None:
        p = core(cluster).read_namespaced_pod("deadline", namespace)
        return p if p.status.phase == "Failed" else None

    pod = wait_for("the deadline to fail the pod", failed, timeout=30)
    assert pod.status.reason == "DeadlineExceeded"
    assert not pid_alive(pid)


def test_exec_nodes_keep_their_lease_and_stay_ready(cluster: Cluster) -> None:
    coordination = client.CoordinationV1Api(cluster.api_client())
    for node in nodes.exec_nodes():
        lease = coordination.read_namespaced_lease(node.name, "kube-node-lease")
        age = time.time() - lease.spec.renew_time.timestamp()
        assert age < 30, f"{node.name} lease is {age:.0f}s old"
        ready = {c.type: c.status for c in core(cluster).read_node(node.name).status.conditions}
        assert ready["Ready"] == "True"


# ---- the CLI, as another shell would use it --------------------------------------------------


@pytest.mark.slow
def test_cli_up_status_down_from_separate_processes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    run_dir = tmp_path / "dev"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "mlmodelscope.devcluster", *args, "--run-dir", str(run_dir)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)

    started = time.monotonic()
    up = cli("up")
    try:
        assert up.returncode == 0, up.stderr
        assert time.monotonic() - started < 60
        assert f"KUBECONFIG={run_dir / 'kubeconfig'}" in up.stdout
        status = cli("status", "--json")
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["ready"] and all(c["running"] for c in info["components"].values())
        pids = [c["pid"] for c in info["components"].values()]
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert not [pid for pid in pids if pid_alive(pid)]
    assert cli("status").returncode == 1
