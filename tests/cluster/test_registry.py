"""The dev cluster's OCI registry on its own: its configuration, and the built binary serving
pushes by digest that outlive a restart (no cluster)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from oci_images import MANIFEST_TYPE, pause_image

from mlmodelscope.devcluster import node, registry, versions
from mlmodelscope.devcluster.cluster import free_ports
from mlmodelscope.devcluster.pytest_plugin import wait_for


def test_hack_registry_go_mod_requires_the_pinned_version() -> None:
    go_mod = (registry.TOOL.source_dir / "go.mod").read_text()
    want = f"github.com/google/go-containerregistry {versions.GO_CONTAINERREGISTRY_VERSION}"
    assert want in go_mod
    assert want in (registry.TOOL.source_dir / "go.sum").read_text()


def test_containerd_reads_registry_hosts_from_the_node_and_pulls_over_plain_http(
    tmp_path: Path,
) -> None:
    paths = node.Paths(run=tmp_path / "run", cache=tmp_path / "cache")
    toml = node.containerd_config(paths, "mlmodelscope.local/pause:abc")
    assert f'config_path = "{paths.certs_dir}"' in toml
    assert str(paths.certs_dir).startswith(str(paths.run))  # per cluster: its port
    written = registry.write_hosts(paths.certs_dir, "127.0.0.1:5123")
    assert [p.parent.name for p in written] == [registry.NAME, "127.0.0.1:5123"]
    for path in written:
        text = path.read_text()
        assert 'server = "http://127.0.0.1:5123"' in text
        assert '[host."http://127.0.0.1:5123"]' in text  # containerd 1.6 needs the table
        assert 'capabilities = ["pull", "resolve"]' in text
    assert registry.reference("a/b", "sha256:00") == f"{registry.NAME}/a/b@sha256:00"


class Server:
    """The built registry on a free loopback port, with its data in ``root``."""

    def __init__(self, binary: Path, root: Path, log: Path) -> None:
        self.binary, self.root, self.log = binary, root, log
        self.address = f"127.0.0.1:{free_ports(1)[0]}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            argv = registry.argv(self.binary, self.address, self.root)
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        with registry.client(self.address) as reg:
            wait_for("the registry to answer /v2/", reg.ping, 30)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    if shutil.which("go") is None and not registry.is_built():
        pytest.skip("the registry needs Go to build (or a prebuilt cache)")
    binary = registry.ensure_registry()
    running = Server(binary, tmp_path / "registry", tmp_path / "registry.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _get(url: str, accept: str = MANIFEST_TYPE) -> tuple[bytes, str]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read(), resp.headers.get("Docker-Content-Digest", "")


def test_a_pushed_image_is_served_by_digest_and_tag_and_outlives_a_restart(
    server: Server,
) -> None:
    image = pause_image(b"not run", marker=uuid.uuid4().hex)
    pushed = registry.push_archive(
        server.address, "tests/pause", io.BytesIO(image.archive), tag="v1"
    )
    assert pushed.digest == image.manifest_digest
    assert (pushed.uploaded, pushed.present) == (4, 0)  # two layers, config, manifest
    assert pushed.reference == f"{registry.NAME}/tests/pause@{image.manifest_digest}"

    again = registry.push_archive(server.address, "tests/pause", io.BytesIO(image.archive))
    assert (again.digest, again.uploaded, again.present) == (pushed.digest, 0, 4)

    server.stop()
    server.start()  # manifests are replayed from disk, blobs were never in memory
    base = f"http://{server.address}/v2/tests/pause"
    for ref in (image.manifest_digest, "v1"):
        body, digest = _get(f"{base}/manifests/{ref}")
        assert digest == image.manifest_digest
        assert [x["digest"] for x in json.loads(body)["layers"]] == list(image.layer_digests)
    layer, _ = _get(f"{base}/blobs/{image.layer_digests[1]}", "*/*")
    assert b"marker" in layer
    assert "(2 manifest reference(s) restored)" in server.log.read_text()

    requests = registry.request_log(server.log)
    puts = [r for r in requests if r["method"] == "PUT" and "/manifests/" in r["path"]]
    assert {r["status"] for r in puts} == {201}
    assert all(r["agent"] == registry.USER_AGENT for r in puts)


def test_a_moved_tag_drops_the_generation_it_left_and_its_blobs_are_collected(
    server: Server,
) -> None:
    first, second = (pause_image(b"not run", marker=uuid.uuid4().hex) for _ in range(2))
    old = registry.push_archive(server.address, "tests/gen", io.BytesIO(first.archive), tag="v")
    new = registry.push_archive(server.address, "tests/gen", io.BytesIO(second.archive), tag="v")
    assert (old.replaced, new.replaced) == ("", first.manifest_digest)
    with registry.client(server.address) as reg:
        assert reg.manifest_digest("tests/gen", "v") == second.manifest_digest
        assert not reg.has_manifest("tests/gen", first.manifest_digest)

    blobs = server.root / "blobs" / "sha256"
    on_disk = {f"sha256:{p.name}" for p in blobs.iterdir()}
    assert registry.collect_garbage(server.root) == 0  # younger than the grace period
    assert registry.collect_garbage(server.root, grace_s=0) > 0
    left = {f"sha256:{p.name}" for p in blobs.iterdir()}
    assert first.layer_digests[1] not in left  # its marker layer was only the old one's
    assert first.layer_digests[0] in left  # the pause layer both share
    assert set(second.layer_digests) <= left and left < on_disk
    with registry.client(server.address) as reg:
        assert reg.manifest_digest("tests/gen", second.manifest_digest)
    layer, _ = _get(f"http://{server.address}/v2/tests/gen/blobs/{second.layer_digests[1]}", "*/*")
    assert b"marker" in layer


def test_a_blob_whose_content_does_not_match_its_digest_is_refused(server: Server) -> None:
    digest = "sha256:" + "0" * 64
    with registry.client(server.address) as reg:
        with pytest.raises(registry.RegistryError, match="upload of"):
            reg.upload_blob("tests/bad", digest, 5, b"hello")
        assert not reg.has_blob("tests/bad", digest)
    assert not list((server.root / "blobs" / "sha256").glob("*"))  # no partial file kept


def test_an_archive_without_an_oci_index_is_refused(server: Server) -> None:
    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    empty.seek(0)
    with pytest.raises(registry.RegistryError, match="not an image archive"):
        registry.push_archive(server.address, "tests/empty", empty)


def test_serving_pushes_into_the_data_a_later_registry_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make test` pushes the images before its cluster exists (`registry.serving`, through
    ``publish --images-only``); the cluster's registry then serves them from the same data."""
    if shutil.which("go") is None and not registry.is_built():
        pytest.skip("the registry needs Go to build (or a prebuilt cache)")
    monkeypatch.setattr(registry, "data_dir", lambda: tmp_path / "registry")
    image = pause_image(b"not run", marker=uuid.uuid4().hex)
    with registry.serving() as address:
        pushed = registry.push_archive(address, "tests/pause", io.BytesIO(image.archive), tag="v1")
    with registry.client(address) as reg:
        assert not reg.ping()  # stopped with the block
    later = Server(registry.ensure_registry(), tmp_path / "registry", tmp_path / "later.log")
    later.start()
    try:
        _, digest = _get(f"http://{later.address}/v2/tests/pause/manifests/v1")
        assert digest == pushed.digest == image.manifest_digest
    finally:
        later.stop()
    assert list((tmp_path / "registry" / "tmp").iterdir()) == []  # its log went with it
