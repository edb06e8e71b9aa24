"""Model sources: local paths, http(s) via a local server, pvc, the content-addressed cache,
digest pinning and archive safety (s3:// against a real server: test_sources_s3.py). Nothing
here leaves 127.0.0.1."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import stat
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from model_sources import cached_files, model

from mlmodelscope.agent.sources import (
    FetchError,
    UnsafeArchiveError,
    default_cache_dir,
    directory_sha256,
    extract_archive,
    fetch_model,
    fetch_uri,
    file_sha256,
    local_path,
)
from mlmodelscope.contract.paths import container_path
from mlmodelscope.spec.base import SpecError

MODEL_BYTES = b"\x08\x07model-bytes" * 100


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("MLMS_CACHE_DIR", str(root))
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "MLMS_PATH_MAP"):
        monkeypatch.delenv(var, raising=False)
    return root


def make_savedmodel(root: Path) -> Path:
    folder = root / "saved_model"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "variables.index").write_bytes(b"index")
    (folder / "variables" / "variables.data-00000-of-00001").write_bytes(b"\x00" * 64)
    return folder


class Server:
    """A local HTTP server over a folder that counts the requests it answers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        owner = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(owner.root), **kwargs)

            def do_GET(self) -> None:
                owner.requests.append(self.path)
                if self.path.startswith("/fail"):
                    self.send_error(503, "Busy")
                    return
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "model.onnx").write_bytes(MODEL_BYTES)
    saved = make_savedmodel(tmp_path / "src")
    with tarfile.open(root / "saved.tar.gz", "w:gz") as tar:
        tar.add(saved, arcname="saved_model")
    srv = Server(root)
    yield srv
    srv.stop()


# ------------------------------------------------------------------------------ local paths


def test_local_path(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(MODEL_BYTES)
    fetched = fetch_model(model(str(path)))
    assert fetched.path == path
    assert fetched.sha256 == sha(MODEL_BYTES)
    assert (fetched.source, fetched.cached) == ("file", False)


def test_file_uri(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(MODEL_BYTES)
    fetched = fetch_model(model(f"file://{path}", sha256=sha(MODEL_BYTES)))
    assert fetched.path == path
    assert fetched.sha256 == sha(MODEL_BYTES)


def test_relative_path_resolves_against_base_dir(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.onnx").write_bytes(MODEL_BYTES)
    assert fetch_model(model("models/m.onnx"), base_dir=tmp_path).path == tmp_path / "models/m.onnx"
    assert fetch_model(model("./models/m.onnx"), base_dir=tmp_path).sha256 == sha(MODEL_BYTES)


def test_missing_local_file_names_the_uri_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        fetch_model(model("models/missing.onnx"), base_dir=tmp_path)
    assert err.value.field == "spec.model.uri"
    assert "not found" in str(err.value)
    assert str(tmp_path / "models/missing.onnx") in str(err.value)


def test_local_sha256_mismatch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(MODEL_BYTES)
    with pytest.raises(SpecError) as err:
        fetch_model(model(str(path), sha256="0" * 64))
    assert err.value.field == "spec.model.sha256"
    assert "0" * 64 in str(err.value)
    assert sha(MODEL_BYTES) in str(err.value)


def test_directory_digest_is_canonical(tmp_path: Path) -> None:
    folder = make_savedmodel(tmp_path)
    lines = sorted(
        (p.relative_to(folder).as_posix(), file_sha256(p)) for p in folder.rglob("*") if p.is_file()
    )
    expected = sha("".join(f"{digest}  {rel}\n" for rel, digest in lines).encode())
    assert directory_sha256(folder) == expected
    # Timestamps and permissions do not matter; content and names do.
    os.utime(folder / "saved_model.pb", (0, 0))
    (folder / "saved_model.pb").chmod(0o600)
    assert directory_sha256(folder) == expected
    (folder / "extra").write_bytes(b"")
    assert directory_sha256(folder) != expected
    fetched = fetch_model(model(str(folder), fmt="savedmodel"))
    assert fetched.sha256 == directory_sha256(folder)


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert default_cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("MLMS_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "mlmodelscope"


# ------------------------------------------------------------------------------------- http


def test_http_download_then_cache_hit(server: Server, cache: Path) -> None:
    source = model(server.url("model.onnx"))
    first = fetch_model(source)
    assert (first.source, first.cached) == ("http", False)
    assert first.sha256 == sha(MODEL_BYTES)
    assert first.path.read_bytes() == MODEL_BYTES
    assert first.path.is_relative_to(cache / "models" / "sha256" / sha(MODEL_BYTES))
    assert len(server.requests) == 1

    second = fetch_model(source)
    assert second.cached and second.path == first.path and second.sha256 == first.sha256
    assert len(server.requests) == 1, "a cache hit must not contact the server"


def test_pinned_http_model_served_from_cache_without_server(server: Server) -> None:
    source = model(server.url("model.onnx"), sha256=sha(MODEL_BYTES))
    fetch_model(source)
    server.stop()
    again = fetch_model(source)
    assert again.cached
    assert again.path.read_bytes() == MODEL_BYTES


def test_http_sha256_mismatch_leaves_nothing_in_cache(server: Server, cache: Path) -> None:
    with pytest.raises(SpecError) as err:
        fetch_model(model(server.url("model.onnx"), sha256="a" * 64))
    assert err.value.field == "spec.model.sha256"
    message = str(err.value)
    assert "a" * 64 in message and sha(MODEL_BYTES) in message
    assert "set spec.model.sha256" in message
    assert cached_files(cache) == []


def test_http_tar_gz_savedmodel(server: Server, tmp_path: Path) -> None:
    original = tmp_path / "src" / "saved_model"
    fetched = fetch_model(model(server.url("saved.tar.gz"), fmt="savedmodel"))
    assert fetched.path.is_dir() and fetched.path.name == "saved_model"
    assert (fetched.path / "saved_model.pb").read_bytes() == b"graph"
    assert fetched.sha256 == directory_sha256(original)
    archive_digest = file_sha256(server.root / "saved.tar.gz")
    assert fetched.archive_sha256 == archive_digest
    # Either digest pins it, and a pinned fetch is a cache hit.
    for pin in (directory_sha256(original), archive_digest):
        again = fetch_model(model(server.url("saved.tar.gz"), sha256=pin, fmt="savedmodel"))
        assert again.cached and again.path == fetched.path
    assert len(server.requests) == 1


def test_http_archive_mismatch_names_both_digests(server: Server, cache: Path) -> None:
    with pytest.raises(SpecError) as err:
        fetch_model(model(server.url("saved.tar.gz"), sha256="b" * 64, fmt="savedmodel"))
    assert err.value.field == "spec.model.sha256"
    assert file_sha256(server.root / "saved.tar.gz") in str(err.value)
    assert cached_files(cache) == []


def test_http_404_is_a_spec_error(server: Server) -> None:
    with pytest.raises(SpecError) as err:
        fetch_model(model(server.url("nope.onnx")))
    assert err.value.field == "spec.model.uri"
    assert "HTTP 404" in str(err.value)


def test_http_5xx_is_a_fetch_error_with_status(server: Server) -> None:
    with pytest.raises(FetchError) as err:
        fetch_model(model(server.url("fail.onnx")))
    assert err.value.status == 503
    assert "HTTP 503" in str(err.value)


def test_connection_refused_is_a_fetch_error(server: Server) -> None:
    url = server.url("model.onnx")
    server.stop()
    with pytest.raises(FetchError, match="failed"):
        fetch_model(model(url))


def test_a_transport_failure_names_the_uri_field_and_no_credentials(server: Server) -> None:
    """Regression (hostile input): a transient failure named the URI but not the field."""
    url = server.url("model.onnx?token=t0k3n-S3CRET").replace("http://", "http://u:pw@")
    server.stop()
    with pytest.raises(FetchError, match=r"^spec\.model\.uri: GET http://REDACTED@") as info:
        fetch_model(model(url))
    assert "t0k3n-S3CRET" not in str(info.value) and ":pw@" not in str(info.value)


# ---------------------------------------------------------------------------------- archives


def write_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def tar_info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


@pytest.mark.parametrize(
    ("member", "data", "words"),
    [
        (tar_info("../evil"), b"x", "'..'"),
        (tar_info("model/../../evil"), b"x", "'..'"),
        (tar_info("/abs/evil"), b"x", "absolute"),
        (tar_info("model/passwd", tarfile.SYMTYPE, "/etc/passwd"), None, "points outside"),
        (tar_info("model/up", tarfile.SYMTYPE, "../../etc/passwd"), None, "points outside"),
        (tar_info("model/hard", tarfile.LNKTYPE, "../outside"), None, "points outside"),
        (tar_info("model/tty", tarfile.CHRTYPE), None, "device"),
        (tar_info("model/fifo", tarfile.FIFOTYPE), None, "device"),
    ],
)
def test_unsafe_tar_members_are_rejected(
    tmp_path: Path, member: tarfile.TarInfo, data: bytes | None, words: str
) -> None:
    archive = write_tar(tmp_path / "bad.tar.gz", [(tar_info("model/ok.pb"), b"ok"), (member, data)])
    with pytest.raises(UnsafeArchiveError) as err:
        extract_archive(archive, tmp_path / "out")
    assert member.name in str(err.value) and words in str(err.value)
    assert err.value.field == "spec.model.uri"
    assert not (tmp_path / "evil").exists()
    assert not list((tmp_path / "out").rglob("*")), "nothing is written before the check"


def test_unsafe_archive_through_fetch_leaves_cache_clean(tmp_path: Path, cache: Path) -> None:
    archive = write_tar(tmp_path / "bad.tgz", [(tar_info("../evil"), b"x")])
    with pytest.raises(UnsafeArchiveError, match=r"\.\./evil"):
        fetch_model(model(str(archive), fmt="savedmodel"))
    assert cached_files(cache) == []


def test_internal_symlink_is_allowed(tmp_path: Path) -> None:
    archive = write_tar(
        tmp_path / "ok.tar.gz",
        [(tar_info("m/a.bin"), b"a"), (tar_info("m/b.bin", tarfile.SYMTYPE, "a.bin"), None)],
    )
    root = extract_archive(archive, tmp_path / "out")
    assert root == tmp_path / "out" / "m"
    assert (root / "b.bin").read_bytes() == b"a"


def test_zip_traversal_and_symlinks_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../evil", b"x")
    with pytest.raises(UnsafeArchiveError, match=r"\.\./evil"):
        extract_archive(bad, tmp_path / "out1")
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo("m/passwd")
        info.external_attr = (0o120777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(UnsafeArchiveError, match="symlink"):
        extract_archive(link, tmp_path / "out2")
    device = tmp_path / "device.zip"
    with zipfile.ZipFile(device, "w") as zf:
        info = zipfile.ZipInfo("m/tty")
        info.external_attr = (stat.S_IFCHR | 0o600) << 16
        zf.writestr(info, b"")
    with pytest.raises(UnsafeArchiveError, match="device"):
        extract_archive(device, tmp_path / "out3")


def test_local_zip_is_unpacked_into_cache_once(tmp_path: Path, cache: Path) -> None:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("saved_model.pb", b"graph")
        zf.writestr("variables/variables.index", b"i")
    first = fetch_model(model(str(archive), fmt="savedmodel"))
    assert first.path.is_relative_to(cache) and (first.path / "saved_model.pb").is_file()
    assert first.archive_sha256 == file_sha256(archive)
    second = fetch_model(model(str(archive), sha256=first.sha256, fmt="savedmodel"))
    assert second.cached and second.path == first.path


# ------------------------------------------------------------------------------- pvc and map


def test_pvc_uri_maps_to_the_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLMS_PVC_ROOT", str(tmp_path / "pvc"))
    target = tmp_path / "pvc" / "models-claim" / "digits" / "model.onnx"
    target.parent.mkdir(parents=True)
    target.write_bytes(MODEL_BYTES)
    fetched = fetch_model(model("pvc://models-claim/digits/model.onnx"))
    assert fetched.path == target and fetched.source == "pvc"
    # the spec refuses '..' in a pvc:// URI; the agent refuses it too (a spec written
    # against an older CRD), so build the model without validation
    climbing = model("pvc://models-claim/x").model_copy(
        update={"uri": "pvc://models-claim/../other/model.onnx"}
    )
    with pytest.raises(SpecError, match=r"'\.\.'"):
        fetch_model(climbing)
    with pytest.raises(SpecError, match="not found"):
        fetch_model(model("pvc://models-claim/missing.onnx"))


def test_pvc_default_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLMS_PVC_ROOT", raising=False)
    assert local_path("pvc://c/a/b.onnx") == Path("/var/run/mlmodelscope/pvc/c/a/b.onnx")


def test_path_map_translates_container_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = tmp_path / "host-models"
    host.mkdir()
    (host / "m.onnx").write_bytes(MODEL_BYTES)
    monkeypatch.setenv(
        "MLMS_PATH_MAP",
        json.dumps({"/models": str(host), "/models/deep": str(tmp_path / "deep")}),
    )
    assert fetch_model(model("/models/m.onnx")).path == host / "m.onnx"
    assert fetch_model(model("file:///models/m.onnx")).path == host / "m.onnx"
    assert container_path("/models/deep/x") == str(tmp_path / "deep" / "x")
    assert container_path("/modelsx/m.onnx") == "/modelsx/m.onnx"
    assert container_path("/models") == str(host)
    monkeypatch.setenv("MLMS_PVC_ROOT", "/models/pvc")
    assert local_path("pvc://claim/x.onnx") == host / "pvc" / "claim" / "x.onnx"


def test_host_paths_under_a_mounted_prefix_stay_host_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dev cluster mounts an emptyDir at /tmp; a model cached under /tmp on the host must
    # still be found, while container paths under the mount still map into the volume.
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "in-volume.txt").write_text("v")
    cached = tmp_path / "cache" / "m.onnx"
    cached.parent.mkdir()
    cached.write_bytes(MODEL_BYTES)
    top = "/" + tmp_path.parts[1]
    monkeypatch.setenv("MLMS_PATH_MAP", json.dumps({top: str(volume)}))
    assert container_path(str(cached)) == str(cached)
    assert container_path(f"{top}/in-volume.txt") == str(volume / "in-volume.txt")
    assert container_path(f"{top}/not-yet-written.json") == str(volume / "not-yet-written.json")


def test_bad_path_map_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLMS_PATH_MAP", "not json")
    with pytest.raises(ValueError, match="MLMS_PATH_MAP"):
        container_path("/x")


# s3:// sources are tested against a real S3-compatible server in test_sources_s3.py.


def test_fetch_uri_for_datasets_uses_its_own_cache_kind(server: Server, cache: Path) -> None:
    fetched = fetch_uri(server.url("model.onnx"), kind="datasets", uri_field="spec.dataset.uri")
    assert fetched.path.is_relative_to(cache / "datasets")


def test_a_pvc_uri_with_a_doubled_slash_stays_inside_the_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pvc://claim//etc/passwd is a path inside the claim, not the node's /etc/passwd."""
    from mlmodelscope.agent.sources import local_path

    monkeypatch.setenv("MLMS_PVC_ROOT", "/pvc")
    assert str(local_path("pvc://claim//etc/passwd")) == "/pvc/claim/etc/passwd"
    assert str(local_path("pvc://claim/models/a.onnx")) == "/pvc/claim/models/a.onnx"
