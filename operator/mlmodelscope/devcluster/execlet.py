"""The exec kubelet: runs pods bound to `exec` nodes as real processes on this machine.

No kubelet or container runtime can run here, so this stands in for both on the exec nodes.
It keeps each exec node alive (node Lease + Ready condition), watches pods bound to those
nodes, materializes their ConfigMap/Secret/emptyDir/projected volumes into a temp dir (a
PersistentVolumeClaim is its bound hostPath/local PersistentVolume's folder), runs each
container's `command`+`args` with the repo's venv first on PATH, and reports the outcome
(exit code, reason, termination message) in the pod status the way a kubelet does, so the Job
controller sees a real result. Absolute mount paths in args/env are rewritten to the host
paths, and `MLMS_PATH_MAP` ({mountPath: hostPath}) lets programs map paths they build.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mlmodelscope.contract.paths import PATH_MAP_ENV
from mlmodelscope.devcluster import nodes
from mlmodelscope.devcluster.rest import MERGE, KubeError, KubeREST, pod_path

HEARTBEAT_SECONDS: Final = 10
LEASE_SECONDS: Final = 40
MAX_GRACE_SECONDS: Final = 30
TERMINATION_MESSAGE_LIMIT: Final = 4096
FALLBACK_LOG_LIMIT: Final = 2048
FALLBACK_LOG_LINES: Final = 80
DEFAULT_TERMINATION_PATH: Final = "/dev/termination-log"
MARKER_ENV: Final = "MLMS_DEVCLUSTER_ID"  # same as cluster.MARKER_ENV, without importing it
HOST_ENV_KEEP: Final = ("HOME", "LANG", "LC_ALL", "USER", "PYTHONPATH", "MLMS_CACHE_DIR")
"""Host variables a pod inherits; everything else comes from the pod spec, as in a container."""

Pod = dict[str, Any]


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _log(msg: str) -> None:
    sys.stdout.write(f"{now()} {msg}\n")
    sys.stdout.flush()


class PodGoneError(Exception):
    """The pod was deleted under us; stop working on it."""


class MissingReferenceError(Exception):
    """A ConfigMap/Secret/claim the pod needs is not there (yet); the kubelet retries these."""


# ---- pure helpers (unit-testable without a cluster) -------------------------------------

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined vars are replaced, `$$` escapes, others stay."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(sub, value)


def path_rewriter(mounts: dict[str, str]) -> Callable[[str], str]:
    """Replace absolute mount paths (as whole path prefixes) in a string with host paths.

    One regex, longest mount first, so a replaced path is never rewritten twice.
    """
    keys = sorted((m.rstrip("/") for m in mounts if m.rstrip("/")), key=len, reverse=True)
    if not keys:
        return lambda s: s
    table = {m.rstrip("/"): h for m, h in mounts.items() if m.rstrip("/")}
    pattern = re.compile(
        r"(?<![\w.\-/])(" + "|".join(re.escape(k) for k in keys) + r")(?=/|$|[^\w.\-])"
    )
    return lambda s: pattern.sub(lambda m: table[m.group(1)], s)


def field_ref(pod: Pod, path: str) -> str:
    """The downward-API fields a pod can ask for in env or a downwardAPI volume."""
    meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP") or "127.0.0.1",
        "status.hostIP": status.get("hostIP") or "127.0.0.1",
        "status.podIPs": status.get("podIP") or "127.0.0.1",
        "status.hostIPs": status.get("hostIP") or "127.0.0.1",
    }
    if path in ("metadata.labels", "metadata.annotations"):
        data = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(data.items()))
    if path not in simple:
        raise ValueError(f"unsupported fieldRef {path!r}")
    return str(simple[path] or "")


def resolve_command(argv0: str, path_env: str) -> str:
    """Find the executable as an image would, preferring the venv (first on PATH).

    An absolute path that does not exist here (`/usr/local/bin/python`) falls back to its
    basename on PATH, so image-style commands still run.
    """
    if "/" in argv0:
        if Path(argv0).exists():
            return argv0
        argv0 = Path(argv0).name
    return shutil.which(argv0, path=path_env) or argv0


def termination_message(
    message_file: Path, policy: str, exit_code: int, log_file: Path | None
) -> str:
    """What the kubelet puts in state.terminated.message (file first, log tail on error)."""
    message = ""
    with contextlib.suppress(OSError):
        message = message_file.read_bytes()[:TERMINATION_MESSAGE_LIMIT].decode(errors="replace")
    if not message.strip() and policy == "FallbackToLogsOnError" and exit_code != 0 and log_file:
        with contextlib.suppress(OSError):
            lines = log_file.read_bytes().decode(errors="replace").splitlines()
            message = "\n".join(lines[-FALLBACK_LOG_LINES:])[-FALLBACK_LOG_LIMIT:]
    return message


# ---- running one container --------------------------------------------------------------


@dataclass
class Container:
    """One container of a pod, run as a process group; remembers what the status needs."""

    spec: dict[str, Any]
    log_file: Path
    message_file: Path
    init: bool = False
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    restart_count: int = 0
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    finished_at: str = ""
    last_state: dict[str, Any] = field(default_factory=dict)
    next_start: float = 0.0

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def state(self) -> dict[str, Any]:
        if self.running():
            return {"running": {"startedAt": self.started_at}}
        if self.exit_code is not None:
            terminated: dict[str, Any] = {
                "exitCode": self.exit_code,
                "reason": self.reason,
                "startedAt": self.started_at or None,
                "finishedAt": self.finished_at,
                "containerID": self.container_id(),
            }
            if self.message:
                terminated["message"] = self.message
            return {"terminated": terminated}
        return {"waiting": {"reason": self.reason or "ContainerCreating"}}

    def container_id(self) -> str:
        return f"mlms-exec://{self.proc.pid}" if self.proc else ""

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "containerID": self.container_id(),
            "ready": self.running() and not self.init,
            "started": self.running(),
            "restartCount": self.restart_count,
            "state": self.state(),
            "lastState": self.last_state,
        }

    def kill(self, sig: int) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        for send in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                send(self.proc.pid, sig)


def _die_with_parent() -> None:
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


# ---- one pod ------------------------------------------------------------------------------


class PodRunner(threading.Thread):
    """Drives one pod from Pending to a terminal phase (or deletion) on an exec node."""

    def __init__(self, kubelet: ExecKubelet, pod: Pod) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.kubelet = kubelet
        self.pod = pod
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.dir = kubelet.pods_dir / f"{self.ns}_{self.pod_name}_{self.uid[:8]}"
        self.stop_event = threading.Event()
        self.grace = 0.0
        self.deleting = False
        self.gone = False
        self.start_time = ""
        self.started_mono = 0.0
        self.volumes: dict[str, Path] = {}
        self.init_containers: list[Container] = []
        self.containers: list[Container] = []
        self.conditions: dict[str, dict[str, Any]] = {}
        self.phase = "Pending"
        self.pod_reason = ""
        self.pod_message = ""

    # -- control from the watch loop --
    def request_delete(self, grace: float, gone: bool = False) -> None:
        self.grace = max(0.0, min(grace, MAX_GRACE_SECONDS))
        self.deleting = True
        self.gone = self.gone or gone
        self.stop_event.set()

    # -- thread body --
    def run(self) -> None:
        try:
            self._run()
        except PodGoneError:
            self.gone = True
        except Exception as exc:  # report, never kill the exec kubelet
            _log(f"{self.name}: internal error: {exc!r}")
            with contextlib.suppress(Exception):
                self._set_terminal("Failed", "ExecletError", str(exc))
        finally:
            self._kill_all(0 if self.gone else self.grace)
            if self.deleting and not self.gone:
                with contextlib.suppress(Exception):
                    self._finish_after_kill()
            self.kubelet.runner_done(self.uid)

    def _run(self) -> None:
        spec = self.pod["spec"]
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "tmp").mkdir(exist_ok=True)
        self.start_time = now()
        self.started_mono = time.monotonic()
        self.init_containers = [
            self._container(c, init=True) for c in spec.get("initContainers") or []
        ]
        self.containers = [self._container(c) for c in spec.get("containers") or []]
        self._condition("PodScheduled", "True")
        self._condition("PodReadyToStartContainers", "False")
        self._condition("Initialized", "False" if self.init_containers else "True")
        self._condition("ContainersReady", "False")
        self._condition("Ready", "False")
        self._patch_status()
        while True:
            try:
                self.volumes = self._materialize_volumes()
                break
            except MissingReferenceError as exc:
                self._event("FailedMount", str(exc), "Warning")
                if self.stop_event.wait(2):
                    return
        self._condition("PodReadyToStartContainers", "True")
        restart = spec.get("restartPolicy", "Always")
        for container in self.init_containers:
            while True:
                code = self._run_to_completion(container)
                if code is None:
                    return
                if code == 0:
                    break
                if restart == "Never":
                    self._set_terminal("Failed", "", "")
                    return
                if not self._backoff(container):
                    return
        self._condition("Initialized", "True")
        for container in self.containers:
            self._start(container)
        self.phase = "Running"
        self._update_readiness()
        self._patch_status()
        self._supervise(restart)

    def _supervise(self, restart: str) -> None:
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        while True:
            if self.stop_event.wait(0.2):
                return
            if deadline is not None and time.monotonic() - self.started_mono > float(deadline):
                self._kill_all(0)
                self._set_terminal(
                    "Failed",
                    "DeadlineExceeded",
                    "Pod was active on the node longer than the specified deadline",
                )
                return
            changed = False
            for c in self.containers:
                if c.proc is not None and c.exit_code is None and not c.running():
                    self._record_exit(c)
                    changed = True
                if (
                    c.exit_code is not None
                    and c.next_start
                    and time.monotonic() >= c.next_start
                    and not self.stop_event.is_set()
                ):
                    c.last_state = c.state()
                    c.restart_count += 1
                    c.next_start = 0.0
                    self._start(c)
                    changed = True
                # Exited, or could not start (also just now): restart with back-off as the
                # policy says. A kubelet retries a container that cannot start too; failing
                # the pod would make a Deployment replace it in a tight loop.
                should_restart = restart == "Always" or (
                    restart == "OnFailure" and c.exit_code != 0
                )
                if c.exit_code is not None and not c.next_start and should_restart:
                    c.next_start = time.monotonic() + min(30.0, 2.0**c.restart_count)
                    c.reason = "CrashLoopBackOff"
                    changed = True
            if all(c.exit_code is not None and not c.next_start for c in self.containers):
                failed = any(c.exit_code != 0 for c in self.containers)
                self._set_terminal("Failed" if failed else "Succeeded", "", "")
                return
            if changed:
                self._update_readiness()
                self._patch_status()

    # -- containers --
    def _container(self, spec: dict[str, Any], init: bool = False) -> Container:
        name = spec["name"]
        return Container(
            spec=spec,
            log_file=self.dir / f"{name}.log",
            message_file=self.dir / f"{name}.termination-log",
            init=init,
        )

    def _mounts(self, container: Container) -> dict[str, str]:
        """{mountPath: hostPath} for this container, including its termination-log file."""
        mounts: dict[str, str] = {}
        for vm in container.spec.get("volumeMounts") or []:
            host = self.volumes.get(vm["name"])
            if host is None:
                continue
            if vm.get("subPath"):
                host = host / vm["subPath"]
                if not host.exists():
                    host.mkdir(parents=True, exist_ok=True)
            mounts[vm["mountPath"]] = str(host)
        term = container.spec.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
        mounts[term] = str(container.message_file)
        return mounts

    def _env(self, container: Container, mounts: dict[str, str]) -> dict[str, str]:
        """Host basics < service env < envFrom < env, then path rewriting and the path map.

        Only what the pod spec declares names container paths and is mapped to host folders;
        what this harness sets (the venv on PATH, TMPDIR) is a host path already and stays one,
        even under a mounted prefix (a checkout in /tmp beside an emptyDir mounted at /tmp).
        """
        kubelet = self.kubelet
        harness = {k: os.environ[k] for k in HOST_ENV_KEEP if k in os.environ}
        harness.update(
            PATH=os.pathsep.join([str(kubelet.venv_bin), os.environ.get("PATH", "")]),
            HOSTNAME=self.pod_name,
            TMPDIR=str(self.dir / "tmp"),
            KUBERNETES_SERVICE_HOST="127.0.0.1",
            KUBERNETES_SERVICE_PORT=str(kubelet.api_port),
            KUBERNETES_SERVICE_PORT_HTTPS=str(kubelet.api_port),
            CUDA_VISIBLE_DEVICES="",
        )
        gpus = _gpu_request(container.spec)
        if gpus:
            harness["MLMS_SIMULATED_GPUS"] = str(gpus)
        declared: dict[str, str] = {}
        for source in container.spec.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                ref = source["configMapRef"]
                data = self._config_map(ref["name"], ref.get("optional", False))
            else:
                ref = source["secretRef"]
                data = self._secret(ref["name"], ref.get("optional", False))
            declared.update({prefix + k: v.decode(errors="replace") for k, v in data.items()})
        for var in container.spec.get("env") or []:
            value = self._env_value(var, {**harness, **declared}, container)
            if value is not None:
                declared[var["name"]] = value
        rewrite = path_rewriter(mounts)
        env = {**harness, **{k: rewrite(v) for k, v in declared.items()}}
        env[PATH_MAP_ENV] = json.dumps(mounts, sort_keys=True)
        return env

    def _env_value(self, var: dict[str, Any], env: dict[str, str], c: Container) -> str | None:
        if "valueFrom" not in var:
            return expand(str(var.get("value", "")), env)
        src = var["valueFrom"]
        if "fieldRef" in src:
            return field_ref(self.pod, src["fieldRef"]["fieldPath"])
        if "secretKeyRef" in src or "configMapKeyRef" in src:
            is_secret = "secretKeyRef" in src
            ref = src["secretKeyRef" if is_secret else "configMapKeyRef"]
            optional = bool(ref.get("optional", False))
            data = (self._secret if is_secret else self._config_map)(ref["name"], optional)
            if ref["key"] not in data:
                if optional:
                    return None
                raise MissingReferenceError(f"key {ref['key']!r} not in {ref['name']}")
            return data[ref["key"]].decode(errors="replace")
        if "resourceFieldRef" in src:
            res = src["resourceFieldRef"]["resource"]
            kind, _, name = res.partition(".")
            resources = c.spec.get("resources") or {}
            return str((resources.get(kind) or {}).get(name, "0"))
        return None

    def _start(self, c: Container) -> None:
        mounts = self._mounts(c)
        try:
            env = self._env(c, mounts)
        except MissingReferenceError as exc:
            self._fail_start(c, "CreateContainerConfigError", str(exc))
            return
        rewrite = path_rewriter(mounts)
        argv = [
            rewrite(expand(str(a), env))
            for a in (c.spec.get("command") or []) + (c.spec.get("args") or [])
        ]
        if not c.spec.get("command"):
            self._fail_start(
                c,
                "StartError",
                "exec nodes cannot resolve image entrypoints: set the container's command",
            )
            return
        argv[0] = resolve_command(argv[0], env["PATH"])
        workdir = c.spec.get("workingDir")
        cwd = Path(rewrite(workdir)) if workdir else self.dir / "work"
        cwd.mkdir(parents=True, exist_ok=True)
        c.message_file.write_bytes(b"")
        if os.environ.get(MARKER_ENV):  # so the cluster's /proc sweep finds pod processes too
            env[MARKER_ENV] = os.environ[MARKER_ENV]
        c.exit_code, c.reason, c.message, c.finished_at = None, "", "", ""
        with c.log_file.open("ab") as log:
            try:
                c.proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except OSError as exc:
                self._fail_start(c, "StartError", f"{argv[0]}: {exc.strerror or exc}")
                return
        c.started_at = now()
        self._event("Started", f"Started container {c.name} (pid {c.proc.pid})")
        _log(f"{self.ns}/{self.pod_name}: started {c.name} pid={c.proc.pid}: {argv!r}")

    def _fail_start(self, c: Container, reason: str, message: str) -> None:
        c.proc = None
        c.exit_code, c.reason, c.message, c.finished_at = 128, reason, message, now()
        c.started_at = c.started_at or c.finished_at
        self._event("Failed", f"{c.name}: {message}", "Warning")

    def _record_exit(self, c: Container) -> None:
        assert c.proc is not None
        rc = c.proc.wait()
        code = 128 - rc if rc < 0 else rc
        c.exit_code = code
        c.reason = "Completed" if code == 0 else "Error"
        c.finished_at = now()
        policy = c.spec.get("terminationMessagePolicy", "File")
        c.message = termination_message(c.message_file, policy, code, c.log_file)
        _log(f"{self.ns}/{self.pod_name}: {c.name} exited {code}")

    def _run_to_completion(self, c: Container) -> int | None:
        """Run an init container; None when the pod is being deleted meanwhile."""
        self._start(c)
        self._patch_status()
        while c.running():
            if self.stop_event.wait(0.2):
                return None
        if c.proc is not None:
            self._record_exit(c)
        self._patch_status()
        return c.exit_code

    def _backoff(self, c: Container) -> bool:
        c.last_state = c.state()
        c.restart_count += 1
        c.reason = "CrashLoopBackOff"
        return not self.stop_event.wait(min(30.0, 2.0**c.restart_count))

    def _kill_all(self, grace: float) -> None:
        live = [c for c in self.init_containers + self.containers if c.running()]
        if not live:
            return
        for c in live:
            c.kill(signal.SIGTERM if grace > 0 else signal.SIGKILL)
        end = time.monotonic() + grace
        while time.monotonic() < end and any(c.running() for c in live):
            time.sleep(0.1)
        for c in live:
            c.kill(signal.SIGKILL)
        for c in live:
            assert c.proc is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(timeout=5)
            if c.exit_code is None:
                self._record_exit(c)

    def _finish_after_kill(self) -> None:
        """Pod deletion: report the killed containers, then let the API server remove it."""
        if self.phase not in ("Succeeded", "Failed"):
            all_ok = all(c.exit_code == 0 for c in self.containers)
            self._set_terminal("Succeeded" if all_ok and self.containers else "Failed", "", "")
        self.kubelet.force_delete(self.ns, self.pod_name, self.uid)

    # -- status --
    def _condition(self, kind: str, status: str, reason: str = "") -> None:
        old = self.conditions.get(kind)
        if old and old["status"] == status:
            return
        cond = {"type": kind, "status": status, "lastTransitionTime": now(), "lastProbeTime": None}
        if reason:
            cond["reason"] = reason
        self.conditions[kind] = cond

    def _update_readiness(self) -> None:
        ready = bool(self.containers) and all(c.running() for c in self.containers)
        self._condition("ContainersReady", "True" if ready else "False")
        self._condition("Ready", "True" if ready else "False")

    def _set_terminal(self, phase: str, reason: str, message: str) -> None:
        self.phase = phase
        self.pod_reason, self.pod_message = reason, message
        self._condition("ContainersReady", "False", "PodCompleted")
        self._condition("Ready", "False", "PodCompleted")
        self._condition("PodReadyToStartContainers", "False")
        self._patch_status()

    def _patch_status(self) -> None:
        status: dict[str, Any] = {
            "phase": self.phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "conditions": list(self.conditions.values()),
            "containerStatuses": [c.status() for c in self.containers],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if self.pod_reason:
            status["reason"] = self.pod_reason
            status["message"] = self.pod_message
        try:
            self.kubelet.api.patch(pod_path(self.ns, self.pod_name, "status"), {"status": status})
        except KubeError as exc:
            if exc.status == 404:
                raise PodGoneError from exc
            raise

    def _event(self, reason: str, message: str, kind: str = "Normal") -> None:
        self.kubelet.event(self.pod, reason, message, kind)

    # -- volumes --
    def _materialize_volumes(self) -> dict[str, Path]:
        out: dict[str, Path] = {}
        root = self.dir / "volumes"
        for vol in self.pod["spec"].get("volumes") or []:
            name = vol["name"]
            target = root / name
            if "hostPath" in vol:
                out[name] = _host_folder(vol["hostPath"])
                continue
            if "persistentVolumeClaim" in vol:
                out[name] = self._claim_folder(vol["persistentVolumeClaim"]["claimName"])
                continue
            target.mkdir(parents=True, exist_ok=True)
            if "configMap" in vol:
                src = vol["configMap"]
                data = self._config_map(src["name"], src.get("optional", False))
                _write_items(target, data, src.get("items"))
            elif "secret" in vol:
                src = vol["secret"]
                data = self._secret(src["secretName"], src.get("optional", False))
                _write_items(target, data, src.get("items"))
            elif "downwardAPI" in vol:
                self._write_downward(target, vol["downwardAPI"].get("items") or [])
            elif "projected" in vol:
                for source in vol["projected"].get("sources") or []:
                    self._write_projection(target, source)
            out[name] = target  # emptyDir and anything else: a fresh directory
        return out

    def _claim_folder(self, claim: str) -> Path:
        """The folder behind a PersistentVolumeClaim, found as a kubelet finds it: the claim,
        the PersistentVolume it is bound to, that volume's hostPath (or local path).

        Processes run as the host user, so a `readOnly` mount cannot be enforced here.
        """
        api = self.kubelet.api
        try:
            pvc = api.get(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/{claim}")
        except KubeError as exc:
            if exc.status == 404:
                raise MissingReferenceError(f'persistentvolumeclaim "{claim}" not found') from exc
            raise
        volume = (pvc.get("spec") or {}).get("volumeName")
        if not volume or (pvc.get("status") or {}).get("phase") != "Bound":
            raise MissingReferenceError(f'persistentvolumeclaim "{claim}" is not bound')
        try:
            pv = api.get(f"/api/v1/persistentvolumes/{volume}")
        except KubeError as exc:
            if exc.status == 404:
                raise MissingReferenceError(
                    f'persistentvolume "{volume}" of claim "{claim}" not found'
                ) from exc
            raise
        spec = pv.get("spec") or {}
        if spec.get("hostPath"):
            host = _host_folder(spec["hostPath"])
        elif spec.get("local"):
            host = Path(spec["local"]["path"])
        else:
            raise MissingReferenceError(
                f'persistentvolume "{volume}" of claim "{claim}" is neither hostPath nor local: '
                "exec nodes mount only those"
            )
        if not host.is_dir():
            raise MissingReferenceError(
                f'persistentvolume "{volume}" of claim "{claim}": {host} does not exist'
            )
        return host

    def _write_projection(self, target: Path, source: dict[str, Any]) -> None:
        if "configMap" in source:
            src = source["configMap"]
            data = self._config_map(src["name"], src.get("optional", False))
            _write_items(target, data, src.get("items"))
        elif "secret" in source:
            src = source["secret"]
            data = self._secret(src["name"], src.get("optional", False))
            _write_items(target, data, src.get("items"))
        elif "downwardAPI" in source:
            self._write_downward(target, source["downwardAPI"].get("items") or [])
        elif "serviceAccountToken" in source:
            src = source["serviceAccountToken"]
            token = self._service_account_token(
                src.get("audience"), int(src.get("expirationSeconds", 3607))
            )
            _write_file(target / src["path"], token.encode())

    def _write_downward(self, target: Path, items: list[dict[str, Any]]) -> None:
        for item in items:
            if "fieldRef" in item:
                value = field_ref(self.pod, item["fieldRef"]["fieldPath"])
                _write_file(target / item["path"], value.encode())

    def _service_account_token(self, audience: str | None, seconds: int) -> str:
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": max(600, seconds),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.pod_name,
                    "uid": self.uid,
                },
            },
        }
        path = f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token"
        try:
            return str(self.kubelet.api.create(path, body)["status"]["token"])
        except KubeError as exc:
            raise MissingReferenceError(f"service account token for {sa}: {exc}") from exc

    def _config_map(self, name: str, optional: bool) -> dict[str, bytes]:
        try:
            cm = self.kubelet.api.get(f"/api/v1/namespaces/{self.ns}/configmaps/{name}")
        except KubeError as exc:
            if exc.status == 404 and optional:
                return {}
            if exc.status == 404:
                raise MissingReferenceError(f'configmap "{name}" not found') from exc
            raise
        data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
        return data

    def _secret(self, name: str, optional: bool) -> dict[str, bytes]:
        try:
            secret = self.kubelet.api.get(f"/api/v1/namespaces/{self.ns}/secrets/{name}")
        except KubeError as exc:
            if exc.status == 404 and optional:
                return {}
            if exc.status == 404:
                raise MissingReferenceError(f'secret "{name}" not found') from exc
            raise
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _host_folder(source: dict[str, Any]) -> Path:
    """A hostPath (or local) volume source's folder, created when its type says so."""
    host = Path(source["path"])
    if source.get("type") in ("DirectoryOrCreate", None, ""):
        with contextlib.suppress(OSError):
            host.mkdir(parents=True, exist_ok=True)
    return host


def _gpu_request(spec: dict[str, Any]) -> int:
    resources = spec.get("resources") or {}
    for kind in ("limits", "requests"):
        value = (resources.get(kind) or {}).get(nodes.GPU_RESOURCE)
        if value is not None:
            return int(value)
    return 0


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _write_items(target: Path, data: dict[str, bytes], items: list[dict[str, Any]] | None) -> None:
    if items:
        for item in items:
            if item["key"] in data:
                _write_file(target / item["path"], data[item["key"]])
    else:
        for key, value in data.items():
            _write_file(target / key, value)


# ---- the node agent -----------------------------------------------------------------------


class ExecKubelet:
    """Heartbeats the exec nodes and runs a PodRunner per pod bound to one of them."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.api = KubeREST.from_kubeconfig(run_dir / "kubeconfig")
        self.api_port = int(self.api.server.rsplit(":", 1)[1])
        self.pods_dir = run_dir / "pods"
        self.node_names = {n.name for n in nodes.exec_nodes()}
        self.venv_bin = Path(sys.prefix) / "bin"
        self.runners: dict[str, PodRunner] = {}
        self.finished: set[str] = set()
        """UIDs already run to the end: late watch events about them must not restart them."""
        self.lock = threading.RLock()
        self.stopping = threading.Event()

    # -- nodes --
    def heartbeat(self) -> None:
        """Renew each exec node's Lease and Ready condition, as a kubelet does every 10 s."""
        for name in sorted(self.node_names):
            try:
                self._renew_lease(name)
                self._node_status(name)
            except Exception as exc:  # keep beating; log and retry next tick
                _log(f"heartbeat {name}: {exc}")

    def _renew_lease(self, name: str) -> None:
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": now_micro(),
        }
        try:
            self.api.patch(f"{path}/{name}", {"spec": spec}, content_type=MERGE)
        except KubeError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "ownerReferences": [self._node_owner(name)],
                },
                "spec": spec,
            }
            self.api.create(path, body)

    def _node_owner(self, name: str) -> dict[str, Any]:
        node = self.api.get(f"/api/v1/nodes/{name}")
        return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}

    def _node_status(self, name: str) -> None:
        ts = now()
        ok = {"lastHeartbeatTime": ts, "lastTransitionTime": ts}
        conditions = [
            {"type": t, "status": "False", "reason": f"Kubelet{r}", "message": m, **ok}
            for t, r, m in (
                ("MemoryPressure", "HasSufficientMemory", "kubelet has sufficient memory"),
                ("DiskPressure", "HasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "HasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "mlmodelscope exec kubelet is posting ready status",
                **ok,
            }
        )
        node = self.api.get(f"/api/v1/nodes/{name}")
        for cond in conditions:  # keep lastTransitionTime stable when status is unchanged
            for old in node.get("status", {}).get("conditions") or []:
                if old["type"] == cond["type"] and old["status"] == cond["status"]:
                    cond["lastTransitionTime"] = old.get("lastTransitionTime", ts)
        status = {
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "phase": "Running",
        }
        self.api.patch(f"/api/v1/nodes/{name}/status", {"status": status})

    def _heartbeat_loop(self) -> None:
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            self.heartbeat()

    # -- pods --
    def handle(self, kind: str, pod: Pod, initial: bool = False) -> None:
        """React to one watch event for any pod; only pods on our nodes matter."""
        if pod.get("spec", {}).get("nodeName") not in self.node_names:
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        with self.lock:
            runner = self.runners.get(uid)
            finished = uid in self.finished
        if kind == "DELETED":
            if runner is not None:
                runner.request_delete(0, gone=True)
            return
        if meta.get("deletionTimestamp"):
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            if runner is not None:
                runner.request_delete(grace)
            else:
                self.force_delete(meta["namespace"], meta["name"], uid)
            return
        phase = pod.get("status", {}).get("phase", "Pending")
        if runner is not None or finished or self.stopping.is_set():
            return
        if phase in ("Succeeded", "Failed"):
            return
        if phase == "Running":
            if initial:  # running, yet not ours: this exec kubelet restarted and lost it
                self._mark_lost(pod)
            return
        runner = PodRunner(self, pod)
        with self.lock:
            self.runners[uid] = runner
        runner.start()

    def runner_done(self, uid: str) -> None:
        with self.lock:
            self.runners.pop(uid, None)
            self.finished.add(uid)

    def _mark_lost(self, pod: Pod) -> None:
        meta = pod["metadata"]
        status = {"phase": "Failed", "reason": "NodeLost", "message": "exec kubelet restarted"}
        with contextlib.suppress(KubeError):
            self.api.patch(pod_path(meta["namespace"], meta["name"], "status"), {"status": status})

    def force_delete(self, ns: str, name: str, uid: str) -> None:
        """The kubelet's last word on a deleted pod: remove it with grace 0 (same UID only)."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self.api.delete(pod_path(ns, name), body)
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise

    def event(self, pod: Pod, reason: str, message: str, kind: str = "Normal") -> None:
        """A core/v1 Event about the pod, so `kubectl describe` tells what happened."""
        meta = pod["metadata"]
        ts = now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "mlms-exec-kubelet", "host": pod["spec"].get("nodeName", "")},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
            "reportingComponent": "mlms-exec-kubelet",
        }
        with contextlib.suppress(Exception):
            self.api.create(f"/api/v1/namespaces/{meta['namespace']}/events", body)

    # -- main loop --
    def run(self) -> None:
        """Watch pods until SIGTERM/SIGINT; then kill every pod process and exit."""

        def on_signal(signum: int, _frame: object) -> None:
            self.stopping.set()
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        _log(f"exec kubelet for nodes {sorted(self.node_names)}; PATH starts {self.venv_bin}")
        self.heartbeat()
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        try:
            self._watch_forever()
        finally:
            self.shutdown()

    def _watch_forever(self) -> None:
        while not self.stopping.is_set():
            try:
                listing = self.api.get("/api/v1/pods")
                for pod in listing["items"]:
                    self.handle("ADDED", pod, initial=True)
                rv = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    for kind, obj in self.api.watch("/api/v1/pods", rv, timeout_seconds=60):
                        if kind == "ERROR":
                            raise KubeError(int(obj.get("code", 500)), "WATCH", "pods", str(obj))
                        rv = obj["metadata"]["resourceVersion"]
                        if kind != "BOOKMARK":
                            self.handle(kind, obj)
            except KubeError as exc:
                if exc.status != 410:
                    _log(f"watch: {exc}")
                    time.sleep(1)
            except Exception as exc:  # API restarts, timeouts: relist
                _log(f"watch: {exc!r}")
                time.sleep(1)

    def shutdown(self) -> None:
        self.stopping.set()
        with self.lock:
            runners = list(self.runners.values())
        for runner in runners:
            runner.gone = True
            for c in runner.init_containers + runner.containers:
                c.kill(signal.SIGKILL)
        for runner in runners:
            runner.join(timeout=5)


def main(run_dir: Path) -> None:
    """Entry point of `python -m mlmodelscope.devcluster execlet RUN_DIR`."""
    ExecKubelet(run_dir).run()
