"""`mlms run --runtime docker`: one evaluation inside its framework's agent image.

The container is the one a cluster Job runs, as far as one machine can make it: the image's
own `mlms run`, user 65532, a read-only root filesystem with `/tmp` a tmpfs and the model cache
the image's volume, every capability dropped, no network unless a URI of the spec needs it,
and the spec's memory and CPU limits. Local files the spec names (the model, an npz dataset, an
imagefolder, a labels file) are mounted read-only under ``/mlms/`` and the spec is rewritten to
point there; the rewritten spec is mounted read-only, the result document is written to a
mounted folder and copied to the caller's output folder. ``MLMS_IMAGE`` (the image run) and
``MLMS_NODE_NAME`` (this host) make the result's stack record where it ran.

Talks to the engine through the Docker SDK for Python (``pip install 'mlmodelscope[docker]'``);
``$DOCKER_HOST`` selects the engine as for the docker CLI.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

import yaml

from mlmodelscope.agent.sources import local_path, scheme_of
from mlmodelscope.spec.document import ModelEvaluation
from mlmodelscope.spec.evaluation import DATASET_FILE_FIELDS

USER: Final = "65532:65532"
"""The images' non-root user (USER in images/*.Dockerfile), as the operator's Jobs run it."""
MOUNT_ROOT: Final = PurePosixPath("/mlms")
SPEC_PATH: Final = MOUNT_ROOT / "spec" / "spec.yaml"
OUT_DIR: Final = MOUNT_ROOT / "out"
NETWORK_SCHEMES: Final = ("http", "https", "s3")
PASSED_ENV_PREFIXES: Final = ("AWS_", "MLMS_FETCH_")
"""Host variables passed into a container that fetches from the network (s3:// credentials,
the fetch policy)."""
NO_ENGINE_HINT: Final = "start Docker (or set DOCKER_HOST) or use --runtime local"

Log = Callable[[str], None]


class ContainerRuntimeError(RuntimeError):
    """The container could not run (no engine, no image, a path it cannot mount)."""


@dataclass
class Plan:
    """What one container needs: the rewritten document, the read-only mounts
    (host path -> container path) and whether it needs a network."""

    document: dict[str, Any]
    mounts: dict[Path, PurePosixPath] = field(default_factory=dict)
    network: bool = False
    memory_bytes: int | None = None
    nano_cpus: int | None = None
    gpus: int = 0


@dataclass(frozen=True)
class ContainerResult:
    """How the container ended, and the result document it wrote (None if it wrote none)."""

    document: dict[str, Any] | None
    exit_code: int
    oom_killed: bool
    image: str
    logs_tail: str

    @property
    def succeeded(self) -> bool:
        return (
            self.exit_code == 0
            and self.document is not None
            and self.document.get("status") == "Succeeded"
        )

    def error(self) -> str:
        if self.oom_killed:
            return f"the container was OOMKilled (exit {self.exit_code}) in {self.image}"
        if self.document is not None and self.document.get("error"):
            return str(self.document["error"])
        tail = self.logs_tail.strip().splitlines()[-5:]
        return f"the container exited {self.exit_code} in {self.image}: " + " | ".join(tail)


_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
}  # fmt: skip


def quantity(value: int | str) -> float:
    """A Kubernetes quantity ('4Gi', '500m', '2') as a number."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ContainerRuntimeError(f"cannot read the quantity {value!r}")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def plan(evaluation: ModelEvaluation, base_dir: Path | None) -> Plan:
    """The container for ``evaluation``: its local files become read-only mounts, its spec
    points at them, and its limits become the container's."""
    document = evaluation.model_dump(by_alias=True, mode="json", exclude_none=True)
    document.pop("status", None)
    spec = document["spec"]
    result = Plan(document)
    used: set[str] = set()

    def localize(uri: str, where: str, folder: str) -> str:
        scheme = scheme_of(uri)
        if scheme in NETWORK_SCHEMES:
            result.network = True
            return uri
        if scheme == "pvc":
            raise ContainerRuntimeError(
                f"{where}: {uri!r} is a PersistentVolumeClaim, which only a cluster mounts; "
                "give a local path with --runtime docker"
            )
        host = local_path(uri, base_dir=base_dir, field=where).resolve()
        if not host.exists():
            raise ContainerRuntimeError(f"{where}: {host} not found")
        name = host.name
        while f"{folder}/{name}" in used:
            name = f"_{name}"
        used.add(f"{folder}/{name}")
        target = MOUNT_ROOT / folder / name
        result.mounts[host] = target
        return str(target)

    spec["model"]["uri"] = localize(spec["model"]["uri"], "spec.model.uri", "model")
    dataset = spec["dataset"]
    for name in DATASET_FILE_FIELDS:
        if dataset.get(name):
            dataset[name] = localize(dataset[name], f"spec.dataset.{name}", "data")
    for i, step in enumerate(spec.get("postprocessing", [])):
        labels = step.get("labels") or {}
        if labels.get("uri"):
            where = f"spec.postprocessing[{i}].labels.uri"
            labels["uri"] = localize(labels["uri"], where, "labels")
    hardware = evaluation.spec.hardware
    limits = hardware.resources.limits
    if limits.memory is not None:
        result.memory_bytes = int(quantity(limits.memory))
    if limits.cpu is not None:
        result.nano_cpus = int(quantity(limits.cpu) * 1e9)
    result.gpus = hardware.gpu_count
    return result


def connect() -> Any:
    """A Docker SDK client for ``$DOCKER_HOST`` (or the default socket) that answers."""
    try:
        import docker
    except ModuleNotFoundError:
        raise ContainerRuntimeError(
            "--runtime docker needs the Docker SDK: pip install 'mlmodelscope[docker]'"
        ) from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        raise ContainerRuntimeError(
            f"no Docker engine answers at {where} ({type(exc).__name__}): {NO_ENGINE_HINT}"
        ) from None
    return client


def _ensure_image(client: Any, image: str, log: Log) -> None:
    import docker.errors

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    log(f"pulling {image}")
    try:
        client.images.pull(image)
    except docker.errors.APIError as exc:
        raise ContainerRuntimeError(
            f"image {image} is not on this engine and cannot be pulled ({exc.explanation}); "
            "build it with `python -m mlmodelscope.devtools.images build` or pass --image"
        ) from None


def _network_mode(client: Any, needed: bool, log: Log) -> str:
    if not needed:
        return "none"
    if client.networks.list(names=["bridge"]):
        return "bridge"
    log("this engine has no bridge network (dockerd --bridge=none): using the host network")
    return "host"


@contextlib.contextmanager
def _workspace() -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="mlms-docker-"))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_in_container(
    evaluation: ModelEvaluation,
    base_dir: Path | None,
    image: str,
    *,
    raw: bool = True,
    client: Any = None,
    log: Log = print,
    price_per_node_hour: float | None = None,
) -> ContainerResult:
    """Run ``evaluation`` in ``image``; the result document comes back in the result (the
    caller writes it where it wants it). ``price_per_node_hour`` is passed on to the
    container's ``mlms run``."""
    import docker.errors
    from docker.types import DeviceRequest

    name = evaluation.metadata.name
    the_plan = plan(evaluation, base_dir)
    client = client or connect()
    _ensure_image(client, image, log)
    with _workspace() as work:
        (work / "spec").mkdir()
        (work / "spec" / "spec.yaml").write_text(yaml.safe_dump(the_plan.document))
        out = work / "out"
        out.mkdir()
        out.chmod(0o1777)  # the container's user (65532) writes the result here
        volumes = {str(work / "spec"): {"bind": str(SPEC_PATH.parent), "mode": "ro"}}
        volumes |= {str(h): {"bind": str(c), "mode": "ro"} for h, c in the_plan.mounts.items()}
        volumes[str(out)] = {"bind": str(OUT_DIR), "mode": "rw"}
        environment = {"MLMS_IMAGE": image, "MLMS_NODE_NAME": socket.gethostname()}
        if the_plan.network:
            environment |= {
                k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV_PREFIXES)
            }
        command = ["run", str(SPEC_PATH), "-o", str(OUT_DIR), "--no-store"]
        if not raw:
            command.append("--no-raw")
        if price_per_node_hour is not None:
            command += ["--price-per-node-hour", repr(price_per_node_hour)]
        options: dict[str, Any] = {
            "user": USER,
            "read_only": True,
            "network_mode": _network_mode(client, the_plan.network, log),
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "tmpfs": {"/tmp": "rw,mode=1777"},
            "volumes": volumes,
            "environment": environment,
            "labels": {"io.mlmodelscope.evaluation": name},
            "name": f"mlms-{name[:40]}-{uuid.uuid4().hex[:8]}",
        }
        if the_plan.memory_bytes is not None:
            options["mem_limit"] = the_plan.memory_bytes
            options["memswap_limit"] = the_plan.memory_bytes  # no swap, as in a pod
        if the_plan.nano_cpus is not None:
            options["nano_cpus"] = the_plan.nano_cpus
        if the_plan.gpus:
            options["device_requests"] = [
                DeviceRequest(count=the_plan.gpus, capabilities=[["gpu"]])
            ]
        try:
            container = client.containers.create(image, command, **options)
        except docker.errors.APIError as exc:
            raise ContainerRuntimeError(f"cannot create the container: {exc.explanation}") from None
        tail: list[str] = []
        try:
            container.start()
            for chunk in container.logs(stream=True, follow=True):
                for line in chunk.decode(errors="replace").splitlines():
                    tail = [*tail[-40:], line]
                    log(line)
            status = container.wait()
            container.reload()
            state = container.attrs.get("State", {})
            exit_code = int(status.get("StatusCode", state.get("ExitCode", -1)))
            oom = bool(state.get("OOMKilled"))
        finally:
            with contextlib.suppress(docker.errors.APIError):
                container.remove(v=True, force=True)  # v: the image's anonymous cache volume
        result_file = out / f"{name}.json"
        document = json.loads(result_file.read_text()) if result_file.is_file() else None
    return ContainerResult(document, exit_code, oom, image, "\n".join(tail))
