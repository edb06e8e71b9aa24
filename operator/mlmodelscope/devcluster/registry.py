"""The dev cluster's OCI registry, and pushing images to it by digest.

The registry is ``hack/registry`` (a few lines around go-containerregistry's ``pkg/registry``,
pinned by its go.mod to `versions.GO_CONTAINERREGISTRY_VERSION`), built once into
``<cache>/tools/registry-<version>/``. The cluster runs it on loopback, plain HTTP, with its
blobs and manifests under ``<cache>/registry/`` so a pushed image outlives the cluster.

Pods name it `NAME` (``registry.mlmodelscope.local/<repository>@sha256:…``), a name no DNS
answers: the real node's containerd maps it to the registry's loopback address with a
``hosts.toml`` (`write_hosts`), so a reference stays the same whichever port the registry got.
From this host, push to the address itself (`push_archive`, `push_docker_image`).

A push reads an image archive, an OCI image layout (what ``docker save`` writes since Docker
25, and what `node.pause_image_archive` builds) or the older ``docker save`` format (Debian's
Docker engine), and uploads each blob in one request, uncompressed as it is in the archive:
no layer is gzipped on this 2-core machine, and the same image always gets the same digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from mlmodelscope.devcluster import gosource, versions
from mlmodelscope.devcluster.gosource import SourceBuildError, SourceTool

Log = Callable[[str], None]

NAME: Final = "registry.mlmodelscope.local"
"""The registry's name in image references; containerd resolves it through `hosts_toml`."""
INDEX_TYPES: Final = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
USER_AGENT: Final = "mlmodelscope-push"
"""How a push from this host shows in the registry's request log."""
MANIFEST_TYPE: Final = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE: Final = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE: Final = "application/vnd.oci.image.layer.v1.tar"
"""Layers are pushed as they are in the archive: uncompressed tars."""
SMALL_BLOB: Final = 4 << 20
"""Blobs up to this size are read into memory (manifests, configs); larger ones stream."""


class RegistryError(RuntimeError):
    """Building, starting or pushing to the registry failed; the message says which step."""


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# ---- where things live ------------------------------------------------------------------


TOOL: Final = SourceTool(
    "registry", "mlms-registry", "go-containerregistry", versions.GO_CONTAINERREGISTRY_VERSION
)


def tool_dir() -> Path:
    """``<cache>/tools/registry-<go-containerregistry version>``: the binary and its stamp."""
    return TOOL.tool_dir()


def binary_path() -> Path:
    return TOOL.binary_path()


def data_dir() -> Path:
    """Blobs and manifests, kept across clusters (a pushed image is pushed once)."""
    return versions.cache_base() / "registry"


# ---- build --------------------------------------------------------------------------------


def fingerprint() -> str:
    """The pin and a hash of the wrapper's sources: a change to either rebuilds."""
    return TOOL.fingerprint()


def is_built() -> bool:
    """True when the binary exists and was built from the current pin and sources."""
    return TOOL.is_built()


def build(*, force: bool = False, log: Log = _stderr) -> float:
    """Compile the registry into the tool cache; the seconds it took (0.0 when cached)."""
    try:
        return TOOL.build(log, force=force)
    except SourceBuildError as exc:
        raise RegistryError(str(exc)) from exc


def ensure_registry(log: Log = _stderr) -> Path:
    """The registry binary, built first when missing or stale."""
    build(log=log)
    return binary_path()


# ---- running it ---------------------------------------------------------------------------


def argv(binary: Path, address: str, root: Path) -> list[str]:
    return [str(binary), f"--address={address}", f"--root={root}"]


@contextlib.contextmanager
def serving(log: Log = _stderr, timeout_s: float = 30.0) -> Iterator[str]:
    """The registry on a free loopback port over `data_dir` for the block, without a cluster;
    yields its address. What is pushed stays in the data, which the next cluster's registry
    restores at its start: `make test` pushes the images this way before its cluster exists."""
    binary = ensure_registry(log)
    root = data_dir()
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    with tempfile.TemporaryFile(dir=root / "tmp") as out:
        proc = subprocess.Popen(argv(binary, address, root), stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + timeout_s
            with client(address) as reg:
                while not reg.ping():
                    if proc.poll() is not None or time.monotonic() > deadline:
                        out.seek(0)
                        tail = out.read().decode(errors="replace")[-2000:]
                        raise RegistryError(f"the registry at {address} did not start:\n{tail}")
                    time.sleep(0.1)
            yield address
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def hosts_toml(address: str) -> str:
    """containerd's host configuration: pull and resolve from ``address`` over plain HTTP.

    containerd 1.6 refuses a file without a ``[host]`` table ("invalid `host` tree"), so the
    address is both the one host and the server."""
    return (
        "# the dev cluster's registry (mlmodelscope.devcluster.registry)\n"
        f'server = "http://{address}"\n\n'
        f'[host."http://{address}"]\n'
        '  capabilities = ["pull", "resolve"]\n'
    )


def write_hosts(certs_dir: Path, address: str, *also: str) -> list[Path]:
    """``certs_dir/<host>/hosts.toml`` for `NAME`, for the address itself and for the hosts
    ``also`` names, so a reference naming any of them pulls from the registry; returns the
    files written."""
    written = []
    for host in (NAME, address, *also):
        path = certs_dir / host / "hosts.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(hosts_toml(address))
        written.append(path)
    return written


def reference(repository: str, digest: str) -> str:
    """What a pod's ``image`` says: the registry's name, the repository, the digest."""
    return f"{NAME}/{repository}@{digest}"


def request_log(path: Path) -> list[dict[str, Any]]:
    """The registry's requests, oldest first (its JSON lines; other lines are skipped)."""
    entries = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    entries.append(json.loads(line))
    return entries


# ---- pushing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pushed:
    """One image in the registry: where, by which digest, and what the push moved."""

    repository: str
    digest: str
    uploaded: int
    """Blobs sent (a blob the registry had was skipped)."""
    present: int
    seconds: float
    cached: bool = False
    """True when nothing was read: this image id was pushed before and its manifest is there."""
    replaced: str = ""
    """The manifest the tag named before, now deleted ('' when the tag was new or unmoved)."""

    @property
    def reference(self) -> str:
        return reference(self.repository, self.digest)


class Client:
    """The few calls of the OCI distribution API a push needs, over plain HTTP."""

    def __init__(self, address: str, timeout: float = 600.0) -> None:
        host, _, port = address.rpartition(":")
        self.address = address
        self._conn = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def close(self) -> None:
        self._conn.close()

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | IO[bytes] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        try:
            headers = {"User-Agent": USER_AGENT, **(headers or {})}
            self._conn.request(method, path, body=body, headers=headers)
            resp = self._conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            self._conn.close()
            raise RegistryError(f"{method} http://{self.address}{path}: {exc}") from exc
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def ping(self) -> bool:
        try:
            return self._request("GET", "/v2/")[0] == 200
        except RegistryError:
            return False

    def has_blob(self, repository: str, digest: str) -> bool:
        return self._request("HEAD", f"/v2/{repository}/blobs/{digest}")[0] == 200

    def upload_blob(self, repository: str, digest: str, size: int, data: bytes | IO[bytes]) -> None:
        """One request: ``POST /v2/<repo>/blobs/uploads/?digest=…`` with the whole blob."""
        path = f"/v2/{repository}/blobs/uploads/?digest={digest}"
        headers = {"Content-Length": str(size), "Content-Type": "application/octet-stream"}
        status, _, body = self._request("POST", path, data, headers)
        if status != 201:
            raise RegistryError(f"upload of {digest} to {repository}: {status} {body[:300]!r}")

    def put_manifest(self, repository: str, ref: str, media_type: str, data: bytes) -> str:
        """Store a manifest under ``ref`` (a digest or a tag); the digest the registry gives."""
        headers = {"Content-Type": media_type}
        status, got, body = self._request("PUT", f"/v2/{repository}/manifests/{ref}", data, headers)
        if status != 201:
            raise RegistryError(f"manifest {repository}:{ref}: {status} {body[:300]!r}")
        return got.get("docker-content-digest", "")

    def has_manifest(self, repository: str, ref: str) -> bool:
        return self.manifest_digest(repository, ref) is not None

    def manifest_digest(self, repository: str, ref: str) -> str | None:
        """The digest of the manifest ``ref`` names (a tag or a digest); None when absent."""
        accept = ", ".join((MANIFEST_TYPE, *INDEX_TYPES))
        path = f"/v2/{repository}/manifests/{ref}"
        status, headers, _ = self._request("HEAD", path, headers={"Accept": accept})
        if status != 200:
            return None
        return headers.get("docker-content-digest") or ref

    def delete_manifest(self, repository: str, digest: str) -> None:
        status, _, body = self._request("DELETE", f"/v2/{repository}/manifests/{digest}")
        if status not in (202, 404):
            raise RegistryError(f"delete {repository}@{digest}: {status} {body[:300]!r}")


@contextlib.contextmanager
def client(address: str) -> Iterator[Client]:
    c = Client(address)
    try:
        yield c
    finally:
        c.close()


@dataclass(frozen=True)
class _Blob:
    """One blob of an archive: its bytes, or the tar member to stream them from."""

    digest: str
    size: int
    data: bytes | None = None
    member: str = ""


@dataclass(frozen=True)
class _Image:
    """What an archive holds: blobs to upload, manifests by digest, the top manifest."""

    blobs: list[_Blob]
    manifests: dict[str, tuple[str, bytes]]
    """digest → (media type, bytes), for every manifest and index of the image."""
    top: str


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _member(tar: tarfile.TarFile, name: str) -> tarfile.TarInfo:
    """The regular file ``name`` stands for (``docker save`` links a repeated layer)."""
    for _ in range(8):
        info = tar.getmember(name)
        if not info.issym() and not info.islnk():
            return info
        link = info.linkname
        name = str(Path(name).parent / link) if info.issym() else link
        name = str(Path(name)).removeprefix("./")
    raise RegistryError(f"{name}: too many links in the archive")


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    stream = tar.extractfile(_member(tar, name))
    if stream is None:
        raise RegistryError(f"{name} is not a file in the archive")
    return stream.read()


def _oci_layout(tar: tarfile.TarFile, names: set[str]) -> _Image:
    """An OCI image layout: its blobs as they are; manifests are blobs ``index.json`` or an
    index names."""
    blobs: list[_Blob] = []
    small: dict[str, bytes] = {}
    for name in sorted(n for n in names if n.startswith("blobs/")):
        algorithm, hex_digest = name.split("/")[1:3]
        digest, info = f"{algorithm}:{hex_digest}", _member(tar, name)
        if info.size <= SMALL_BLOB:
            small[digest] = _read(tar, name)
            blobs.append(_Blob(digest, info.size, data=small[digest]))
        else:
            blobs.append(_Blob(digest, info.size, member=name))
    index = json.loads(_read(tar, "index.json"))
    if not index.get("manifests"):
        raise RegistryError("the archive's index.json names no manifest")
    manifests: dict[str, tuple[str, bytes]] = {}

    def collect(desc: dict[str, Any]) -> None:
        digest = str(desc["digest"])
        if digest not in small:
            raise RegistryError(f"manifest {digest} is not in the archive")
        manifests[digest] = (str(desc["mediaType"]), small[digest])
        if desc["mediaType"] in INDEX_TYPES:
            for child in json.loads(small[digest]).get("manifests", []):
                if child["digest"] in small:  # a layout may hold one platform of several
                    collect(child)

    top = index["manifests"][0]
    collect(top)
    return _Image(blobs, manifests, str(top["digest"]))


def _docker_archive(tar: tarfile.TarFile) -> _Image:
    """A ``docker save`` archive of the older format (``manifest.json``, ``<id>/layer.tar``):
    an OCI manifest is written for it, uncompressed layers named by the config's diff IDs,
    so the same image always gets the same digest."""
    entries = json.loads(_read(tar, "manifest.json"))
    if len(entries) != 1:
        raise RegistryError(f"the archive holds {len(entries)} images; push one at a time")
    entry = entries[0]
    config = _read(tar, entry["Config"])
    diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    if len(diff_ids) != len(entry["Layers"]):
        raise RegistryError("the archive's layers do not match its config's diff IDs")
    blobs = [_Blob(_digest(config), len(config), data=config)]
    layers = []
    for digest, name in zip(diff_ids, entry["Layers"], strict=True):
        size = _member(tar, name).size
        layers.append({"mediaType": LAYER_TYPE, "digest": digest, "size": size})
        if all(b.digest != digest for b in blobs):
            blobs.append(_Blob(digest, size, member=name))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": _digest(config), "size": len(config)},
        "layers": layers,
    }
    data = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return _Image(blobs, {_digest(data): (MANIFEST_TYPE, data)}, _digest(data))


def push_archive(
    address: str, repository: str, archive: IO[bytes], *, tag: str | None = None
) -> Pushed:
    """Push the image of a seekable tar archive, an OCI image layout or an older ``docker
    save`` archive, to ``repository``: every blob the registry lacks, each in one request,
    then the manifests (an index's own first), by digest and, with ``tag``, by tag too.

    A tag names one generation: the manifest it named before is deleted (its blobs stay
    until `collect_garbage`), so rebuilds do not pile up in the registry."""
    started = time.monotonic()
    with tarfile.open(fileobj=archive, mode="r:*") as tar:
        names = {m.name.removeprefix("./") for m in tar.getmembers()}
        if "index.json" in names:
            image = _oci_layout(tar, names)
        elif "manifest.json" in names:
            image = _docker_archive(tar)
        else:
            raise RegistryError("not an image archive: neither index.json nor manifest.json")
        uploaded = present = 0
        with client(address) as reg:
            for blob in image.blobs:
                if reg.has_blob(repository, blob.digest):
                    present += 1
                    continue
                if blob.data is not None:
                    reg.upload_blob(repository, blob.digest, blob.size, blob.data)
                else:
                    stream = tar.extractfile(_member(tar, blob.member))
                    assert stream is not None
                    reg.upload_blob(repository, blob.digest, blob.size, stream)
                uploaded += 1
            _put_manifests(reg, repository, image, image.top)
            replaced = ""
            if tag:
                previous = reg.manifest_digest(repository, tag)
                media_type, data = image.manifests[image.top]
                reg.put_manifest(repository, tag, media_type, data)
                if previous and previous != image.top:
                    reg.delete_manifest(repository, previous)
                    replaced = previous
    seconds = time.monotonic() - started
    return Pushed(repository, image.top, uploaded, present, seconds, replaced=replaced)


def _put_manifests(reg: Client, repository: str, image: _Image, digest: str) -> None:
    """PUT the manifest ``digest`` by its digest, an index's children first."""
    media_type, data = image.manifests[digest]
    if media_type in INDEX_TYPES:
        for child in json.loads(data).get("manifests", []):
            if child["digest"] in image.manifests:
                _put_manifests(reg, repository, image, str(child["digest"]))
    got = reg.put_manifest(repository, digest, media_type, data)
    if got and got != digest:
        raise RegistryError(f"the registry stored {digest} as {got}")


def _pushed_stamp() -> Path:
    return data_dir() / "pushed.json"


def push_docker_image(
    address: str,
    repository: str,
    image: str,
    docker: Sequence[str] = ("docker",),
    *,
    tag: str | None = None,
    log: Log = _stderr,
) -> Pushed:
    """``docker save`` into a file beside the registry's data, then `push_archive`. An image
    id pushed before to this repository whose manifest the registry still has is not saved
    again (``cached``).

    ``docker`` is the Docker CLI argv (DOCKER_HOST in the environment picks the engine)."""
    inspect = subprocess.run(
        [*docker, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True
    )
    if inspect.returncode != 0:
        raise RegistryError(f"image {image} is not in the Docker engine: {inspect.stderr.strip()}")
    key = f"{repository} {inspect.stdout.strip()}"
    try:
        stamp: dict[str, str] = json.loads(_pushed_stamp().read_text())
    except (OSError, ValueError):
        stamp = {}
    known = stamp.get(key)
    if known:
        with client(address) as reg:
            there = reg.has_manifest(repository, known)
            if there and (not tag or reg.manifest_digest(repository, tag) == known):
                return Pushed(repository, known, 0, 0, 0.0, cached=True)
    log(f"  pushing {image} to {address}/{repository}")
    scratch = data_dir() / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        saved = Path(tmp) / "image.tar"
        proc = subprocess.run([*docker, "save", "-o", str(saved), image], capture_output=True)
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            raise RegistryError(f"docker save {image} failed: {err}")
        with saved.open("rb") as archive:
            pushed = push_archive(address, repository, archive, tag=tag)
    stamp[key] = pushed.digest
    tmp_stamp = _pushed_stamp().with_suffix(".tmp")
    tmp_stamp.write_text(json.dumps(stamp, indent=1, sort_keys=True))
    tmp_stamp.replace(_pushed_stamp())
    if pushed.replaced:
        freed = collect_garbage(data_dir())
        log(f"  {repository}:{tag} left {pushed.replaced}: {freed / 1e6:.0f} MB of blobs freed")
    return pushed


def _named_blobs(manifest: bytes) -> set[str]:
    """The blob digests a stored manifest names (an index names manifests, not blobs)."""
    try:
        doc = json.loads(manifest)
    except ValueError:
        return set()
    if not isinstance(doc, dict):
        return set()
    named = {str(layer["digest"]) for layer in doc.get("layers", []) if "digest" in layer}
    if isinstance(doc.get("config"), dict) and "digest" in doc["config"]:
        named.add(str(doc["config"]["digest"]))
    return named


def collect_garbage(root: Path, *, grace_s: float = 600.0, now: float | None = None) -> int:
    """Delete the blobs under ``root`` that no stored manifest names and that are older than
    ``grace_s`` (a push uploads its blobs before its manifest, and another cluster's registry
    may still serve a manifest this one deleted); the bytes freed."""
    named: set[str] = set()
    for path in (root / "manifests").glob("*/*"):
        if path.suffix not in (".type", ".tmp") and path.is_file():
            data = path.read_bytes()
            named |= {_digest(data), *_named_blobs(data)}  # a layout pushes its manifest too
    cutoff = (time.time() if now is None else now) - grace_s
    freed = 0
    for path in (root / "blobs").glob("*/*"):
        digest = f"{path.parent.name}:{path.name}"
        if path.name.startswith(".") or digest in named:
            continue
        with contextlib.suppress(OSError):
            info = path.stat()
            if info.st_mtime < cutoff:
                path.unlink()
                freed += info.st_size
    return freed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mlmodelscope.devcluster.registry [--force]``: build if needed, print the path."""
    return gosource.main(TOOL, argv)


if __name__ == "__main__":
    raise SystemExit(main())
