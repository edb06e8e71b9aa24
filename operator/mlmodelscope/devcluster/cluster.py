"""Start, probe and stop a real Kubernetes control plane on loopback, one run dir per cluster.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the exec kubelet run as
ordinary processes on free ports, beside an OCI registry on loopback (`registry`); with
``real_node=True`` a real kubelet and containerd run pods in containers too (`node`), pulling
from that registry. Every process gets a marker in its environment and its own
process group; `stop` kills by recorded PID and then sweeps /proc for the marker, so nothing
outlives the cluster, not even a grandchild an exec node started. State lives in
`<run dir>/state.json`, which is how `mlms dev-cluster down` in another shell finds it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from mlmodelscope.devcluster import (
    build,
    dns,
    examples,
    node,
    nodenet,
    nodes,
    pki,
    registry,
    storage,
    versions,
)
from mlmodelscope.devcluster.rest import KubeREST

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

Log = Callable[[str], None]

MARKER_ENV: Final = "MLMS_DEVCLUSTER_ID"
"""Set in every process the harness starts (inherited by their children) for the /proc sweep."""
STATE_FILE: Final = "state.json"
KWOK_NODE_STAGES: Final = ("node/fast/node-initialize.yaml",)
KWOK_POD_STAGES: Final = (
    "pod/general/pod-create.yaml",
    "pod/general/pod-init-container-running.yaml",
    "pod/general/pod-init-container-completed.yaml",
    "pod/general/pod-ready.yaml",
    "pod/general/pod-complete.yaml",
    "pod/general/pod-delete.yaml",
)
"""kwok's `general` pod lifecycle: Pending → Running → (Job-owned pods) Succeeded, and delete."""
KWOK_POD_DELAY_MS: Final = 500
KWOK_POD_JITTER_MS: Final = 1000
"""Upstream waits 1 s + up to 5 s per stage; shorter keeps tests fast yet still observable."""
NODE_LEASE_SECONDS: Final = 40
COMPONENT_ORDER: Final = (
    "etcd",
    "registry",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "execlet",
    "containerd",
    "kubelet",
)


class ClusterError(RuntimeError):
    """The cluster could not start; the message carries the failing component's log tail."""


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def default_run_dir() -> Path:
    """The run dir `mlms dev-cluster up/down/status` share across shells."""
    return versions.cache_base() / "dev-cluster"


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports; sockets are held until all are picked to avoid repeats."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL the child if the (test) process that owns it dies without cleanup."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    """True for a live, non-zombie process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def marked_processes(marker: str) -> list[int]:
    """PIDs of live processes whose environment carries this cluster's marker."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@dataclass
class ProcessRecord:
    """One started component, as written to state.json."""

    name: str
    pid: int
    argv: list[str]
    log: str
    env: dict[str, str] = field(default_factory=dict)
    """Variables set on top of the harness's environment (kept so a restart is identical)."""


@dataclass
class State:
    """Everything another shell needs to use or stop the cluster."""

    run_dir: str
    marker: str
    kubeconfig: str
    server: str
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    started_at: float = 0.0
    ready_seconds: float | None = None
    """Start to all-nodes-Ready, excluding any build."""
    real_node: bool = False
    """Whether `node.NAME` (kubelet + containerd) is part of this cluster."""
    registry: str = ""
    """The registry's ``host:port`` on loopback (pods name it `registry.NAME`)."""

    @classmethod
    def load(cls, path: Path) -> State:
        data = json.loads(path.read_text())
        data["processes"] = [ProcessRecord(**p) for p in data.get("processes", [])]
        return cls(**data)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


class Cluster:
    """A control plane rooted at `run_dir`. `detach=True` lets it outlive this process."""

    def __init__(
        self, run_dir: Path, *, detach: bool = False, real_node: bool = False, log: Log = _stderr
    ) -> None:
        self.run_dir = run_dir.resolve()
        self.detach = detach
        self.real_node = real_node
        self.log = log
        self.state: State | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._rest: KubeREST | None = None

    # ---- paths -------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.run_dir / STATE_FILE

    @property
    def kubeconfig(self) -> Path:
        return self.run_dir / "kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def pods_dir(self) -> Path:
        """Where the exec kubelet keeps each pod's materialized volumes and container logs."""
        return self.run_dir / "pods"

    @property
    def ca_cert(self) -> Path:
        return self.run_dir / "pki" / "ca.crt"

    @property
    def bin_dir(self) -> Path:
        return versions.bin_dir()

    @property
    def kubectl_dir(self) -> Path:
        """Holds only `kubectl` (a link to the one built with the cluster), for PATH."""
        return self.run_dir / "bin"

    @property
    def examples_dir(self) -> Path:
        """The host folder of the `mlmodelscope-examples` claim (the example models)."""
        return examples.claim_folder(self.run_dir)

    @property
    def node_paths(self) -> node.Paths:
        """Where the real node keeps its files (whether or not this cluster has one)."""
        return node.Paths(run=self.run_dir, cache=node.cache_dir())

    @property
    def server(self) -> str:
        return self._require_state().server

    @property
    def registry_address(self) -> str:
        """``host:port`` to push to from this host."""
        return self._require_state().registry

    @property
    def marker(self) -> str:
        return self._require_state().marker

    def _require_state(self) -> State:
        if self.state is None:
            raise ClusterError(f"no cluster state in {self.run_dir}")
        return self.state

    @classmethod
    def attach(cls, run_dir: Path, *, log: Log = _stderr) -> Cluster:
        """A handle on a cluster some other process started (for `down`/`status`)."""
        cluster = cls(run_dir, detach=True, log=log)
        if not cluster.state_path.is_file():
            raise ClusterError(f"no dev cluster state at {cluster.state_path}")
        cluster.state = State.load(cluster.state_path)
        cluster.real_node = cluster.state.real_node
        return cluster

    # ---- start -------------------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> None:
        """Build if needed, start every component, wait until nodes are Ready; all or nothing.

        `timeout` covers the start itself; a cold build before it is not counted.
        """
        build.ensure_built(self.log)
        registry_binary = registry.ensure_registry(self.log)
        if self.real_node:
            node.preflight()
            node.refuse_if_held(self.node_paths, self.run_dir, containerd_runs)  # before starting
            build.build(versions.NODE_COMPONENTS, log=self.log)
            dns.ensure_dns(self.log)
        if self._previous_alive():
            raise ClusterError(f"a cluster is already running from {self.run_dir}; stop it first")
        self._prepare_run_dir()
        models = examples.fill_claim_folder(self.examples_dir, self.log)  # a cold build: ~1 min
        started = time.monotonic()
        names = (
            "etcd",
            "etcd-peer",
            "kube-apiserver",
            "kube-controller-manager",
            "scheduler",
            "registry",
        )
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.state = State(
            run_dir=str(self.run_dir),
            marker=uuid.uuid4().hex,
            kubeconfig=str(self.kubeconfig),
            server=f"https://127.0.0.1:{ports['kube-apiserver']}",
            ports=ports,
            started_at=time.time(),
            real_node=self.real_node,
            registry=f"127.0.0.1:{ports['registry']}",
        )
        self.state.save(self.state_path)
        deadline = started + timeout
        try:
            self._start_all(ports, registry_binary, deadline)
            self._provide_examples(models, deadline)
        except BaseException:
            self.log("start failed; stopping what was started")
            self.stop()
            raise
        self.state.ready_seconds = round(time.monotonic() - started, 2)
        self.state.save(self.state_path)
        self.log(f"cluster ready in {self.state.ready_seconds:.1f}s — KUBECONFIG={self.kubeconfig}")

    def _previous_alive(self) -> dict[str, int]:
        """Components of an earlier cluster in this run dir that still run (never start twice)."""
        try:
            return Cluster.attach(self.run_dir, log=self.log).alive_components()
        except (ClusterError, ValueError, TypeError, KeyError):
            return {}

    def _prepare_run_dir(self) -> None:
        for sub in ("etcd", "pki", "logs", "pods", "certs", "volumes", "bin"):
            shutil.rmtree(self.run_dir / sub, ignore_errors=True)
        for sub in ("logs", "pods", "certs", "bin"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.kubectl_dir / "kubectl").symlink_to(self.bin_dir / "kubectl")
        self.state_path.unlink(missing_ok=True)

    def _provide_examples(self, models: list[str], deadline: float) -> None:
        """The examples claim, bound for real by the PV controller, and the default
        StorageClass with its host-folder volumes."""
        storage.provision(self.rest(), self.run_dir)
        examples.provision(self.rest(), self.examples_dir)
        self._wait(
            f"claim {examples.CLAIM} to be bound",
            lambda: examples.claim_bound(self.rest()),
            deadline,
        )
        content = ", ".join(models) if models else "empty"
        self.log(f"  claim {examples.NAMESPACE}/{examples.CLAIM} bound: {content}")

    def _start_all(self, ports: dict[str, int], registry_binary: Path, deadline: float) -> None:
        t0 = time.monotonic()
        bins = self.bin_dir
        keys = pki.generate(self.run_dir / "pki", node.NAME if self.real_node else "")
        self._write_kubeconfig(keys.admin_token)
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                str(bins / "etcd"),
                "--name=mlms",
                f"--data-dir={self.run_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=mlms={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        address = self._require_state().registry
        registry.data_dir().mkdir(parents=True, exist_ok=True)
        self._spawn("registry", registry.argv(registry_binary, address, registry.data_dir()))
        self._wait("etcd", lambda: _http_ok(f"{etcd_url}/health"), deadline)
        self.log(f"  etcd ready ({time.monotonic() - t0:.1f}s)")
        self._wait("registry", self._readiness("registry"), deadline)
        self.log(f"  registry ready at {address} ({time.monotonic() - t0:.1f}s)")
        self._spawn(
            "kube-apiserver",
            [
                str(bins / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={ports['kube-apiserver']}",
                f"--tls-cert-file={keys.serving_cert}",
                f"--tls-private-key-file={keys.serving_key}",
                f"--client-ca-file={keys.ca_cert}",
                f"--token-auth-file={keys.token_file}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=PodSecurity,NodeRestriction",
                f"--kubelet-client-certificate={keys.kubelet_client_cert}",
                f"--kubelet-client-key={keys.kubelet_client_key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={pki.SERVICE_CLUSTER_IP_RANGE}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={keys.sa_pub}",
                f"--service-account-signing-key-file={keys.sa_key}",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={self.run_dir / 'certs'}",
                "--profiling=false",
            ],
        )
        self._wait("kube-apiserver", self.is_ready, deadline)
        self.log(f"  kube-apiserver ready ({time.monotonic() - t0:.1f}s)")
        self._register_nodes()
        kubeconfig = str(self.kubeconfig)
        delegated = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]
        self._spawn(
            "kube-controller-manager",
            [
                str(bins / "kube-controller-manager"),
                *delegated,
                f"--secure-port={ports['kube-controller-manager']}",
                f"--cert-dir={self.run_dir / 'certs' / 'kcm'}",
                "--controllers=*",
                f"--service-account-private-key-file={keys.sa_key}",
                f"--root-ca-file={keys.ca_cert}",
                f"--cluster-signing-cert-file={keys.ca_cert}",
                f"--cluster-signing-key-file={keys.ca_key}",
                "--use-service-account-credentials=true",
                "--node-monitor-period=5s",
                "--node-monitor-grace-period=40s",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(bins / "kube-scheduler"),
                *delegated,
                f"--secure-port={ports['scheduler']}",
                f"--cert-dir={self.run_dir / 'certs' / 'scheduler'}",
            ],
        )
        kwok_config = self._write_kwok_config()
        self._spawn(
            "kwok",
            [
                str(bins / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={kwok_config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-label-selector={nodes.KWOK_SELECTOR}",
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
                "--cidr=10.244.0.0/16",
                "--node-ip=127.0.0.1",
            ],
        )
        package_root = str(Path(__file__).resolve().parents[2])
        pythonpath = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        self._spawn(
            "execlet",
            [sys.executable, "-m", "mlmodelscope.devcluster", "execlet", str(self.run_dir)],
            env={"PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"},
        )
        if self.real_node:
            self._start_real_node(keys, ports["kube-apiserver"], deadline)
            self.log(f"  containerd and kubelet started ({time.monotonic() - t0:.1f}s)")
        self._wait(
            "kube-controller-manager",
            lambda: _http_ok(f"https://127.0.0.1:{ports['kube-controller-manager']}/healthz"),
            deadline,
        )
        self._wait(
            "kube-scheduler",
            lambda: _http_ok(f"https://127.0.0.1:{ports['scheduler']}/healthz"),
            deadline,
        )
        self.log(f"  controller-manager, scheduler ready ({time.monotonic() - t0:.1f}s)")
        self._wait("nodes", self._nodes_ready, deadline)
        self.log(f"  {self._node_count()} nodes Ready ({time.monotonic() - t0:.1f}s)")
        self._wait("default service account", self._default_sa_exists, deadline)

    def _start_real_node(self, keys: pki.PKI, api_port: int, deadline: float) -> None:
        """containerd (leftover containers of a crashed run removed, the pause image
        imported, the registry as a plain-HTTP host), then the kubelet, on the node network
        (`nodenet`)."""
        paths = self.node_paths
        node.claim(paths, self.run_dir, containerd_runs)
        nodenet.setup(api_port)
        ctr = node.Ctr(paths.socket)
        pause, pause_archive = node.pause_image_archive((self.bin_dir / "pause").read_bytes())
        kubelet_port, healthz_port = free_ports(2)
        containerd_toml, kubelet_yaml, kubelet_kubeconfig = node.write_files(
            paths,
            ca_cert=keys.ca_cert,
            server=self._require_state().server,
            token=keys.node_token,
            pause_image=pause,
            ports=(kubelet_port, healthz_port),
        )
        # The sandbox image is imported below, and pushed too: a kubelet under disk pressure
        # deletes unused images, the pause image among them, and containerd then pulls it back.
        address = self._require_state().registry
        registry.write_hosts(paths.certs_dir, address, node.PAUSE_REPOSITORY.partition("/")[0])
        repository, _, tag = pause.partition("/")[2].partition(":")
        registry.push_archive(address, repository, io.BytesIO(pause_archive), tag=tag)
        self._start_dns(deadline)
        self._spawn("containerd", ["containerd", f"--config={containerd_toml}"])
        self._wait("containerd", ctr.answers, deadline)
        nodenet.remove_netns(ctr.remove_all_containers())
        node.ensure_pause_image(ctr, pause, pause_archive)
        kubelet = node.kubelet_argv(
            self.bin_dir / "kubelet", paths, kubelet_yaml, kubelet_kubeconfig
        )
        self._spawn("kubelet", kubelet)

    def _start_dns(self, deadline: float) -> None:
        """CoreDNS on the node bridge, for the pods' cluster DNS (`dns`)."""
        (health_port,) = free_ports(1)
        corefile = self.node_paths.node / "Corefile"
        corefile.parent.mkdir(parents=True, exist_ok=True)
        corefile.write_text(dns.corefile(self.kubeconfig, health_port))
        self._spawn("dns", dns.argv(dns.TOOL.binary_path(), corefile))
        self._wait("dns", lambda: _http_ok(f"http://127.0.0.1:{health_port}/health"), deadline)

    def _write_kubeconfig(self, token: str) -> None:
        import base64

        state = self._require_state()
        ca = base64.b64encode(self.ca_cert.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "mlms-dev",
                    "cluster": {"server": state.server, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "mlms-dev", "context": {"cluster": "mlms-dev", "user": "admin"}}],
            "current-context": "mlms-dev",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _write_kwok_config(self) -> Path:
        """kwok's own stage files from the module cache, with pod delays shortened."""
        stage_dir = build.kwok_stage_dir()
        docs: list[Any] = []
        for rel in (*KWOK_NODE_STAGES, *KWOK_POD_STAGES):
            stage = yaml.safe_load((stage_dir / rel).read_text())
            delay = stage.get("spec", {}).get("delay")
            if rel.startswith("pod/") and isinstance(delay, dict):
                delay["durationMilliseconds"] = KWOK_POD_DELAY_MS
                delay["jitterDurationMilliseconds"] = KWOK_POD_JITTER_MS
            docs.append(stage)
        path = self.run_dir / "kwok.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return path

    def _spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        state = self._require_state()
        log_path = self.logs_dir / f"{name}.log"
        penv = {**os.environ, **(env or {}), MARKER_ENV: state.marker}
        penv.pop("KUBECONFIG", None)
        with log_path.open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                env=penv,
                start_new_session=True,
                preexec_fn=None if self.detach else _die_with_parent,
            )
        self._procs[proc.pid] = proc
        state.processes = [p for p in state.processes if p.name != name]  # a restart replaces it
        state.processes.append(ProcessRecord(name, proc.pid, list(argv), str(log_path), env or {}))
        state.save(self.state_path)

    def _wait(self, what: str, probe: Callable[[], bool], deadline: float) -> None:
        """Poll `probe` until true; fail fast, with the log tail, if a component died."""
        while True:
            dead = [p for p in self._require_state().processes if not self._alive(p.pid)]
            if dead:
                first = dead[0]
                raise ClusterError(
                    f"{first.name} exited while waiting for {what}:\n{_tail(Path(first.log))}"
                )
            try:
                if probe():
                    return
            except Exception:  # a probe failing just means "not yet"
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {p.name}\n{_tail(Path(p.log), 15)}"
                    for p in self._require_state().processes
                )
                raise ClusterError(f"timed out waiting for {what}\n{logs}")
            time.sleep(0.25)

    def _alive(self, pid: int) -> bool:
        proc = self._procs.get(pid)
        if proc is not None:
            return proc.poll() is None
        return pid_alive(pid)

    # ---- probes ------------------------------------------------------------------------
    def is_ready(self) -> bool:
        """GET /readyz with the admin token and the cluster CA."""
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        token = self._token()
        return _http_ok(f"{self.server}/readyz", ctx, {"Authorization": f"Bearer {token}"})

    def _token(self) -> str:
        config = yaml.safe_load(self.kubeconfig.read_text())
        return str(config["users"][0]["user"]["token"])

    def rest(self) -> KubeREST:
        """The harness's plain JSON client (same kubeconfig)."""
        if self._rest is None:
            self._rest = KubeREST.from_kubeconfig(self.kubeconfig)
        return self._rest

    def _register_nodes(self) -> None:
        for sim in nodes.all_nodes():
            self.rest().create("/api/v1/nodes", sim.manifest())

    def _node_count(self) -> int:
        """The simulated nodes, and the real node when this cluster has one."""
        return len(nodes.all_nodes()) + int(self.real_node)

    def _nodes_ready(self) -> bool:
        bad_taints = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
        items = self.rest().get("/api/v1/nodes")["items"]
        if len(items) < self._node_count():
            return False
        for item in items:
            conditions = {c["type"]: c["status"] for c in item["status"].get("conditions") or []}
            if conditions.get("Ready") != "True":
                return False
            if any(t["key"] in bad_taints for t in item["spec"].get("taints") or []):
                return False
        return True

    def _default_sa_exists(self) -> bool:
        self.rest().get("/api/v1/namespaces/default/serviceaccounts/default")
        return True

    def alive_components(self) -> dict[str, int]:
        """Name → PID of every recorded component still running."""
        if self.state is None:
            return {}
        return {p.name: p.pid for p in self.state.processes if self._alive(p.pid)}

    # ---- fault injection ---------------------------------------------------------------
    def stop_component(self, name: str, timeout: float = 15.0) -> None:
        """Stop one running component (SIGTERM to its group, SIGKILL after ``timeout``), as a
        crash or an upgrade takes it away; its record stays so `start_component` can bring it
        back. For fault-injection tests: everything else keeps running."""
        record = self._record(name)
        if not self._alive(record.pid):
            raise ClusterError(f"{name} is not running")
        self._terminate(record.pid, self.marker, timeout)
        if self._alive(record.pid):
            raise ClusterError(f"{name} (pid {record.pid}) did not stop")

    def start_component(self, name: str, timeout: float = 60.0) -> int:
        """Start a stopped component again with the argv, environment, ports, data dir and log
        it had (etcd keeps its data, the API server its address), and wait until it answers
        (etcd `/health`, the API server `/readyz`, the registry `/v2/`; others: still alive
        after a moment). Returns its new PID."""
        record = self._record(name)
        if self._alive(record.pid):
            raise ClusterError(f"{name} is already running (pid {record.pid})")
        self._spawn(name, record.argv, record.env)
        ready = self._readiness(name)
        deadline = time.monotonic() + timeout
        self._wait(f"{name} to come back", ready, deadline)
        return self._record(name).pid

    def _record(self, name: str) -> ProcessRecord:
        for record in self._require_state().processes:
            if record.name == name:
                return record
        raise ClusterError(f"no component named {name!r} in this cluster")

    def _readiness(self, name: str) -> Callable[[], bool]:
        ports = self._require_state().ports
        if name == "etcd":
            return lambda: _http_ok(f"http://127.0.0.1:{ports['etcd']}/health")
        if name == "kube-apiserver":
            return self.is_ready
        if name == "registry":
            return lambda: _http_ok(f"http://{self._require_state().registry}/v2/")
        started = time.monotonic()
        return lambda: time.monotonic() - started > 1.0  # `_wait` fails if it died meanwhile

    # ---- clients -----------------------------------------------------------------------
    def api_client(self) -> ApiClient:
        """A kubernetes.client.ApiClient built from the same kubeconfig kubectl uses."""
        from kubernetes import config

        api: ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return api

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run the kubectl built with the cluster (same version) against this cluster."""
        argv = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def wait_established(self, crd: str, timeout: float = 60.0) -> None:
        """Wait until the CustomResourceDefinition ``crd`` (its full name) is Established.

        Polled rather than ``kubectl wait``: right after an apply that changes a CRD, its
        ``status.conditions`` can be null for a moment, and ``kubectl wait`` then fails at once
        (".status.conditions accessor error") instead of waiting."""
        query = '{.status.conditions[?(@.type=="Established")].status}'
        deadline = time.monotonic() + timeout
        while True:
            got = self.kubectl("get", "crd", crd, "-o", f"jsonpath={query}", check=False)
            if got.returncode == 0 and got.stdout.strip() == "True":
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"CRD {crd} not Established after {timeout:.0f} s: "
                    f"{(got.stderr or got.stdout).strip() or 'no Established condition'}"
                )
            time.sleep(0.25)

    # ---- stop --------------------------------------------------------------------------
    def stop(self, timeout: float = 15.0) -> list[int]:
        """Stop every component by PID (reverse start order), then sweep for the marker.

        Returns the PIDs still alive afterwards (empty on success).
        """
        state = self.state
        if state is None:
            return []
        if state.real_node and "containerd" in self.alive_components():
            # The kubelet first (it would start the next pod's containers), then every
            # container through containerd: containers outlive a killed containerd and shim.
            for record in state.processes:
                if record.name == "kubelet":
                    self._terminate(record.pid, state.marker, timeout)
            with contextlib.suppress(node.NodeError, subprocess.SubprocessError):
                nodenet.remove_netns(node.Ctr(self.node_paths.socket).remove_all_containers())
        records = sorted(
            state.processes,
            key=lambda p: -COMPONENT_ORDER.index(p.name) if p.name in COMPONENT_ORDER else 0,
        )
        for record in records:
            self._terminate(record.pid, state.marker, timeout)
        for pid in marked_processes(state.marker):
            self._terminate(pid, state.marker, 5.0)
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1)
        if state.real_node:
            node.unmount_under(self.node_paths.node)
            nodenet.teardown()
            node.release(self.node_paths, self.run_dir)
        for scratch in ("etcd", "pki"):  # data and keys die with the cluster; logs stay
            shutil.rmtree(self.run_dir / scratch, ignore_errors=True)
        leftovers = [p.pid for p in state.processes if self._alive(p.pid)]
        leftovers += [p for p in marked_processes(state.marker) if p not in leftovers]
        if not leftovers:
            self.state_path.unlink(missing_ok=True)
        return leftovers

    def _terminate(self, pid: int, marker: str, timeout: float) -> None:
        """SIGTERM the process group, then SIGKILL; never touches a recycled PID."""
        if not self._alive(pid) or not self._owns(pid, marker):
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            for send in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    send(pid, sig)
            end = time.monotonic() + wait
            while time.monotonic() < end:
                if not self._alive(pid):
                    return
                time.sleep(0.05)

    def _owns(self, pid: int, marker: str) -> bool:
        if pid in self._procs:
            return True
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False
        return f"{MARKER_ENV}={marker}".encode() in environ.split(b"\0")

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def containerd_runs(run_dir: str) -> bool:
    """Whether the cluster in ``run_dir`` still runs its real node's containerd."""
    try:
        return "containerd" in Cluster.attach(Path(run_dir)).alive_components()
    except ClusterError:
        return False


def _http_ok(
    url: str, ctx: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
) -> bool:
    if ctx is None and url.startswith("https"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


@contextlib.contextmanager
def running_cluster(run_dir: Path, *, log: Log = _stderr) -> Iterator[Cluster]:
    """Start a cluster for the duration of a block; stopped even when the block raises."""
    cluster = Cluster(run_dir, log=log)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
