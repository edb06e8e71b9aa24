"""Hostile model archives: whatever members a tar or zip holds, unpacking either refuses it
with an error naming spec.model.uri and the member, or writes only inside the destination.

The archives are random lists of members with hostile names (``..``, absolute, backslashes,
unicode, NUL-free control characters), symlinks and hard links to anywhere (chains of links
through links included), devices and FIFOs. After each attempt the test walks the whole
scratch folder: nothing may appear outside the destination, and no link under it may lead
out of it.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlmodelscope.agent.sources import UnsafeArchiveError, extract_archive
from mlmodelscope.spec.base import SpecError

pytestmark = pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning")  # zips repeat names

HOSTILE = settings(
    max_examples=300,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

SEGMENTS = st.sampled_from(
    ["m", "model", "..", ".", "", "a b", "\u202eevil", "ü", "x\\..\\..", "C:", "~", "...", "-"]
)
NAMES = st.one_of(
    st.lists(SEGMENTS, min_size=1, max_size=5).map("/".join),
    st.lists(SEGMENTS, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)),
    st.sampled_from(["../evil", "/tmp/evil", "m/../../evil", "./../evil", "m/./../../evil"]),
)
KINDS = st.sampled_from(
    [
        tarfile.REGTYPE,
        tarfile.REGTYPE,
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.CHRTYPE,
        tarfile.BLKTYPE,
        tarfile.FIFOTYPE,
    ]
)
MEMBERS = st.lists(st.tuples(NAMES, KINDS, NAMES), min_size=1, max_size=6)


def build_tar(path: Path, members: list[tuple[str, bytes, str]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
            data = b"payload" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def build_zip(path: Path, members: list[tuple[str, bytes, str]]) -> Path:
    modes = {
        tarfile.REGTYPE: stat.S_IFREG | 0o644,
        tarfile.DIRTYPE: stat.S_IFDIR | 0o755,
        tarfile.SYMTYPE: stat.S_IFLNK | 0o777,
        tarfile.LNKTYPE: stat.S_IFREG | 0o644,
        tarfile.CHRTYPE: stat.S_IFCHR | 0o600,
        tarfile.BLKTYPE: stat.S_IFBLK | 0o600,
        tarfile.FIFOTYPE: stat.S_IFIFO | 0o600,
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, kind, link in members:
            info = zipfile.ZipInfo(name + ("/" if kind == tarfile.DIRTYPE else ""))
            info.external_attr = modes[kind] << 16
            zf.writestr(info, link if kind == tarfile.SYMTYPE else b"payload")
    return path


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def escapes(dest: Path) -> list[str]:
    """Entries under ``dest`` that are, or lead to, something outside it."""
    root = dest.resolve()
    found = []
    for folder, dirs, files in os.walk(dest):
        for name in [*dirs, *files]:
            entry = Path(folder, name)
            target = entry.resolve()
            if target != root and root not in target.parents:
                found.append(f"{entry} -> {target}")
    return found


def unpack(archive: Path, scratch: Path) -> None:
    """Unpack into scratch/out and check the property, whatever the outcome."""
    before = set(scratch.iterdir())
    dest = scratch / "out"
    try:
        extract_archive(archive, dest)
    except UnsafeArchiveError as exc:
        assert exc.field == "spec.model.uri"
        assert archive.name in str(exc)
    except SpecError as exc:  # not a readable archive: also a clear error naming the field
        assert exc.field == "spec.model.uri"
    after = set(scratch.iterdir())
    assert after - before <= {dest}, f"written outside the destination: {after - before - {dest}}"
    if dest.exists():
        assert escapes(dest) == []


@HOSTILE
@given(MEMBERS, st.sampled_from(["tar", "zip"]))
def test_any_archive_is_refused_or_unpacked_only_inside_the_destination(
    members: list[tuple[str, bytes, str]], kind: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        scratch = base / "scratch"
        scratch.mkdir()
        builder = build_tar if kind == "tar" else build_zip
        archive = builder(base / f"hostile.{kind}", members)
        unpack(archive, scratch)
        assert names(base) == [archive.name, "scratch"]


@pytest.mark.parametrize(
    "members",
    [
        # a link inside that points up, then a link through it that points up again: each
        # looks harmless on its own, together they lead out (caught while unpacking)
        [("m/up", tarfile.SYMTYPE, ".."), ("m/up/out", tarfile.SYMTYPE, ".."),
         ("m/up/out/x", 0, "")],
        [("d", tarfile.SYMTYPE, "."), ("d/d/d/e", tarfile.SYMTYPE, "../../../..")],
        [("l", tarfile.SYMTYPE, "m"), ("m", tarfile.SYMTYPE, "/etc")],
        [("h", tarfile.LNKTYPE, "/etc/passwd")],
        [("s", tarfile.SYMTYPE, "."), ("h", tarfile.LNKTYPE, "s/../../x")],
        [("dev/sda", tarfile.BLKTYPE, "")],
        [("\u202eevil/../../x", tarfile.REGTYPE, "")],
    ],
    ids=["link-through-link", "self-link-chain", "link-to-abs-link", "hardlink-abs", "hl-dotdot",
         "block-device", "rtl-dotdot"],
)  # fmt: skip
def test_link_chains_devices_and_traversal_are_refused(
    tmp_path: Path, members: list[tuple[str, bytes, str]]
) -> None:
    members = [(n, k or tarfile.REGTYPE, link) for n, k, link in members]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    archive = build_tar(tmp_path / "bad.tar", members)
    with pytest.raises(UnsafeArchiveError) as info:
        extract_archive(archive, scratch / "out")
    assert info.value.field == "spec.model.uri" and "bad.tar" in str(info.value)
    assert names(scratch) == ["out"] and escapes(scratch / "out") == []
    assert names(tmp_path) == ["bad.tar", "scratch"]


@pytest.mark.parametrize("builder", [build_tar, build_zip], ids=["tar", "zip"])
@pytest.mark.parametrize(
    "members",
    [
        [(".", tarfile.REGTYPE, "")],
        [("m", tarfile.DIRTYPE, ""), ("m", tarfile.REGTYPE, "")],
        [("m", tarfile.REGTYPE, ""), ("m/x", tarfile.REGTYPE, "")],
    ],
    ids=["file-named-dot", "file-over-folder", "folder-under-file"],
)
def test_members_that_clash_are_a_clear_error_not_an_os_error(
    tmp_path: Path, builder: Any, members: list[tuple[str, bytes, str]]
) -> None:
    """Regression: these raised IsADirectoryError / NotADirectoryError out of the agent."""
    archive = builder(tmp_path / ("clash.zip" if builder is build_zip else "clash.tar"), members)
    with pytest.raises(UnsafeArchiveError) as info:
        extract_archive(archive, tmp_path / "out")
    assert info.value.field == "spec.model.uri"
    assert "cannot unpack member" in str(info.value) and str(tmp_path) not in str(info.value)
