"""The real node: pods in real containers, run by a real kubelet.

`cpu-kubelet-0` is a kubelet built from the same pinned k8s.io/kubernetes module as the control
plane, driving Debian's containerd (its CRI plugin) and runc, with pods on a CNI bridge
(Debian's containernetworking-plugins; the network itself is `nodenet`). Unlike the exec
kubelet it runs each container's *image*: its user, its read-only root filesystem, its memory
limit in a cgroup, its seccomp profile, so what a broken image or a wrong UID does in a cluster
happens here too. `kubectl logs` and `exec` reach it through the API server.

State that is slow to rebuild lives in the cache and outlives clusters: containerd's root (the
images loaded into it) and state, under `<cache>/node/`. Everything else (kubelet root, configs,
logs) is in the cluster's run dir. One real node at a time owns the cache (`owner.json`); a
second cluster asking for one is refused while the first's containerd runs.

The node is tainted `mlmodelscope.io/simulation=kubelet:NoSchedule` and labelled
`mlmodelscope.io/simulation=kubelet`: only pods that ask for it (nodeSelector and toleration)
land there, so tests written for the exec and kwok nodes are unaffected.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from mlmodelscope.devcluster import dns, nodenet, nodes, versions

Log = Callable[[str], None]

NAME: Final = "cpu-kubelet-0"
MODE: Final = "kubelet"
POOL: Final = "cpu"
TAINT: Final = {"key": nodes.SIMULATION_LABEL, "value": MODE, "effect": "NoSchedule"}
TOLERATION: Final = {"operator": "Equal", **TAINT}
"""What a pod (or `spec.hardware.tolerations`) adds to be allowed onto the real node."""
SELECTOR: Final = {nodes.SIMULATION_LABEL: MODE}
CRI_NAMESPACE: Final = "k8s.io"
PAUSE_REPOSITORY: Final = "mlmodelscope.local/pause"
DEBIAN_PACKAGES: Final = ("containerd", "runc", "containernetworking-plugins", "iptables")
CNI_BIN_DIR: Final = Path("/usr/lib/cni")
CNI_PLUGINS: Final = ("bridge", "host-local", "loopback")
REQUIRED: Final = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "ip": "iproute2",
}
"""Command → the Debian package that provides it."""


class NodeError(RuntimeError):
    """The real node cannot start here; the message says what is missing and how to add it."""


# ---- where things live ------------------------------------------------------------------


def cache_dir() -> Path:
    """containerd's root and state: the loaded images survive the cluster."""
    return versions.cache_base() / "node"


@dataclass(frozen=True)
class Paths:
    """Every file of one real node: persistent containerd under the cache, the rest per run."""

    run: Path
    cache: Path

    @property
    def node(self) -> Path:
        return self.run / "node"

    @property
    def containerd_root(self) -> Path:
        return self.cache / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.cache / "containerd" / "state"

    @property
    def socket(self) -> Path:
        return self.cache / "containerd" / "containerd.sock"

    @property
    def owner(self) -> Path:
        return self.cache / "owner.json"

    @property
    def images_stamp(self) -> Path:
        """Image reference → the Docker image id loaded under it."""
        return self.cache / "images.json"

    @property
    def certs_dir(self) -> Path:
        """containerd's registry host configurations (``<host>/hosts.toml``)."""
        return self.node / "certs.d"

    @property
    def kubelet_root(self) -> Path:
        return self.node / "kubelet"


# ---- configuration (pure) -----------------------------------------------------------------


def containerd_config(paths: Paths, pause_image: str) -> str:
    """containerd 1.6's config: its own root, state and socket (never the host's), the CRI
    plugin with cgroupfs, the CNI bridge config and a local pause image. The CRI plugin
    restricts ``oom_score_adj`` (a process here may not lower it; runc fails the sandbox
    otherwise). Images are loaded into it (`load_images`) or pulled from the dev cluster's
    registry, whose ``hosts.toml`` files (`registry.write_hosts`) are under `Paths.certs_dir`;
    a pulled layer's blob is dropped once unpacked (``discard_unpacked_layers``), so an image
    takes its size once on this disk, not twice."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{paths.containerd_root}"
state = "{paths.containerd_state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "{paths.socket}"

[ttrpc]
  address = "{paths.socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{paths.containerd_root / "opt"}"

[{cri}]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  discard_unpacked_layers = true

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{shutil.which("runc") or "runc"}"
  Root = "{paths.containerd_state / "runc"}"
  SystemdCgroup = false

[{cri}.registry]
  config_path = "{paths.certs_dir}"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{paths.node / "cni"}"
  max_conf_num = 1
"""


def cni_config(paths: Paths) -> dict[str, Any]:
    """One bridge network on `nodenet.BRIDGE`; host-local addresses, kept in the run dir."""
    return {
        "cniVersion": "0.4.0",
        "name": "mlmodelscope",
        "plugins": [
            {
                "type": "bridge",
                "bridge": nodenet.BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": nodenet.POD_SUBNET, "gateway": nodenet.NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(paths.node / "cni-ipam"),
                },
            }
        ],
    }


def kubelet_config(paths: Paths, ca_cert: Path, port: int, healthz_port: int) -> dict[str, Any]:
    """The KubeletConfiguration for this machine kind: cgroup v1 controllers (cgroupfs, v1
    allowed), no swap check, no QoS cgroup tree or node-allocatable enforcement (this kubelet
    shares the machine with everything else), x509 + webhook auth for the API server's calls,
    and image garbage collection off (an image loaded or pulled stays: loading one takes
    minutes)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": nodenet.NODE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%"},
        # disk pressure on a shared disk comes and goes with builds beside the node: let its
        # NoSchedule taint go 30 s after it ended, not 5 minutes
        "evictionPressureTransitionPeriod": "30s",
        "registerWithTaints": [dict(TAINT)],
        "podLogsDir": str(paths.node / "pod-logs"),
        "volumePluginDir": str(paths.node / "volume-plugins"),
        "resolvConf": str(paths.node / "resolv.conf"),
        "clusterDNS": [nodenet.NODE_IP],
        "clusterDomain": dns.CLUSTER_DOMAIN,
        "staticPodPath": "",
        "serializeImagePulls": True,
        "maxPods": 110,
        "shutdownGracePeriod": "0s",
    }


def kubelet_labels() -> dict[str, str]:
    """The labels the kubelet registers with (NodeRestriction allows our own prefix)."""
    return {
        nodes.SIMULATION_LABEL: MODE,
        nodes.POOL_LABEL: POOL,
        "node.kubernetes.io/instance-type": "dev-kubelet",
    }


def kubelet_argv(binary: Path, paths: Paths, config: Path, kubeconfig: Path) -> list[str]:
    labels = ",".join(f"{k}={v}" for k, v in kubelet_labels().items())
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={paths.kubelet_root}",
        f"--cert-dir={paths.node / 'kubelet-pki'}",
        f"--hostname-override={NAME}",
        f"--node-ip={nodenet.NODE_IP}",
        f"--node-labels={labels}",
        "--v=1",
    ]


# ---- preflight and ownership ------------------------------------------------------------


def preflight() -> None:
    """Fail before anything starts, naming what to install."""
    if os.geteuid() != 0:
        raise NodeError("the real node needs root (containerd, runc, a bridge, iptables)")
    missing = {pkg for cmd, pkg in REQUIRED.items() if shutil.which(cmd) is None}
    if not all((CNI_BIN_DIR / p).is_file() for p in CNI_PLUGINS):
        missing.add("containernetworking-plugins")
    if missing:
        raise NodeError(
            f"the real node needs {', '.join(sorted(missing))}: "
            f"apt-get install {' '.join(sorted(missing))}"
        )
    if (
        not Path("/sys/fs/cgroup/memory").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").is_file()
    ):
        raise NodeError("no memory cgroup controller: the real node cannot enforce limits")


def holder(paths: Paths, alive: Callable[[str], bool]) -> str | None:
    """The run dir of the live cluster whose real node holds the node cache, if any.

    ``alive(run_dir)`` tells whether the recorded owner still runs (its containerd)."""
    try:
        owner = str(json.loads(paths.owner.read_text())["run_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return owner if owner and alive(owner) else None


def refuse_if_held(paths: Paths, run_dir: Path, alive: Callable[[str], bool]) -> None:
    """Raise, naming the cluster to stop, while another live cluster runs the real node."""
    owner = holder(paths, alive)
    if owner is not None and owner != str(run_dir):
        raise NodeError(
            f"a real node already runs for the dev cluster in {owner}; stop it first "
            f"(mlms dev-cluster down --run-dir {owner})"
        )


def claim(paths: Paths, run_dir: Path, alive: Callable[[str], bool]) -> None:
    """Take the node cache for this cluster; refuse while another live cluster holds it."""
    refuse_if_held(paths, run_dir, alive)
    paths.owner.parent.mkdir(parents=True, exist_ok=True)
    paths.owner.write_text(json.dumps({"run_dir": str(run_dir)}))


def release(paths: Paths, run_dir: Path) -> None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        if json.loads(paths.owner.read_text())["run_dir"] == str(run_dir):
            paths.owner.unlink()


# ---- containerd through ctr -------------------------------------------------------------


class Ctr:
    """`ctr` against our containerd, in the CRI plugin's namespace."""

    def __init__(self, socket: Path) -> None:
        self.base = ["ctr", "--address", str(socket), "--namespace", CRI_NAMESPACE]

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def answers(self) -> bool:
        return self("version", check=False, timeout=5).returncode == 0

    def images(self) -> set[str]:
        return set(self("images", "ls", "-q").stdout.split())

    def image_targets(self) -> dict[str, str]:
        """Every image name → the digest of the manifest (or index) it names."""
        rows = self("images", "ls").stdout.splitlines()[1:]
        return {cols[0]: cols[2] for cols in (row.split() for row in rows) if len(cols) > 2}

    def remove_all_containers(self) -> list[str]:
        """Kill every task, delete every container (pods' and sandboxes'); the network
        namespaces of the sandboxes, which nothing else will remove now, are returned."""
        ids = self("containers", "ls", "-q").stdout.split()
        netns: list[str] = []
        for cid in ids:
            info = self("containers", "info", cid, check=False).stdout
            with contextlib.suppress(ValueError, KeyError, TypeError):
                spaces = json.loads(info)["Spec"]["linux"]["namespaces"]
                netns += [n["path"] for n in spaces if n["type"] == "network" and n.get("path")]
            self("tasks", "kill", "--signal", "SIGKILL", cid, check=False)
        for cid in ids:
            for _ in range(50):
                if self("tasks", "delete", "--force", cid, check=False).returncode == 0:
                    break
                if "not found" in self("tasks", "ps", cid, check=False).stderr:
                    break
                time.sleep(0.1)
            self("containers", "delete", cid, check=False)
        return sorted(set(netns))


# ---- images -----------------------------------------------------------------------------


def _tar_bytes(members: Mapping[str, tuple[bytes, int]]) -> bytes:
    """A reproducible tar (fixed owner and mtime) of name → (content, mode)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def pause_image_archive(binary: bytes) -> tuple[str, bytes]:
    """The sandbox image as an OCI image-layout archive: one layer holding `/pause`, run as
    65535 like upstream's. Returns (reference, archive bytes); the tag is the binary's hash."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    layer = _tar_bytes({"pause": (binary, 0o755)})
    layer_ref = blob(layer)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [layer_ref["digest"]]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(_json(config))},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_ref}],
    }
    manifest_ref = blob(_json(manifest))
    reference = f"{PAUSE_REPOSITORY}:{hashlib.sha256(binary).hexdigest()[:12]}"
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest_ref,
                "annotations": {
                    "io.containerd.image.name": reference,
                    "org.opencontainers.image.ref.name": reference.rpartition(":")[2],
                },
            }
        ],
    }
    members = {
        "oci-layout": (_json({"imageLayoutVersion": "1.0.0"}), 0o644),
        "index.json": (_json(index), 0o644),
        **{f"blobs/sha256/{d.removeprefix('sha256:')}": (b, 0o644) for d, b in blobs.items()},
    }
    return reference, _tar_bytes(members)


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def ensure_pause_image(ctr: Ctr, reference: str, archive: bytes) -> None:
    """Import the pause image (`pause_image_archive`) unless containerd has it."""
    if reference not in ctr.images():
        proc = subprocess.run(
            [*ctr.base, "images", "import", "-"], input=archive, capture_output=True, timeout=120
        )
        if proc.returncode != 0:
            raise NodeError(f"ctr images import failed: {proc.stderr.decode(errors='replace')}")


@dataclass(frozen=True)
class Loaded:
    """One image made available to the node: how long it took, or that it was already there."""

    reference: str
    image_id: str
    seconds: float
    cached: bool


def load_images(
    socket: Path,
    stamp: Path,
    references: Sequence[str],
    docker: Sequence[str],
    log: Log,
) -> list[Loaded]:
    """Copy images from a Docker engine into the node's containerd (`docker save | ctr
    images import`), skipping any whose Docker image id was loaded before under that name.
    A new id under a loaded name replaces the old image (its name and the CRI plugin's
    ``sha256:<id>`` record), whose layers containerd then collects: the store holds each
    image's layers twice (blobs and unpacked snapshots), about 17 GB for the four CPU images.

    ``docker`` is the Docker CLI argv (DOCKER_HOST in the environment picks the engine)."""
    ctr = Ctr(socket)
    try:
        loaded_ids: dict[str, str] = json.loads(stamp.read_text())
    except (OSError, ValueError):
        loaded_ids = {}
    present = ctr.images()
    results: list[Loaded] = []
    for ref in references:
        inspect = subprocess.run(
            [*docker, "image", "inspect", "--format", "{{.Id}}", ref],
            capture_output=True,
            text=True,
        )
        if inspect.returncode != 0:
            raise NodeError(f"image {ref} is not in the Docker engine: {inspect.stderr.strip()}")
        image_id = inspect.stdout.strip()
        if loaded_ids.get(ref) == image_id and _normalized(ref) in present:
            results.append(Loaded(ref, image_id, 0.0, True))
            continue
        started = time.monotonic()
        previous = loaded_ids.pop(ref, None)
        if previous is not None:  # drop the old generation: each one holds its layers twice
            stale = [r for r in (_normalized(ref), previous) if r in present]
            ctr("images", "rm", "--sync", *stale, check=False, timeout=600)
            stamp.write_text(json.dumps(loaded_ids, indent=1, sort_keys=True))
        log(f"  loading {ref} into the node's containerd")
        save = subprocess.Popen([*docker, "save", ref], stdout=subprocess.PIPE)
        proc = subprocess.run(
            [*ctr.base, "images", "import", "-"], stdin=save.stdout, capture_output=True
        )
        assert save.stdout is not None
        save.stdout.close()
        if save.wait() != 0 or proc.returncode != 0:
            raise NodeError(f"loading {ref} failed: {proc.stderr.decode(errors='replace')}")
        loaded_ids[ref] = image_id
        stamp.write_text(json.dumps(loaded_ids, indent=1, sort_keys=True))
        results.append(Loaded(ref, image_id, time.monotonic() - started, False))
    return results


def unload_images(socket: Path, stamp: Path, references: Sequence[str], log: Log) -> list[str]:
    """Remove from the node's containerd the side-loaded names among ``references`` (those
    `load_images` recorded in ``stamp``) and their CRI records, once pods pull the same
    images from the registry instead; the names removed. Layers an image pulled from the
    registry shares stay: containerd collects only what no image names."""
    try:
        loaded_ids: dict[str, str] = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return []
    ctr = Ctr(socket)
    present = ctr.images()
    removed: list[str] = []
    for ref in references:
        image_id = loaded_ids.pop(ref, None)
        if image_id is None:
            continue
        names = [r for r in (_normalized(ref), image_id) if r in present]
        if names:
            log(f"  removing side-loaded {ref} from the node's containerd")
            ctr("images", "rm", "--sync", *names, check=False, timeout=600)
            removed += names
        stamp.write_text(json.dumps(loaded_ids, indent=1, sort_keys=True))
    return removed


def drop_stale_pulls(socket: Path, current: Sequence[str], log: Log) -> list[str]:
    """Remove the images containerd pulled under the repositories of ``current`` (references
    ``host/repository@sha256:…``) at other digests, with every other name of theirs (the CRI
    plugin's ``sha256:<id>``): a rebuilt image is pushed under a new digest, and each
    generation holds its layers twice on the node. The names removed."""
    wanted = {ref.rpartition("@")[0]: ref.rpartition("@")[2] for ref in current}
    ctr = Ctr(socket)
    targets = ctr.image_targets()
    stale = {
        digest
        for name, digest in targets.items()
        if "@" in name and wanted.get(name.rpartition("@")[0], digest) != digest
    }
    names = sorted(name for name, digest in targets.items() if digest in stale)
    if names:
        log(f"  removing {len(stale)} earlier generation(s) from the node's containerd")
        ctr("images", "rm", "--sync", *names, check=False, timeout=600)
    return names


def _normalized(ref: str) -> str:
    """A reference as containerd stores it (`docker.io/library/` added where implied)."""
    first, _, rest = ref.partition("/")
    if not rest:
        return f"docker.io/library/{ref}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{ref}"
    return ref


# ---- mounts ---------------------------------------------------------------------------


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first (for unmounting)."""
    prefix = str(root).rstrip("/") + "/"
    found: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(prefix) or point == prefix.rstrip("/"):
                found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"), reverse=True)


def unmount_under(root: Path) -> None:
    for point in mounts_under(root):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)


def write_files(
    paths: Paths,
    *,
    ca_cert: Path,
    server: str,
    token: str,
    pause_image: str,
    ports: tuple[int, int],
) -> tuple[Path, Path, Path]:
    """Write containerd's, CNI's and the kubelet's configs; (containerd config, kubelet
    config, kubelet kubeconfig)."""
    import base64

    for sub in ("cni", "pod-logs", "volume-plugins", "kubelet", "kubelet-pki", "certs.d"):
        (paths.node / sub).mkdir(parents=True, exist_ok=True)
    for folder in (paths.containerd_root, paths.containerd_state):
        folder.mkdir(parents=True, exist_ok=True)
    (paths.node / "resolv.conf").write_text(
        "# pods ask the cluster DNS (clusterDNS); nothing else\n"
    )
    containerd_toml = paths.node / "containerd.toml"
    containerd_toml.write_text(containerd_config(paths, pause_image))
    (paths.node / "cni" / "10-mlmodelscope.conflist").write_text(
        json.dumps(cni_config(paths), indent=2)
    )
    kubelet_yaml = paths.node / "kubelet.yaml"
    kubelet_yaml.write_text(yaml.safe_dump(kubelet_config(paths, ca_cert, *ports)))
    ca = base64.b64encode(ca_cert.read_bytes()).decode()
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "dev", "cluster": {"server": server, "certificate-authority-data": ca}}
        ],
        "users": [{"name": NAME, "user": {"token": token}}],
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": NAME}}],
        "current-context": "dev",
    }
    kubelet_kubeconfig = paths.node / "kubelet.kubeconfig"
    kubelet_kubeconfig.write_text(yaml.safe_dump(kubeconfig))
    kubelet_kubeconfig.chmod(0o600)
    return containerd_toml, kubelet_yaml, kubelet_kubeconfig
