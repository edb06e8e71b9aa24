"""The real node's configuration and images, checked without starting anything."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from mlmodelscope.devcluster import dns, node, nodenet, pki, storage, versions


@pytest.fixture
def paths(tmp_path: Path) -> node.Paths:
    return node.Paths(run=tmp_path / "run", cache=tmp_path / "cache")


def test_containerd_uses_its_own_root_state_and_socket(paths: node.Paths) -> None:
    toml = node.containerd_config(paths, "mlmodelscope.local/pause:abc")
    for own in (paths.containerd_root, paths.containerd_state, paths.socket):
        assert str(own).startswith(str(paths.cache)) and f'"{own}"' in toml
    assert "/var/lib/containerd" not in toml and '"/run/containerd' not in toml
    assert 'sandbox_image = "mlmodelscope.local/pause:abc"' in toml
    assert "restrict_oom_score_adj = true" in toml  # else runc fails every sandbox here
    assert "SystemdCgroup = false" in toml
    assert f'conf_dir = "{paths.node / "cni"}"' in toml


def test_pods_get_addresses_on_the_node_bridge_and_no_masquerade(paths: node.Paths) -> None:
    (bridge,) = node.cni_config(paths)["plugins"]
    assert bridge["bridge"] == nodenet.BRIDGE and not bridge["ipMasq"]
    (subnet,) = bridge["ipam"]["ranges"][0]
    assert subnet == {"subnet": nodenet.POD_SUBNET, "gateway": nodenet.NODE_IP}
    assert bridge["ipam"]["dataDir"].startswith(str(paths.run))


def test_kubelet_config_suits_this_machine_and_authenticates_the_api_server(
    paths: node.Paths,
) -> None:
    config = node.kubelet_config(paths, Path("/ca.crt"), 10250, 10248)
    assert config["address"] == nodenet.NODE_IP and config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"] == {"clientCAFile": "/ca.crt"}
    assert config["authorization"] == {"mode": "Webhook"}
    assert config["cgroupDriver"] == "cgroupfs" and config["failCgroupV1"] is False
    assert config["imageGCHighThresholdPercent"] == 100  # loaded images are never collected
    assert config["registerWithTaints"] == [node.TAINT]
    assert config["containerRuntimeEndpoint"] == f"unix://{paths.socket}"
    assert config["clusterDNS"] == [nodenet.NODE_IP] and config["clusterDomain"] == "cluster.local"
    argv = node.kubelet_argv(Path("/kubelet"), paths, Path("/k.yaml"), Path("/kc"))
    assert f"--hostname-override={node.NAME}" in argv
    assert f"--node-ip={nodenet.NODE_IP}" in argv


def test_the_kubernetes_service_is_sent_to_the_loopback_api_server() -> None:
    (rule,) = nodenet.service_rules(6443)
    assert rule.table == "nat" and rule.chain == nodenet.NAT_CHAIN
    assert f"{pki.KUBERNETES_SERVICE_IP}/32" in rule.args and "127.0.0.1:6443" in rule.args
    (fence,) = nodenet.fence_rules()
    assert fence.args == ("-i", nodenet.BRIDGE, "!", "-o", nodenet.BRIDGE, "-j", "DROP")


def test_pause_image_is_a_reproducible_oci_layout() -> None:
    binary = b"\x7fELF fake pause"
    ref, archive = node.pause_image_archive(binary)
    assert ref == f"{node.PAUSE_REPOSITORY}:{hashlib.sha256(binary).hexdigest()[:12]}"
    assert node.pause_image_archive(binary) == (ref, archive)  # byte for byte
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == ref
    manifest = json.loads(files[f"blobs/sha256/{entry['digest'].removeprefix('sha256:')}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert config["config"]["User"] == "65535:65535"
    layer = files[f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (member,) = tar.getmembers()
        assert member.name == "pause" and member.mode == 0o755
        assert tar.extractfile(member).read() == binary  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("ref", "stored"),
    [
        ("busybox:1", "docker.io/library/busybox:1"),
        ("mlmodelscope/agent:1", "docker.io/mlmodelscope/agent:1"),
        (
            "ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0-cpu",
            "ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0-cpu",
        ),
        ("localhost/x:1", "localhost/x:1"),
        ("registry:5000/x:1", "registry:5000/x:1"),
    ],
)
def test_references_are_compared_as_containerd_stores_them(ref: str, stored: str) -> None:
    assert node._normalized(ref) == stored


def test_one_real_node_at_a_time(paths: node.Paths, tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    node.claim(paths, first, alive=lambda _: True)
    with pytest.raises(node.NodeError, match=f"already runs for the dev cluster in {first}"):
        node.claim(paths, second, alive=lambda run_dir: run_dir == str(first))
    node.claim(paths, second, alive=lambda _: False)  # a dead owner's claim is taken over
    node.release(paths, first)  # not the owner: nothing happens
    assert json.loads(paths.owner.read_text()) == {"run_dir": str(second)}
    node.release(paths, second)
    assert not paths.owner.exists()


def test_preflight_names_the_packages_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node.os, "geteuid", lambda: 0)
    monkeypatch.setattr(node.shutil, "which", lambda cmd: None if cmd == "runc" else f"/x/{cmd}")
    monkeypatch.setattr(node, "CNI_BIN_DIR", Path("/nonexistent"))
    with pytest.raises(node.NodeError) as err:
        node.preflight()
    assert "apt-get install containernetworking-plugins runc" in str(err.value)
    monkeypatch.setattr(node.os, "geteuid", lambda: 1000)
    with pytest.raises(node.NodeError, match="needs root"):
        node.preflight()


def test_mounts_under_a_root_are_listed_deepest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    info = "\n".join(
        f"{i} 1 0:1 / {point} rw - tmpfs tmpfs rw"
        for i, point in enumerate(
            ["/other", "/r/node", "/r/node/kubelet/pods/a/volumes/x", "/r/nodeX", r"/r/node/a\040b"]
        )
    )
    real_read = Path.read_text
    monkeypatch.setattr(
        Path,
        "read_text",
        lambda self, *a, **k: info if str(self) == "/proc/self/mountinfo" else real_read(self),
    )
    assert node.mounts_under(Path("/r/node")) == [
        "/r/node/kubelet/pods/a/volumes/x",
        "/r/node/a b",
        "/r/node",
    ]


def test_a_test_session_can_be_told_to_start_without_the_real_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlmodelscope.devcluster import pytest_plugin

    monkeypatch.setenv("MLMS_TEST_NO_REAL_NODE", "1")
    assert pytest_plugin._real_node_possible() == "MLMS_TEST_NO_REAL_NODE is set"


def test_the_cluster_dns_serves_the_cluster_domain_on_the_bridge_and_nothing_else() -> None:
    text = dns.corefile(Path("/run/kubeconfig"), 18053)
    cluster_block, rest = text.split("\n}\n", 1)
    assert cluster_block.startswith("cluster.local:53 {")
    assert f"bind {nodenet.NODE_IP}" in cluster_block
    assert "kubeconfig /run/kubeconfig" in cluster_block and "health 127.0.0.1:18053" in text
    assert rest.startswith(".:53 {") and "rcode NXDOMAIN" in rest and "forward" not in text
    main_go = (dns.TOOL.source_dir / "main.go").read_text()
    for plugin in ("bind", "errors", "health", "kubernetes", "template"):  # what the file names
        assert f'coredns/plugin/{plugin}"' in main_go
    assert (
        f"github.com/coredns/coredns {versions.COREDNS_VERSION}"
        in (dns.TOOL.source_dir / "go.mod").read_text()
    )


def test_the_default_storage_class_binds_claims_to_host_folders(tmp_path: Path) -> None:
    klass = storage.storage_class_manifest()
    assert klass["metadata"]["annotations"] == {
        "storageclass.kubernetes.io/is-default-class": "true"
    }
    assert klass["volumeBindingMode"] == "Immediate" and klass["reclaimPolicy"] == "Retain"
    volume = storage.volume_manifest(storage.volume_folder(tmp_path, 2), 2)
    assert volume["metadata"]["name"] == "dev-data-2"
    assert volume["spec"]["storageClassName"] == storage.STORAGE_CLASS
    assert volume["spec"]["hostPath"]["path"] == str(tmp_path / "volumes" / "data-2")
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
