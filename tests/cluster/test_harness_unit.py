"""Fast checks of the dev-cluster harness pieces that need no cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlmodelscope.devcluster import build, examples, nodes, versions
from mlmodelscope.devcluster.cli import shell_exports
from mlmodelscope.devcluster.execlet import (
    expand,
    field_ref,
    path_rewriter,
    resolve_command,
    termination_message,
)


def test_expand_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)-$(C)", env) == "1-two-$(C)"
    assert expand("$$(A) costs $$5", env) == "$(A) costs $5"


def test_path_rewriter_replaces_whole_path_prefixes_only() -> None:
    rewrite = path_rewriter({"/data": "/tmp/pod/data", "/data/models": "/tmp/pod/m"})
    assert rewrite("/data/x.csv") == "/tmp/pod/data/x.csv"
    assert rewrite("--in=/data/models/a.onnx") == "--in=/tmp/pod/m/a.onnx"
    assert rewrite("/database") == "/database"
    assert rewrite("/srv/data") == "/srv/data"
    assert rewrite("open('/data','r')") == "open('/tmp/pod/data','r')"


def test_field_ref_reads_the_downward_api() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x"}},
        "spec": {"nodeName": "cpu-exec-0"},
    }
    assert field_ref(pod, "metadata.name") == "p"
    assert field_ref(pod, "metadata.namespace") == "ns"
    assert field_ref(pod, "metadata.labels['app']") == "x"
    assert field_ref(pod, "spec.nodeName") == "cpu-exec-0"


def test_resolve_command_prefers_path_and_maps_image_paths(tmp_path: Path) -> None:
    venv_bin = str(Path(sys.executable).parent)
    assert resolve_command("python", venv_bin) == str(Path(venv_bin) / "python")
    assert resolve_command("/usr/local/bin/python", venv_bin) == str(Path(venv_bin) / "python")


def test_termination_message_file_then_log_fallback(tmp_path: Path) -> None:
    msg, log = tmp_path / "msg", tmp_path / "log"
    msg.write_text("")
    log.write_text("line1\nboom\n")
    assert termination_message(msg, "File", 1, log) == ""
    assert termination_message(msg, "FallbackToLogsOnError", 1, log) == "line1\nboom"
    assert termination_message(msg, "FallbackToLogsOnError", 0, log) == ""
    msg.write_text("done")
    assert termination_message(msg, "FallbackToLogsOnError", 1, log) == "done"


def test_node_pools_declare_gpu_nodes_like_gpu_feature_discovery() -> None:
    all_nodes = {n.name: n for n in nodes.all_nodes()}
    gpu = [n for n in all_nodes.values() if n.pool.gpu]
    a100 = [n for n in gpu if n.pool.gpu == nodes.A100_80GB]
    h100 = [n for n in gpu if n.pool.gpu == nodes.H100_80GB]
    assert len(a100) == 2 and len(h100) == 1
    assert any(n.mode == "exec" for n in gpu)
    assert any(n.mode == "exec" for n in all_nodes.values() if not n.pool.gpu)
    manifest = h100[0].manifest()
    labels = manifest["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert manifest["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert manifest["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "mlmodelscope.io/simulation", "value": "kwok", "effect": "NoSchedule"},
    ]


def test_only_kwok_nodes_carry_the_simulation_taint() -> None:
    for node in nodes.all_nodes():
        manifest = node.manifest()
        taints = manifest["spec"].get("taints") or []
        assert (nodes.SIMULATED_TAINT in taints) == (node.mode == "kwok"), node.name
        annotations = manifest["metadata"]["annotations"]
        assert (annotations.get("kwok.x-k8s.io/node") == "fake") == (node.mode == "kwok")
    assert nodes.SIMULATED_TOLERATION == {
        "key": "mlmodelscope.io/simulation",
        "operator": "Equal",
        "value": "kwok",
        "effect": "NoSchedule",
    }


def test_examples_volume_and_claim_are_reserved_for_each_other(tmp_path: Path) -> None:
    folder = examples.claim_folder(tmp_path)
    volume, claim = examples.volume_manifest(folder), examples.claim_manifest()
    assert volume["spec"]["claimRef"]["name"] == claim["metadata"]["name"] == examples.CLAIM
    assert volume["spec"]["claimRef"]["namespace"] == claim["metadata"]["namespace"] == "default"
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert volume["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == ""
    assert set(claim["spec"]["accessModes"]) <= set(volume["spec"]["accessModes"])
    assert volume["spec"]["hostPath"]["path"] == str(folder)


def test_claim_folder_gets_the_models_or_up_says_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlmodelscope.agent import digits

    built = tmp_path / "cache"
    (built / "digits_savedmodel").mkdir(parents=True)
    (built / "digits.onnx").write_bytes(b"onnx")
    monkeypatch.setattr(digits, "ensure_digits_models", lambda: built)
    logged: list[str] = []
    folder = tmp_path / "claim"
    assert examples.fill_claim_folder(folder, logged.append) == ["digits.onnx", "digits_savedmodel"]
    assert (folder / "digits.onnx").read_bytes() == b"onnx" and not logged

    def fails() -> Path:
        raise RuntimeError("building the digits models failed:\nNo module named 'torch'")

    monkeypatch.setattr(digits, "ensure_digits_models", fails)
    assert examples.fill_claim_folder(tmp_path / "empty", logged.append) == []
    [message] = logged
    assert "No module named 'torch'" in message and "models" in message
    assert (tmp_path / "empty").is_dir()


def test_up_prints_lines_a_shell_can_eval(tmp_path: Path) -> None:
    run_dir = tmp_path / "dev cluster"  # a space, quoted
    printed = tmp_path / "up.out"
    exports = shell_exports(run_dir / "kubeconfig", run_dir, run_dir / "bin", "127.0.0.1:5000")
    printed.write_text(exports)
    script = 'PATH=/usr/bin:/bin; eval "$(cat "$1")"; printf "%s\\n" "$KUBECONFIG" '
    script += '"$MLMS_DEV_CLUSTER_DIR" "$PATH" "$MLMS_DEV_REGISTRY"'
    argv = ["bash", "-c", script, "bash", str(printed)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        str(run_dir / "kubeconfig"),
        str(run_dir),
        f"{run_dir / 'bin'}:/usr/bin:/bin",
        "127.0.0.1:5000",
    ]


def test_build_fingerprint_tracks_pins_and_stamps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path))
    assert versions.bin_dir() == tmp_path / "cluster" / versions.KUBERNETES_VERSION / "bin"
    assert not build.is_built("etcd")
    bin_dir = versions.bin_dir()
    (bin_dir / ".stamps").mkdir(parents=True)
    (bin_dir / "etcd").write_text("")
    stamp = bin_dir / ".stamps" / "etcd"
    stamp.write_text(json.dumps({"fingerprint": build.fingerprint("etcd")}))
    assert build.is_built("etcd")
    stamp.write_text(json.dumps({"fingerprint": "old"}))
    assert not build.is_built("etcd")
    assert f"gitVersion={versions.KUBERNETES_VERSION}" in build.kube_ldflags()


def test_wrapper_modules_replace_every_staging_repo(tmp_path: Path) -> None:
    build.write_kube_module(tmp_path / "k")
    gomod = (tmp_path / "k" / "go.mod").read_text()
    assert f"require k8s.io/kubernetes {versions.KUBERNETES_VERSION}" in gomod
    for module in versions.KUBERNETES_STAGING_MODULES:
        assert f"k8s.io/{module} => k8s.io/{module} {versions.KUBERNETES_STAGING_VERSION}" in gomod
    build.write_etcd_module(tmp_path / "e")
    assert "etcdmain.Main(os.Args)" in (tmp_path / "e" / "cmd" / "etcd" / "main.go").read_text()
