"""The real node, `cpu-kubelet-0`: a kubelet from the pinned module with containerd and runc.

Pods here run in the project's own images, in real containers: their user, read-only root,
memory cgroup and seccomp profile are enforced by runc and the kernel, not by the harness, and
`kubectl logs` / `exec` go through the API server to the kubelet. These are the things the exec
kubelet cannot show (docs/dev-cluster.md).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlmodelscope.contract.kube import Kube
from mlmodelscope.devcluster import node, nodenet, pki, versions
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

OPERATOR_IMAGE = "operator"
"""The bake target whose image the plain-pod tests run (Python and the project, 65532)."""
RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.fixture
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster.api_client())


def restricted_namespace(cluster: Cluster, namespace: str) -> None:
    """Enforce Pod Security `restricted`, as a platform team does for tenant namespaces."""
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )


def pod(name: str, image: str, script: str, **container: Any) -> dict[str, Any]:
    """A one-container pod for the real node that runs ``script`` with sh."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(node.SELECTOR),
            "tolerations": [dict(node.TOLERATION)],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                    "securityContext": dict(RESTRICTED_CONTAINER),
                    **container,
                }
            ],
        },
    }


def create(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def read_pod(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


def container_state(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    statuses = (read_pod(kube, namespace, name).get("status") or {}).get("containerStatuses")
    return dict(statuses[0]["state"]) if statuses else {}


def wait_phase(kube: Kube, namespace: str, name: str, phase: str, timeout: float = 120) -> None:
    wait_for(
        f"pod {namespace}/{name} to be {phase}",
        lambda: read_pod(kube, namespace, name)["status"].get("phase") == phase,
        timeout,
        detail=lambda: json.dumps(read_pod(kube, namespace, name).get("status"), indent=1),
    )


# ---------------------------------------------------------------------------------- tests


def test_the_real_node_is_ready_with_an_address_the_api_server_can_reach(
    cluster: Cluster, real_node: str, kube: Kube
) -> None:
    item = kube.get(f"/api/v1/nodes/{real_node}")
    conditions = {c["type"]: c["status"] for c in item["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    info = item["status"]["nodeInfo"]
    assert info["kubeletVersion"] == versions.KUBERNETES_VERSION
    assert info["containerRuntimeVersion"].startswith("containerd://1.")
    addresses = {a["type"]: a["address"] for a in item["status"]["addresses"]}
    assert addresses["InternalIP"] == nodenet.NODE_IP
    assert not ipaddress.ip_address(addresses["InternalIP"]).is_loopback
    assert node.TAINT in item["spec"]["taints"]
    assert item["metadata"]["labels"][node.nodes.SIMULATION_LABEL] == node.MODE
    # a real kubelet reports this machine, not a declared pool size
    assert int(item["status"]["capacity"]["cpu"]) >= 1


def test_a_restricted_pod_runs_as_its_image_user_on_a_read_only_root_with_logs_and_exec(
    cluster: Cluster, namespace: str, kube: Kube, node_images: dict[str, str]
) -> None:
    restricted_namespace(cluster, namespace)
    script = (
        "echo user=$(id -u); "
        "touch /written 2>/dev/null && echo root-writable || echo root-read-only; "
        "touch /tmp/x 2>/dev/null && echo tmp-writable || echo tmp-read-only; "
        "sleep 60"
    )
    create(cluster, namespace, pod("box", node_images[OPERATOR_IMAGE], script))
    wait_phase(kube, namespace, "box", "Running")
    ip = read_pod(kube, namespace, "box")["status"]["podIP"]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(nodenet.POD_SUBNET)

    def logs() -> str:
        return cluster.kubectl("logs", "-n", namespace, "box", check=False).stdout

    wait_for("the pod's output through kubectl logs", lambda: "tmp-" in logs(), 60)
    out = logs()
    assert "user=65532" in out  # the image's USER, not root, and not the harness's user
    assert "root-read-only" in out  # readOnlyRootFilesystem, enforced by runc
    assert "tmp-read-only" in out  # no emptyDir at /tmp: the whole root is read-only
    exec_out = cluster.kubectl("exec", "-n", namespace, "box", "--", "cat", "/proc/1/status")
    assert "Seccomp:\t2" in exec_out.stdout  # RuntimeDefault seccomp filter on PID 1
    assert "CapEff:\t0000000000000000" in exec_out.stdout  # every capability dropped


def test_pods_reach_the_api_server_through_the_kubernetes_service(
    cluster: Cluster, namespace: str, kube: Kube, node_images: dict[str, str]
) -> None:
    """What every in-cluster client does: KUBERNETES_SERVICE_HOST, the ServiceAccount token and
    CA; the API server answers as the pod's own ServiceAccount."""
    script = (
        'python3 -c "import os, ssl, urllib.request as u; '
        "sa='/var/run/secrets/kubernetes.io/serviceaccount'; "
        "ctx=ssl.create_default_context(cafile=sa+'/ca.crt'); "
        "host=os.environ['KUBERNETES_SERVICE_HOST']+':'+os.environ['KUBERNETES_SERVICE_PORT']; "
        "req=u.Request('https://'+host+'/apis/authentication.k8s.io/v1/selfsubjectreviews', "
        "data=b'{}', method='POST', headers={'Content-Type': 'application/json', "
        "'Authorization': 'Bearer '+open(sa+'/token').read()}); "
        'print(host, u.urlopen(req, context=ctx).read().decode())"'
    )
    create(cluster, namespace, pod("client", node_images[OPERATOR_IMAGE], script))
    wait_phase(kube, namespace, "client", "Succeeded")
    out = cluster.kubectl("logs", "-n", namespace, "client").stdout
    assert out.startswith("10.0.0.1:443 ")
    review = json.loads(out.split(" ", 1)[1])
    username = review["status"]["userInfo"]["username"]
    assert username == f"system:serviceaccount:{namespace}:default"


def test_pods_resolve_service_names_through_the_cluster_dns_and_nothing_outside(
    cluster: Cluster, namespace: str, kube: Kube, node_images: dict[str, str]
) -> None:
    """The kubelet gives pods the cluster DNS (CoreDNS on the bridge): a Service's name in
    the search path resolves, a headless one to its pod's address; a name outside the
    cluster domain does not."""
    create(cluster, namespace, pod("target", node_images[OPERATOR_IMAGE], "sleep 600"))
    target = {"app": "target"}
    cluster.kubectl("label", "pod", "-n", namespace, "target", "app=target")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "headless"},
        "spec": {"clusterIP": "None", "selector": target, "ports": [{"port": 80}]},
    }
    create(cluster, namespace, service)
    wait_phase(kube, namespace, "target", "Running")
    target_ip = read_pod(kube, namespace, "target")["status"]["podIP"]
    script = (
        'python3 -c "import socket\n'
        "for name in ('kubernetes.default', 'headless', 'pypi.org'):\n"
        "    try: print(name, socket.gethostbyname(name))\n"
        "    except OSError as exc: print(name, 'unresolved')\n\""
    )
    create(cluster, namespace, pod("resolver", node_images[OPERATOR_IMAGE], script))

    def answered() -> bool:
        phase = read_pod(kube, namespace, "resolver")["status"].get("phase")
        return phase in ("Succeeded", "Failed")

    wait_for("the resolver pod", answered, 120)
    out = cluster.kubectl("logs", "-n", namespace, "resolver").stdout.splitlines()
    assert out == [
        f"kubernetes.default {pki.KUBERNETES_SERVICE_IP}",
        f"headless {target_ip}",
        "pypi.org unresolved",
    ], out


def test_an_image_whose_user_is_root_is_refused_under_run_as_non_root(
    cluster: Cluster, namespace: str, kube: Kube, node_images: dict[str, str]
) -> None:
    from mlmodelscope.devtools import images

    base = images.bootstrap_tag()  # the Debian rootfs the images build on: USER is root
    paths = cluster.node_paths
    node.load_images(paths.socket, paths.images_stamp, [base], ["docker"], cluster.log)
    create(cluster, namespace, pod("as-root", base, "id -u"))
    wait_for(
        "the kubelet to refuse the root image",
        lambda: (
            container_state(kube, namespace, "as-root").get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
        ),
        60,
    )
    message = container_state(kube, namespace, "as-root")["waiting"]["message"]
    assert "runAsNonRoot and image will run as root" in message


def test_a_pod_over_its_memory_limit_is_oom_killed_by_the_kernel(
    cluster: Cluster, namespace: str, kube: Kube, node_images: dict[str, str]
) -> None:
    script = 'python3 -c "b = bytearray(256 * 2**20); print(len(b))"'
    limits = {"resources": {"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}}}
    create(cluster, namespace, pod("hungry", node_images[OPERATOR_IMAGE], script, **limits))
    wait_phase(kube, namespace, "hungry", "Failed")
    terminated = container_state(kube, namespace, "hungry")["terminated"]
    assert terminated["reason"] == "OOMKilled" and terminated["exitCode"] == 137


def test_deleting_a_pod_stops_its_container(
    cluster: Cluster, namespace: str, kube: Kube, node_images: dict[str, str]
) -> None:
    create(cluster, namespace, pod("sleeper", node_images[OPERATOR_IMAGE], "sleep 600"))
    wait_phase(kube, namespace, "sleeper", "Running")
    status = read_pod(kube, namespace, "sleeper")["status"]["containerStatuses"][0]
    container_id = status["containerID"].removeprefix("containerd://")
    ctr = node.Ctr(cluster.node_paths.socket)
    assert container_id in ctr("tasks", "ls", "-q").stdout.split()
    cluster.kubectl("delete", "pod", "-n", namespace, "sleeper", "--wait=true", "--timeout=60s")
    wait_for(
        "the deleted pod's container to stop",
        lambda: container_id not in ctr("tasks", "ls", "-q").stdout.split(),
        60,
    )


def test_load_images_skips_an_image_already_loaded(
    cluster: Cluster, real_node: str, docker_host: str
) -> None:
    """`mlms dev-cluster load-images` (docs/dev-cluster.md) against this session's cluster."""
    from mlmodelscope.devtools import images

    argv = [sys.executable, "-m", "mlmodelscope", "dev-cluster", "load-images"]
    image = images.bootstrap_tag()
    for _ in range(2):
        proc = subprocess.run(
            [*argv, image, "--run-dir", str(cluster.run_dir)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
    assert f"{image}: already loaded" in proc.stderr
    missing = subprocess.run(
        [*argv, "no-such-image:1", "--run-dir", str(cluster.run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        missing.returncode == 1 and "no-such-image:1 is not in the Docker engine" in missing.stderr
    )


def test_loading_a_new_build_under_a_loaded_name_drops_the_old_one(
    cluster: Cluster, real_node: str, docker_host: str
) -> None:
    """Each generation holds its layers twice in containerd; a rebuilt image must replace,
    not pile up (the store would fill the disk within a few `make test` runs)."""
    from mlmodelscope.devtools import images

    ref = "mlmodelscope.local/reload-test:1"
    paths = cluster.node_paths
    ctr = node.Ctr(paths.socket)
    ids = []
    for generation in (1, 2):
        dockerfile = f"FROM {images.bootstrap_tag()}\nLABEL generation={generation}\n"
        subprocess.run(
            ["docker", "build", "-q", "-t", ref, "-"],
            input=dockerfile,
            text=True,
            check=True,
            capture_output=True,
            timeout=300,
        )
        (loaded,) = node.load_images(paths.socket, paths.images_stamp, [ref], ["docker"], print)
        assert not loaded.cached
        ids.append(loaded.image_id)
    present = ctr.images()
    assert ref in present and ids[1] in present
    assert ids[0] not in present
    (again,) = node.load_images(paths.socket, paths.images_stamp, [ref], ["docker"], print)
    assert again.cached
    ctr("images", "rm", "--sync", ref, ids[1])
    subprocess.run(["docker", "rmi", ref], capture_output=True, timeout=120)


def test_a_second_real_node_is_refused_before_anything_starts(
    cluster: Cluster, real_node: str, tmp_path: Path
) -> None:
    """`mlms dev-cluster up --real-node` while this session's cluster runs the node: refused
    at once, naming the cluster to stop, and the `eval` text is `false`."""
    run_dir = tmp_path / "second"
    up = [sys.executable, "-m", "mlmodelscope", "dev-cluster", "up", "--real-node"]
    proc = subprocess.run(
        [*up, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"a real node already runs for the dev cluster in {cluster.run_dir}" in proc.stderr
    assert proc.stdout.strip() == "false"
    assert not (run_dir / "state.json").exists()  # nothing was started
