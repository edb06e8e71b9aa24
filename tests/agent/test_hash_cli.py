"""`mlms hash PATH`: the digest it prints, pinned as spec.model.sha256, is the one the agent's
`fetch_model` accepts; a changed byte makes the agent refuse the model."""

from __future__ import annotations

import hashlib
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlmodelscope.agent.sources import fetch_model
from mlmodelscope.cli import app
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import ModelSource

runner = CliRunner()


def hash_lines(path: Path, *args: str) -> list[str]:
    """The digests `mlms hash` prints on stdout, one per line (the first column)."""
    result = runner.invoke(app, ["hash", str(path), *args])
    assert result.exit_code == 0, result.output
    digests = [line.split()[0] for line in result.stdout.splitlines() if line.strip()]
    assert digests and all(re.fullmatch("[0-9a-f]{64}", d) for d in digests), result.stdout
    return digests


def model(uri: Path, fmt: str, sha256: str) -> ModelSource:
    return ModelSource.model_validate(
        {
            "name": "m",
            "uri": str(uri),
            "format": fmt,
            "sha256": sha256,
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
        }
    )


def savedmodel(root: Path) -> Path:
    """A folder shaped like a TensorFlow SavedModel (an empty assets/ folder included)."""
    (root / "variables").mkdir(parents=True)
    (root / "assets").mkdir()
    (root / "saved_model.pb").write_bytes(b"\x08\x01graph" * 100)
    (root / "fingerprint.pb").write_bytes(b"fp")
    (root / "variables" / "variables.index").write_bytes(b"index")
    (root / "variables" / "variables.data-00000-of-00001").write_bytes(bytes(range(256)) * 8)
    return root


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_file_digest_is_sha256sum_and_pins_the_model(tmp_path: Path) -> None:
    path = tmp_path / "digits.onnx"
    path.write_bytes(b"not really onnx, but bytes are bytes" * 1000)
    (digest,) = hash_lines(path)
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert hash_lines(path, "--quiet") == [digest]
    cache = tmp_path / "cache"

    fetched = fetch_model(model(path, "onnx", digest), cache_dir=cache)
    assert fetched.path == path and fetched.sha256 == digest

    flip_last_byte(path)
    with pytest.raises(SpecError, match="mlms hash") as caught:
        fetch_model(model(path, "onnx", digest), cache_dir=cache)
    assert caught.value.field == "spec.model.sha256"


def test_directory_digest_pins_a_savedmodel(tmp_path: Path) -> None:
    folder = savedmodel(tmp_path / "digits_savedmodel")
    (digest,) = hash_lines(folder)
    result = runner.invoke(app, ["hash", str(folder)])
    assert result.stdout.strip() == f"{digest}  {folder.as_posix()}/"
    # Anyone can reproduce the pin without mlms, as docs/spec.md says.
    shell = subprocess.run(
        "find . -type f -printf '%P\\n' | LC_ALL=C sort | xargs -d '\\n' sha256sum | sha256sum",
        shell=True,
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.split()[0] == digest

    fetched = fetch_model(model(folder, "savedmodel", digest), cache_dir=tmp_path / "cache")
    assert fetched.path == folder and fetched.sha256 == digest

    flip_last_byte(folder / "variables" / "variables.data-00000-of-00001")
    with pytest.raises(SpecError, match=r"spec expects " + digest):
        fetch_model(model(folder, "savedmodel", digest), cache_dir=tmp_path / "cache")


def test_archive_prints_both_digests_and_the_agent_accepts_either(tmp_path: Path) -> None:
    folder = savedmodel(tmp_path / "src" / "digits_savedmodel")
    archive = tmp_path / "digits_savedmodel.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="digits_savedmodel")
    result = runner.invoke(app, ["hash", str(archive)])
    assert result.exit_code == 0, result.output
    archive_digest, tree_digest = hash_lines(archive)
    assert archive_digest == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert tree_digest == hash_lines(folder)[0], "unpacked tree = the folder it was packed from"
    assert "(unpacked)" in result.stdout.splitlines()[1]
    assert "accepts either" in result.stderr
    assert hash_lines(archive, "-q") == [tree_digest], "--quiet: what the agent records"

    for i, pin in enumerate((archive_digest, tree_digest)):
        fetched = fetch_model(model(archive, "savedmodel", pin), cache_dir=tmp_path / f"c{i}")
        assert fetched.sha256 == tree_digest and fetched.archive_sha256 == archive_digest

    flip_last_byte(folder / "saved_model.pb")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="digits_savedmodel")
    for pin in (archive_digest, tree_digest):
        with pytest.raises(SpecError, match="mlms hash"):
            fetch_model(model(archive, "savedmodel", pin), cache_dir=tmp_path / "c-changed")


def test_missing_path_is_one_clear_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["hash", str(tmp_path / "nope.onnx")])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert f"{tmp_path / 'nope.onnx'}: no such file or directory" in result.stderr
    assert "Traceback" not in result.output


def test_unsafe_archive_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(archive, "w") as tar:
        tar.add(payload, arcname="../escape")
    result = runner.invoke(app, ["hash", str(archive)])
    assert result.exit_code == 1
    assert "'..'" in result.stderr and "Traceback" not in result.output
