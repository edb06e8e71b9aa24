"""Build the CPU images of ``images/docker-bake.json`` on this machine, and measure them.

``python -m mlmodelscope.devtools.images build [--only NAME] [--ca-bundle PATH]`` builds the
operator, the CPU agents (onnxruntime, pytorch, tensorflow) and the chart's bundled PostgreSQL
with the Dockerfiles and build arguments of the bake file, so what runs here is what the
registry pipeline publishes. What it adds for a machine without a registry (images/README.md,
"Building without a registry"):

- **An engine.** A Docker engine that answers (``$DOCKER_HOST``, ``/var/run/docker.sock``, or
  the one this module started earlier) is used; otherwise ``dockerd --iptables=false
  --bridge=none`` is started with its own data root, exec root, pid file and socket under
  ``<cache>/docker/`` and left running for the tests that follow (``stop-engine`` stops it).
  Builds and containers use the host network or none: this engine has no bridge.
- **A base.** When the bake file's base (``python:3.11-slim-bookworm``; the PostgreSQL
  image's ``debian:bookworm-slim``) is neither present nor pullable, ``mmdebstrap`` bootstraps
  a Debian bookworm rootfs with Python 3.11 from Debian's packages into ``<cache>/images/``
  (keyed by suite and package list) and ``docker import`` makes it the base image
  ``mlmodelscope-base:bookworm-<key>``, which stands in for both. It keeps this machine's
  Debian mirror, which apt in a build (on the host network) installs from.
- **A wheelhouse.** ``pip download`` fills ``<cache>/images/wheelhouse`` once with every wheel
  the CPU images install (through the host's pip cache), and a loopback HTTP server hands it to
  the builds (``WHEELHOUSE`` build argument: ``--no-index --find-links``): a framework is
  downloaded once, not once per build.
- **A CA bundle** (``--ca-bundle``): a BuildKit secret the pip step trusts; secrets are never
  part of a layer (tests/packaging/test_images_docker.py checks the image).
- **A cache.** Every image is labelled ``io.mlmodelscope.inputs`` with a hash of what it is
  built from (Dockerfile, .dockerignore, constraints, the package files it copies, its build
  arguments and the base image's id); an image whose label matches is not rebuilt. A rebuild
  reuses BuildKit's cache up to the layer that changed: the Dockerfiles install the
  dependencies in a layer of their own, before the project, so a code change rebuilds a few MB.
  After every build, what no image holds any more goes (`prune`): the images a rebuild left
  untagged, then the build cache they alone held and the builder stages' results.

Each image's size (``docker image inspect``) is compared with its target; a size over target
fails the command unless :data:`SIZE_WAIVERS` says why the target cannot be met here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mlmodelscope.devcluster.versions import cache_base

ROOT: Final = Path(__file__).resolve().parents[3]
IMAGES: Final = ROOT / "images"
BAKE_FILE: Final = IMAGES / "docker-bake.json"
CPU_GROUP: Final = "cpu"
ALL_GROUP: Final = "default"
STAND_IN_SUFFIX: Final = "-on-bookworm"
"""Appended to the tag of an image built on the bootstrapped Debian base in place of a base
that cannot be pulled here (the GPU images' nvidia/cuda): it checks everything above the base
layer, and the tag says it is not the image the registry pipeline publishes."""
INPUTS_LABEL: Final = "io.mlmodelscope.inputs"

DEBIAN_SUITE: Final = "bookworm"
DEBIAN_PACKAGES: Final = ("python3", "python3-venv", "ca-certificates", "passwd")
"""What the bootstrapped base holds: the interpreter (3.11 in bookworm, as python:3.11-slim),
venv for the builder stage, CA certificates, and useradd/groupadd for the runtime stage."""
DPKG_OPTIONS: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
)
APT_SOURCES: Final = Path("/etc/apt/sources.list.d/debian.sources")

SIZE_TARGETS: Final = {
    "operator": 250_000_000,
    "agent-onnxruntime-cpu": 400_000_000,
    "agent-pytorch-cpu": 1_200_000_000,
    "agent-tensorflow-cpu": 1_500_000_000,
    "postgresql": 250_000_000,
}
"""Uncompressed size targets (images/README.md), decimal bytes as ``docker images`` shows."""
SIZE_WAIVERS: Final = {
    "agent-pytorch-cpu": (
        "PyPI's x86_64 torch is the CUDA build (torch plus the nvidia-* and triton wheels, "
        "about 4.5 GB installed); the CPU-only wheels live on download.pytorch.org, which this "
        "machine cannot reach (the bake file's EXTRA_INDEX_URL)"
    ),
    "agent-onnxruntime-cpu": (
        "the datasets and tasks extras alone are over the target: scikit-learn with SciPy "
        "about 200 MB, OpenCV 153 MB (decode.library: opencv), scikit-image 32 MB; pyarrow "
        "(the parquet extra) 176 MB; ONNX Runtime itself is 68 MB"
    ),
    "agent-tensorflow-cpu": (
        "tensorflow-cpu 2.21 installs 1.29 GB by itself; with the datasets and tasks extras "
        "(SciPy, scikit-learn, OpenCV, scikit-image) and the base the image is about 2.2 GB"
    ),
    "operator": (
        "the pinned dependencies install 466 MB (SciPy 143 MB for a sweep's repeat "
        "intervals, the Kubernetes client 126 MB, NumPy, a core dependency, 73 MB, "
        "SQLAlchemy 29 MB) before the base's 172 MB"
    ),
}
"""Targets that the pinned wheels (the ones reachable here) make impossible, and why: the
build records these, and fails any other image over its target. The targets were set before
any image was measured (images/README.md); revisit them with these numbers."""

Log = Callable[[str], None]


def _log(text: str) -> None:
    sys.stderr.write(f"[images] {text}\n")
    sys.stderr.flush()


class ImageBuildError(RuntimeError):
    """An image, its base or the engine could not be made; the message says what to do."""


# ------------------------------------------------------------------------------------ engine


def engine_dir() -> Path:
    """``<cache>/docker``: data root, exec root, pid file, socket and log of our dockerd."""
    return cache_base() / "docker"


def own_socket() -> Path:
    return engine_dir() / "docker.sock"


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def engine_answers(host: str, timeout: float = 3.0) -> bool:
    """Whether a Docker engine answers ``GET /_ping`` at ``host`` (``unix://`` only)."""
    if not host.startswith("unix://"):
        return False
    path = host.removeprefix("unix://")
    if not Path(path).exists():
        return False
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request("GET", "/_ping")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def find_engine() -> str | None:
    """The ``DOCKER_HOST`` of an engine that answers: ``$DOCKER_HOST``, the system socket, or
    the engine :func:`ensure_engine` started."""
    candidates = [os.environ.get("DOCKER_HOST", ""), "unix:///var/run/docker.sock"]
    candidates.append(f"unix://{own_socket()}")
    for host in candidates:
        if host and engine_answers(host):
            return host
    return None


def ensure_engine(log: Log = _log, wait_s: float = 60.0) -> str:
    """An engine's ``DOCKER_HOST``; starts our own dockerd when none answers. The engine
    stays up after this process ends (later tests use it): ``stop_engine`` stops it."""
    if host := find_engine():
        log(f"docker engine: {host} (already running)")
        return host
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise ImageBuildError(
            "no Docker engine answers and dockerd is not installed: apt-get install docker.io "
            "(hack/images.sh does), or start Docker"
        )
    state = engine_dir()
    state.mkdir(parents=True, exist_ok=True)
    sock = own_socket()
    sock.unlink(missing_ok=True)
    args = [
        dockerd,
        "--iptables=false",
        "--bridge=none",
        "--data-root",
        str(state / "data"),
        "--exec-root",
        str(state / "exec"),
        "--pidfile",
        str(state / "docker.pid"),
        "-H",
        f"unix://{sock}",
    ]
    with (state / "dockerd.log").open("ab") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    host = f"unix://{sock}"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if engine_answers(host):
            log(
                f"docker engine: started dockerd (pid {proc.pid}) with --iptables=false "
                f"--bridge=none, data root {state / 'data'}, socket {sock}, log "
                f"{state / 'dockerd.log'}; it keeps running (stop: python -m "
                f"mlmodelscope.devtools.images stop-engine); export DOCKER_HOST={host}"
            )
            return host
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    tail = (state / "dockerd.log").read_text(errors="replace")[-2000:]
    raise ImageBuildError(f"dockerd did not answer on {sock}; the end of its log:\n{tail}")


def stop_engine(log: Log = _log) -> bool:
    """Stop the dockerd :func:`ensure_engine` started (by its pid file); False if none."""
    pidfile = engine_dir() / "docker.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 15)
    for _ in range(60):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            log(f"stopped dockerd (pid {pid})")
            return True
        time.sleep(0.5)
    return False


@dataclass(frozen=True)
class Docker:
    """The docker CLI, pointed at one engine, and how it builds with BuildKit."""

    cli: str
    host: str
    buildx: bool
    """``docker buildx build --load`` (a CLI with the buildx plugin) rather than the classic
    ``DOCKER_BUILDKIT=1 docker build`` (a CLI older than 23, which has no buildx)."""

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_BUILDKIT": "1"}

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 600, capture: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.cli, *args], env=self.env, capture_output=capture, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise ImageBuildError(f"docker {' '.join(args[:3])} ...: {proc.stderr.strip()[-3000:]}")
        return proc

    def inspect(self, ref: str) -> dict[str, Any] | None:
        proc = self("image", "inspect", ref, check=False)
        if proc.returncode != 0:
            return None
        found: list[dict[str, Any]] = json.loads(proc.stdout)
        return found[0] if found else None


def docker_cli(host: str) -> Docker:
    """A docker CLI that can build with BuildKit secrets against ``host``: one with buildx,
    else one older than 23 (Debian's docker.io 20.10), whose ``docker build`` uses BuildKit."""
    env = {**os.environ, "DOCKER_HOST": host}
    seen = []
    for cli in (shutil.which("docker"), "/usr/bin/docker"):
        if not cli or not Path(cli).exists() or cli in seen:
            continue
        seen.append(cli)
        buildx = subprocess.run([cli, "buildx", "version"], env=env, capture_output=True)
        if buildx.returncode == 0:
            return Docker(cli, host, buildx=True)
        version = subprocess.run(
            [cli, "version", "--format", "{{.Client.Version}}"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        major = version.stdout.strip().split(".")[0]
        if major.isdigit() and int(major) < 23:
            return Docker(cli, host, buildx=False)
    raise ImageBuildError(
        f"no docker CLI here builds with BuildKit (tried {seen}): install the buildx plugin, "
        "or Debian's docker.io (its /usr/bin/docker)"
    )


# -------------------------------------------------------------------------------------- base


def base_key() -> str:
    data = {
        "suite": DEBIAN_SUITE,
        "variant": "minbase",
        "packages": sorted(DEBIAN_PACKAGES),
        "dpkg": list(DPKG_OPTIONS),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def bootstrap_tag() -> str:
    return f"mlmodelscope-base:{DEBIAN_SUITE}-{base_key()}"


def bootstrap_tarball(log: Log = _log) -> Path:
    """``<cache>/images/debian-<suite>-<key>.tar``, made by mmdebstrap once (about 2 min)."""
    out = cache_base() / "images" / f"debian-{DEBIAN_SUITE}-{base_key()}.tar"
    if out.is_file():
        return out
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise ImageBuildError(
            "the base image cannot be pulled and mmdebstrap is missing: apt-get install "
            "mmdebstrap (hack/images.sh does), or make the base image available"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial.tar")
    args = [mmdebstrap, "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}"]
    args += [f"--dpkgopt={option}" for option in DPKG_OPTIONS]
    args += [DEBIAN_SUITE, str(partial)]
    if APT_SOURCES.is_file():
        args.append(str(APT_SOURCES))  # this machine's mirror (and its snapshot pin)
    log(f"bootstrapping the base: {' '.join(args)}")
    start = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ImageBuildError(f"mmdebstrap failed:\n{proc.stderr[-3000:]}")
    partial.rename(out)
    log(f"base rootfs {out} ({out.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - start:.0f}s")
    return out


def ensure_base(docker: Docker, wanted: str, log: Log = _log) -> str:
    """The base image to build on: ``wanted`` when present or pullable, else the Debian base
    bootstrapped here (imported once, then found by its tag)."""
    if docker.inspect(wanted) is not None:
        return wanted
    tag = bootstrap_tag()
    if docker.inspect(tag) is not None:
        log(f"base: {wanted} is not here; using the bootstrapped {tag}")
        return tag
    try:
        pulled = docker("pull", "-q", wanted, check=False, timeout=120)
    except subprocess.TimeoutExpired:
        pulled = None
    if pulled is not None and pulled.returncode == 0:
        log(f"base: pulled {wanted}")
        return wanted
    log(f"base: {wanted} cannot be pulled here; bootstrapping {tag} from Debian packages")
    tarball = bootstrap_tarball(log)
    docker(
        "import",
        "--change", "ENV LANG=C.UTF-8",
        "--change", 'CMD ["python3"]',
        "--message", f"mmdebstrap --variant=minbase {DEBIAN_SUITE} {','.join(DEBIAN_PACKAGES)}",
        str(tarball),
        tag,
        timeout=600,
    )  # fmt: skip
    return tag


# -------------------------------------------------------------------------------- wheelhouse


def wheelhouse_dir() -> Path:
    return cache_base() / "images" / "wheelhouse"


def _all_extras(targets: Sequence[Target]) -> list[str]:
    extras: set[str] = set()
    for target in targets:
        extras.update(target.extras)
    return sorted(extras)


def ensure_wheelhouse(targets: Sequence[Target], log: Log = _log) -> Path:
    """Every wheel the targets install, downloaded once by the host's pip (its cache serves
    what CI's venv already downloaded); a stamp of the inputs skips pip when unchanged."""
    extras = _all_extras(targets)
    stamp_data = [extras, _read(ROOT / "constraints.txt"), _read(IMAGES / "constraints-images.txt")]
    stamp_data.append(_read(ROOT / "pyproject.toml"))
    want = hashlib.sha256(json.dumps(stamp_data).encode()).hexdigest()
    house = wheelhouse_dir()
    stamp = house / f".stamp-{hashlib.sha256(','.join(extras).encode()).hexdigest()[:12]}"
    if stamp.is_file() and stamp.read_text() == want:
        return house
    house.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "pip", "download", "-q", "-d", str(house)]
    args += ["-c", "constraints.txt", "-c", "images/constraints-images.txt"]
    args += [f".[{','.join(extras)}]", "setuptools", "wheel"]
    log(f"wheelhouse: pip download {','.join(extras)} into {house}")
    start = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise ImageBuildError(f"pip download failed:\n{proc.stderr[-3000:]}")
    size = sum(p.stat().st_size for p in house.iterdir() if p.is_file())
    log(f"wheelhouse: {size / 1e9:.2f} GB in {time.monotonic() - start:.0f}s")
    stamp.write_text(want)
    return house


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


WHEELHOUSE_PORT: Final = 18765
"""Fixed, so the pip step's build argument (its URL) and thus BuildKit's cache stay the same
from one run to the next; another port is taken when this one is busy."""


@contextlib.contextmanager
def serve_wheelhouse(house: Path) -> Iterator[str]:
    """A loopback HTTP server listing ``house``, for ``pip --find-links`` in a build that
    runs on the host network."""
    handler = functools.partial(_QuietHandler, directory=str(house))
    port = int(os.environ.get("MLMS_WHEELHOUSE_PORT", WHEELHOUSE_PORT))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


# ----------------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """One bake target, as this machine builds it."""

    name: str
    dockerfile: Path
    args: dict[str, str]
    tag: str

    @property
    def extras(self) -> list[str]:
        """The project's extras its pip step installs; none for an image without one (the
        bundled PostgreSQL), which takes no wheelhouse."""
        if "EXTRAS" in self.args:
            return self.args["EXTRAS"].split(",")
        if self.dockerfile.name == "operator.Dockerfile":
            return ["operator", "telemetry", "serve"]
        return []


def _expand(text: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        text = text.replace(f"${{{name}}}", value)
    return text


def bake_targets(group: str = CPU_GROUP) -> list[Target]:
    """The targets of ``group`` with the bake file's variables filled in (their defaults, or
    the environment's, as ``docker buildx bake`` does)."""
    bake = json.loads(BAKE_FILE.read_text())
    variables = {
        name: os.environ.get(name, spec.get("default", ""))
        for name, spec in bake["variable"].items()
    }
    targets = []
    for name in bake["group"][group]["targets"]:
        raw = bake["target"][name]
        args = {key: _expand(value, variables) for key, value in raw.get("args", {}).items()}
        tag = _expand(raw["tags"][0], variables)
        targets.append(Target(name, ROOT / raw["dockerfile"], args, tag))
    return targets


def _read(path: Path) -> str:
    return path.read_text()


def context_files(dockerfile: Path) -> list[Path]:
    """The files of the build context: the allow-list (``!path``) of the Dockerfile's
    .dockerignore, folders expanded, caches left out."""
    files: list[Path] = []
    for line in Path(f"{dockerfile}.dockerignore").read_text().splitlines():
        line = line.strip()
        if not line.startswith("!"):
            continue
        path = ROOT / line[1:].strip("/")
        if path.is_dir():
            files += [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            ]
        elif path.is_file():
            files.append(path)
    return files


def inputs_hash(target: Target, base_id: str) -> str:
    """What the image is built from: Dockerfile, .dockerignore, every context file, the build
    arguments and the base image's id. Equal hash, equal image (up to wheel contents, which
    the constraints pin)."""
    digest = hashlib.sha256()
    digest.update(json.dumps({"args": target.args, "base": base_id}, sort_keys=True).encode())
    for path in [target.dockerfile, Path(f"{target.dockerfile}.dockerignore")]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for path in context_files(target.dockerfile):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


# ------------------------------------------------------------------------------------- build


@dataclass
class Built:
    """One image's outcome, for the report."""

    name: str
    tag: str
    size: int
    seconds: float
    cached: bool
    target_size: int | None
    waiver: str | None = None
    base: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def over(self) -> bool:
        return self.target_size is not None and self.size > self.target_size


def build_target(
    docker: Docker,
    target: Target,
    base: str,
    *,
    wheelhouse_url: str | None,
    ca_bundle: Path | None,
    force: bool = False,
    log: Log = _log,
) -> Built:
    base_info = docker.inspect(base)
    assert base_info is not None, base
    args = {**target.args, "BASE_IMAGE": base}
    effective = Target(target.name, target.dockerfile, args, target.tag)
    want = inputs_hash(effective, base_info["Id"])
    found = docker.inspect(target.tag)
    labels = ((found or {}).get("Config") or {}).get("Labels") or {}
    start = time.monotonic()
    if found is not None and labels.get(INPUTS_LABEL) == want and not force:
        log(f"{target.name}: {target.tag} is up to date ({INPUTS_LABEL}={want})")
        cached = True
    else:
        cmd = ["buildx", "build", "--load"] if docker.buildx else ["build"]
        cmd += ["--network", "host", "--progress", "plain", "--target", "runtime"]
        cmd += ["-f", str(target.dockerfile.relative_to(ROOT)), "-t", target.tag]
        cmd += ["--label", f"{INPUTS_LABEL}={want}"]
        for key, value in args.items():
            cmd += ["--build-arg", f"{key}={value}"]
        if wheelhouse_url:
            cmd += ["--build-arg", f"WHEELHOUSE={wheelhouse_url}"]
        if ca_bundle is not None:
            cmd += ["--secret", f"id=ca,src={ca_bundle}"]
        cmd.append(".")
        log(f"{target.name}: building {target.tag} on {base}")
        logfile = cache_base() / "logs" / f"image-{target.name}.log"
        logfile.parent.mkdir(parents=True, exist_ok=True)
        with logfile.open("w") as out:
            proc = subprocess.run(
                [docker.cli, *cmd], cwd=ROOT, env=docker.env, stdout=out,
                stderr=subprocess.STDOUT, timeout=3600,
            )  # fmt: skip
        if proc.returncode != 0:
            tail = logfile.read_text(errors="replace")[-4000:]
            full = out_of_space(target.name, tail, docker_root(docker))
            raise ImageBuildError(
                full or f"{target.name}: docker build failed (log {logfile}):\n{tail}"
            )
        cached = False
    seconds = time.monotonic() - start
    info = docker.inspect(target.tag)
    assert info is not None
    built = Built(
        name=target.name,
        tag=target.tag,
        size=int(info["Size"]),
        seconds=seconds,
        cached=cached,
        target_size=SIZE_TARGETS.get(target.name),
        base=base,
    )
    if built.over:
        built.waiver = SIZE_WAIVERS.get(target.name)
    how = " (cached)" if cached else ""
    log(f"{target.name}: {built.size / 1e6:.0f} MB in {seconds:.0f}s{how}")
    return built


NO_SPACE: Final = "no space left on device"


def docker_root(docker: Docker) -> Path | None:
    """The engine's data root (``docker info``), None when the engine does not say."""
    proc = docker("info", "--format", "{{.DockerRootDir}}", check=False, timeout=60)
    root = proc.stdout.strip()
    return Path(root) if proc.returncode == 0 and root else None


def out_of_space(name: str, log_tail: str, root: Path | None) -> str | None:
    """What to say when a build failed because the disk is full (None when it did not): the
    engine's data root, what is free there (when it is on this machine), and the fix."""
    if NO_SPACE not in log_tail:
        return None
    where = f"the disk of the Docker engine's data root {root}" if root else "the engine's disk"
    if root is not None and root.exists():
        where += f" ({shutil.disk_usage(root).free / 1e9:.1f} GB free now)"
    ours = root is not None and root.is_relative_to(engine_dir())
    move = (
        "point MLMS_CACHE_DIR at a larger disk (the engine this tool starts keeps its data there)"
        if ours
        else "move the engine's data root to a larger disk (dockerd --data-root)"
    )
    return (
        f"{name}: the build ran out of disk space ({NO_SPACE}) on {where}. The CPU images "
        "take about 10 GB, and a rebuild of an image's dependencies up to its size again "
        f"(6 GB for PyTorch). Free space there (docker image prune; docker builder prune) or "
        f"{move}, then build again"
    )


def report(results: Sequence[Built]) -> str:
    """The benchmark-style table the build prints (sizes in decimal MB, as ``docker images``)."""
    lines = [
        f"{'image':<24} {'size MB':>8} {'target MB':>9} {'build s':>8}  result",
        "-" * 72,
    ]
    for r in results:
        target = f"{r.target_size / 1e6:.0f}" if r.target_size else "-"
        state = "cached" if r.cached else "built"
        verdict = "ok" if not r.over else ("over target (waived)" if r.waiver else "OVER TARGET")
        lines.append(
            f"{r.name:<24} {r.size / 1e6:>8.0f} {target:>9} {r.seconds:>8.1f}  {state}, {verdict}"
        )
    for r in results:
        if r.over and r.waiver:
            lines.append(f"  {r.name}: {r.waiver}")
    return "\n".join(lines)


def build(
    only: Sequence[str] = (),
    *,
    ca_bundle: Path | None = None,
    wheelhouse: bool = True,
    force: bool = False,
    keep_build_cache: bool = False,
    log: Log = _log,
) -> list[Built]:
    """Build (or find up to date) the CPU images, or the bake targets ``only`` names (a GPU
    image too: on a stand-in base where its own cannot be pulled); what :func:`report` prints."""
    targets = bake_targets()
    if only:
        every = bake_targets(ALL_GROUP)
        unknown = sorted(set(only) - {t.name for t in every})
        if unknown:
            names = ", ".join(t.name for t in every)
            raise ImageBuildError(f"unknown image {unknown}; the bake file's images are {names}")
        targets = [t for t in every if t.name in only]
    if ca_bundle is not None and not ca_bundle.is_file():
        raise ImageBuildError(f"--ca-bundle {ca_bundle}: no such file")
    docker = docker_cli(ensure_engine(log))
    bases = {t.args["BASE_IMAGE"] for t in targets}
    base_for = {wanted: ensure_base(docker, wanted, log) for wanted in sorted(bases)}
    results = []
    house = ensure_wheelhouse(targets, log) if wheelhouse and _all_extras(targets) else None
    try:
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(serve_wheelhouse(house)) if house is not None else None
            for target in targets:
                base = base_for[target.args["BASE_IMAGE"]]
                if base != target.args["BASE_IMAGE"] and target.name not in SIZE_TARGETS:
                    target = dataclasses.replace(target, tag=target.tag + STAND_IN_SUFFIX)
                results.append(
                    build_target(
                        docker,
                        target,
                        base,
                        wheelhouse_url=url if target.extras else None,
                        ca_bundle=ca_bundle if target.extras else None,
                        force=force,
                        log=log,
                    )
                )
    finally:
        if not keep_build_cache:
            prune(docker, log)
    return results


def prune(docker: Docker, log: Log = _log) -> None:
    """Drop the images a rebuild left untagged, then the build cache no image shares: a
    replaced dependency layer (gigabytes), the builder stages' small results, and what a
    failed or killed build left. The cache records of the layers the tagged images hold cost
    no disk of their own and stay, so the next rebuild starts from them (``builder prune``
    without ``--all`` keeps a record an image shares)."""
    for args in (["image", "prune", "-f"], ["builder", "prune", "-f"]):
        proc = docker(*args, check=False, timeout=600)
        last = (proc.stdout.strip().splitlines() or [""])[-1]
        log(f"docker {' '.join(args)}: {last or proc.stderr.strip()}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlmodelscope.devtools.images")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build (or find up to date) the CPU images and size them")
    b.add_argument(
        "--only",
        action="append",
        default=[],
        help="a bake target (repeatable); a GPU one builds on the Debian base when its "
        f"nvidia/cuda base cannot be pulled, tagged <tag>{STAND_IN_SUFFIX}",
    )
    b.add_argument("--ca-bundle", type=Path, help="a CA bundle pip trusts in the build")
    b.add_argument("--no-wheelhouse", action="store_true", help="install from the index")
    b.add_argument("--force", action="store_true", help="rebuild even when up to date")
    b.add_argument(
        "--keep-build-cache",
        action="store_true",
        help="keep the untagged images and the build cache no image shares",
    )
    b.add_argument("--json", type=Path, help="also write the measurements here")
    sub.add_parser("engine", help="start an engine if none answers; print its DOCKER_HOST")
    sub.add_parser("stop-engine", help="stop the dockerd this module started")
    ns = parser.parse_args(argv)
    try:
        if ns.command == "engine":
            sys.stdout.write(ensure_engine() + "\n")
            return 0
        if ns.command == "stop-engine":
            return 0 if stop_engine() else 1
        start = time.monotonic()
        results = build(
            ns.only,
            ca_bundle=ns.ca_bundle,
            wheelhouse=not ns.no_wheelhouse,
            force=ns.force,
            keep_build_cache=ns.keep_build_cache,
        )
    except ImageBuildError as exc:
        _log(f"error: {exc}")
        return 1
    sys.stdout.write(report(results) + "\n")
    sys.stdout.write(f"image stage: {time.monotonic() - start:.0f}s\n")
    if ns.json:
        ns.json.write_text(json.dumps([r.__dict__ for r in results], indent=1) + "\n")
    failed = [r.name for r in results if r.over and not r.waiver]
    if failed:
        _log(f"over the size target with no reason recorded: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
