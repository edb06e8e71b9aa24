"""The dev cluster's registry in a running cluster: the real node's containerd pulls a pod's
image from it by digest (nothing side-loaded), and both containerd and the registry say so."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import uuid
from typing import Any

import pytest
from oci_images import pause_image

from mlmodelscope.contract.kube import Kube
from mlmodelscope.devcluster import node, registry
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_the_registry_runs_beside_the_api_server_on_loopback(cluster: Cluster) -> None:
    host, _, port = cluster.registry_address.rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0
    assert "registry" in cluster.alive_components()
    with registry.client(cluster.registry_address) as reg:
        assert reg.ping()


def _events(cluster: Cluster, namespace: str) -> str:
    out = cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    return "\n".join(f"{e['reason']}: {e['message']}" for e in json.loads(out)["items"])


def _containerd_requests(cluster: Cluster) -> list[tuple[str, str, int]]:
    """(method, path, status) of every request the real node's containerd made."""
    log = cluster.logs_dir / "registry.log"
    return [
        (r["method"], r["path"], r["status"])
        for r in registry.request_log(log)
        if r["agent"].startswith("containerd/")
    ]


def _pod(image: str, **container: Any) -> dict[str, Any]:
    """A pod for the real node that always pulls ``image``, restricted as a tenant's is."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pulled"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(node.SELECTOR),
            "tolerations": [dict(node.TOLERATION)],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Always",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "runAsNonRoot": True,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    **container,
                }
            ],
        },
    }


def test_the_real_node_pulls_a_pods_image_by_digest_from_the_registry(
    cluster: Cluster, real_node: str, namespace: str
) -> None:
    kube = Kube(cluster.api_client())
    # a new image for every run: its marker layer cannot already be in containerd
    image = pause_image((cluster.bin_dir / "pause").read_bytes(), marker=uuid.uuid4().hex)
    repository = f"tests/{namespace}"
    archive = io.BytesIO(image.archive)
    pushed = registry.push_archive(cluster.registry_address, repository, archive)
    assert pushed.digest == image.manifest_digest
    assert pushed.uploaded >= 3  # the marker layer, config and manifest (the pause layer may
    assert pushed.uploaded + pushed.present == 4  # be there: blobs are kept across clusters)
    ref = pushed.reference
    assert ref == f"{registry.NAME}/{repository}@{image.manifest_digest}"

    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_pod(ref)))
    path = f"/api/v1/namespaces/{namespace}/pods/pulled"

    def running() -> bool:
        return bool(kube.get(path)["status"].get("phase") == "Running")

    def events() -> str:
        return _events(cluster, namespace)

    wait_for("the pod to run its pulled image", running, 120, detail=events)
    status = kube.get(path)["status"]["containerStatuses"][0]
    assert status["imageID"].endswith(image.manifest_digest)
    wait_for("the kubelet's Pulled event", lambda: "Successfully pulled image" in events(), 30)
    assert f'Successfully pulled image "{ref}"' in events()

    # the registry saw containerd itself fetch the manifest, the config and the new layer (the
    # pause layer is the sandbox image's, already in containerd's content store)
    by_containerd = _containerd_requests(cluster)
    base = f"/v2/{repository}"
    manifest = json.loads(image.blob(image.manifest_digest))
    for fetched in (
        f"manifests/{image.manifest_digest}",
        f"blobs/{manifest['config']['digest']}",
        f"blobs/{image.layer_digests[1]}",
    ):
        assert ("GET", f"{base}/{fetched}", 200) in by_containerd
    assert ref in node.Ctr(cluster.node_paths.socket).images()


@pytest.mark.docker
def test_an_image_from_the_docker_engine_runs_on_the_real_node_pulled_by_digest(
    cluster: Cluster, real_node: str, namespace: str, docker_host: str
) -> None:
    """The user's path: `docker save` of an engine's image, pushed by digest (what
    `mlms dev-cluster push` does), run from the registry; the bootstrapped Debian base with
    Python stands in for an agent image (its layer may already be on the node)."""
    from mlmodelscope.devtools import images

    docker = images.docker_cli(docker_host)
    base = images.ensure_base(docker, images.bake_targets()[0].args["BASE_IMAGE"])
    push = [sys.executable, "-m", "mlmodelscope", "dev-cluster", "push", base]
    push += ["--repository", "tests/base", "--run-dir", str(cluster.run_dir)]
    proc = subprocess.run(push, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ref = proc.stdout.strip()
    assert ref.startswith(f"{registry.NAME}/tests/base@sha256:")
    digest = ref.rpartition("@")[2]
    again = registry.push_docker_image(cluster.registry_address, "tests/base", base, [docker.cli])
    assert again.cached and again.digest == digest  # the same image id: not saved again

    # an earlier session's pull left the image in containerd's store, kept across clusters:
    # with every name of it removed (the CRI plugin adds `sha256:<config digest>`) and its
    # manifest collected, containerd must fetch the manifest again
    ctr = node.Ctr(cluster.node_paths.socket)
    listed = ctr("images", "ls").stdout.splitlines()[1:]
    names = [line.split()[0] for line in listed if digest in line.split()]
    if names:
        ctr("images", "rm", "--sync", *names)
    script = "import os; print('from the registry as', os.getuid())"
    manifest = _pod(ref, command=["python3", "-c", script])
    manifest["spec"]["containers"][0]["securityContext"]["runAsUser"] = 65532
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))
    kube = Kube(cluster.api_client())

    def finished() -> bool:
        phase = kube.get(f"/api/v1/namespaces/{namespace}/pods/pulled")["status"].get("phase")
        return phase in ("Succeeded", "Failed")

    wait_for("the pod to finish", finished, 120, detail=lambda: _events(cluster, namespace))
    logs = cluster.kubectl("logs", "-n", namespace, "pulled").stdout
    assert "from the registry as 65532" in logs
    assert f'Successfully pulled image "{ref}"' in _events(cluster, namespace)
    manifest_get = ("GET", f"/v2/tests/base/manifests/{digest}", 200)
    assert manifest_get in _containerd_requests(cluster)
