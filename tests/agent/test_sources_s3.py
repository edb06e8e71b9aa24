"""s3:// model sources against a real S3-compatible server (tests/agent/s3_server.py: moto's S3
and IAM over HTTP, credentials enforced) with the real digits ONNX model: download, digest pin,
cache, the errors a user meets, and a whole `mlms run` whose credentials reach the agent the way
the operator's Job passes them. Nothing here leaves 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from model_sources import cached_files, model
from s3_server import S3Server, free_port, isolated_aws_environment, running_s3_server

from mlmodelscope.agent.digits import MODEL_FILES, digits_evaluation
from mlmodelscope.agent.sources import (
    FetchError,
    MissingDependencyError,
    directory_sha256,
    fetch_model,
    fetch_uri,
    file_sha256,
)
from mlmodelscope.spec import load_evaluations
from mlmodelscope.spec.base import SpecError

KEY = "digits/digits.onnx"
CREDENTIALS = "spec.model.credentialsSecretRef"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


@pytest.fixture(scope="module")
def onnx_model(digits_models: Path) -> Path:
    return digits_models / MODEL_FILES["onnx"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh model cache and an environment with no AWS settings of the machine's."""
    isolated_aws_environment(monkeypatch, tmp_path / "home")
    root = tmp_path / "cache"
    monkeypatch.setenv("MLMS_CACHE_DIR", str(root))
    return root


@pytest.fixture
def job_env(s3: S3Server, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The Secret's keys as environment variables, as the Job's ``envFrom`` gives them."""
    for name, value in s3.secret_data.items():
        monkeypatch.setenv(name, value)
    return s3.secret_data


@pytest.fixture
def uploaded(s3: S3Server, onnx_model: Path) -> str:
    """The digits ONNX model in a fresh bucket; its s3:// URI."""
    return s3.put(s3.new_bucket(), KEY, onnx_model.read_bytes())


# -------------------------------------------------------------------------- download and pin


def test_pinned_s3_model_is_downloaded_verified_and_cached(
    s3: S3Server, job_env: dict[str, str], cache: Path, uploaded: str, onnx_model: Path
) -> None:
    digest = file_sha256(onnx_model)
    first = fetch_model(model(uploaded, sha256=digest))
    assert (first.source, first.cached, first.sha256) == ("s3", False, digest)
    assert first.path.read_bytes() == onnx_model.read_bytes()
    assert first.path.is_relative_to(cache / "models" / "sha256" / digest)

    # A pinned model is served from the cache without asking the server: gone from the bucket,
    # it is still there.
    bucket, _, key = uploaded.removeprefix("s3://").partition("/")
    s3.client().delete_object(Bucket=bucket, Key=key)
    again = fetch_model(model(uploaded, sha256=digest))
    assert again.cached and again.path == first.path


def test_unpinned_s3_model_is_cached_by_uri(job_env: dict[str, str], uploaded: str) -> None:
    first = fetch_model(model(uploaded))
    second = fetch_model(model(uploaded))
    assert not first.cached and second.cached and second.sha256 == first.sha256


def test_s3_sha256_mismatch_leaves_nothing_in_cache(
    job_env: dict[str, str], cache: Path, uploaded: str, onnx_model: Path
) -> None:
    with pytest.raises(SpecError) as err:
        fetch_model(model(uploaded, sha256="c" * 64))
    assert err.value.field == "spec.model.sha256"
    assert file_sha256(onnx_model) in str(err.value)
    assert cached_files(cache) == []


def test_s3_tar_gz_directory_model_is_unpacked(
    s3: S3Server, job_env: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "saved_model"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"graph")
    (folder / "variables" / "variables.index").write_bytes(b"index")
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        tar.add(folder, arcname="saved_model")
    uri = s3.put(s3.new_bucket(), "tf/saved_model.tar.gz", data.getvalue())
    fetched = fetch_model(model(uri, sha256=directory_sha256(folder), fmt="savedmodel"))
    assert fetched.path.is_dir() and (fetched.path / "saved_model.pb").read_bytes() == b"graph"
    assert fetched.sha256 == directory_sha256(folder)


def test_dataset_files_come_from_s3_with_the_same_credentials(
    s3: S3Server, job_env: dict[str, str], cache: Path
) -> None:
    uri = s3.put(s3.new_bucket("data"), "digits/test.npz", b"npz-bytes")
    fetched = fetch_uri(uri, kind="datasets", uri_field="spec.dataset.uri")
    assert fetched.path.read_bytes() == b"npz-bytes"
    assert fetched.path.is_relative_to(cache / "datasets")


# ------------------------------------------------------------------------------- credentials


@pytest.mark.parametrize(
    ("override", "code"),
    [
        ({"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "SignatureDoesNotMatch"),
        ({"AWS_ACCESS_KEY_ID": "AKIAUNKNOWNKEY000000"}, "InvalidAccessKeyId"),
    ],
)
def test_wrong_credentials_name_the_secret_reference(
    job_env: dict[str, str],
    cache: Path,
    uploaded: str,
    monkeypatch: pytest.MonkeyPatch,
    override: dict[str, str],
    code: str,
) -> None:
    for name, value in override.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SpecError) as err:
        fetch_model(model(uploaded))
    assert err.value.field == CREDENTIALS
    assert code in str(err.value) and uploaded in str(err.value)
    assert cached_files(cache) == []


def test_no_credentials_names_the_secret_reference(
    s3: S3Server, cache: Path, uploaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3.endpoint)
    with pytest.raises(SpecError) as err:
        fetch_model(model(uploaded))
    assert err.value.field == CREDENTIALS
    assert "no AWS credentials" in str(err.value)


def test_credentials_from_a_mounted_secret_and_the_generic_endpoint(
    s3: S3Server, cache: Path, uploaded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Secret mounted as files (a container started by hand), and AWS_ENDPOINT_URL, which
    # applies to every AWS service, instead of the S3-only variable.
    secret = tmp_path / "secret"
    secret.mkdir()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        (secret / name).write_text(s3.secret_data[name] + "\n")
    monkeypatch.setenv("MLMS_SECRET_DIR", str(secret))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    assert fetch_model(model(uploaded)).path.stat().st_size > 0


# ------------------------------------------------------------------------------ wrong places


def test_missing_key_names_the_uri(s3: S3Server, job_env: dict[str, str], uploaded: str) -> None:
    bucket = uploaded.removeprefix("s3://").partition("/")[0]
    with pytest.raises(SpecError) as err:
        fetch_model(model(f"s3://{bucket}/digits/missing.onnx"))
    assert err.value.field == "spec.model.uri"
    assert "NoSuchKey" in str(err.value) and s3.endpoint in str(err.value)
    with pytest.raises(SpecError, match="NoSuchBucket") as err:
        fetch_model(model("s3://no-such-bucket-mlms/digits.onnx"))
    assert err.value.field == "spec.model.uri"


def test_unreachable_endpoint_is_a_fetch_error(
    job_env: dict[str, str], uploaded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(FetchError, match=r"127\.0\.0\.1"):
        fetch_model(model(uploaded))


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("AWS_ENDPOINT_URL_S3", "minio:9000", "not an http:// or https:// URL"),
        ("MLMS_S3_ADDRESSING_STYLE", "sideways", "expected path, virtual or auto"),
    ],
)
def test_bad_s3_settings_name_the_secret_reference(
    job_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, name: str, value: str, words: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SpecError, match=words) as err:
        fetch_model(model("s3://bucket/digits.onnx"))
    assert err.value.field == CREDENTIALS


def test_s3_prefix_is_refused(cache: Path) -> None:
    with pytest.raises(SpecError, match=r"\.tar\.gz") as err:
        fetch_model(model("s3://bucket/models/", fmt="savedmodel"))
    assert err.value.field == "spec.model.uri"


def test_s3_without_boto3_says_which_extra(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(MissingDependencyError, match=r"mlmodelscope\[s3\]"):
        fetch_model(model("s3://bucket/models/m.onnx"))


# -------------------------------------------------------------------------------- end to end


def kubelet_env(container: dict[str, Any], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """What the kubelet puts into the container's environment from its ``envFrom`` Secrets."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(secrets[source["secretRef"]["name"]])
    return env


@pytest.mark.frameworks
def test_mlms_run_evaluates_an_s3_model_with_the_jobs_credentials(
    s3: S3Server, cache: Path, uploaded: str, onnx_model: Path, tmp_path: Path
) -> None:
    from mlmodelscope.controller.builders import build_job
    from mlmodelscope.controller.settings import OperatorSettings

    digest = file_sha256(onnx_model)
    scenario = {"batchSizes": [1, 8], "warmup": 3, "minQueryCount": 20, "minDuration": "20ms"}
    doc = digits_evaluation(
        onnx_model.parent,
        "onnxruntime",
        "digits-s3",
        model={"uri": uploaded, "sha256": digest, "credentialsSecretRef": {"name": "s3-creds"}},
        scenario=scenario,
    )
    doc["metadata"]["uid"] = "00000000-0000-4000-8000-000000000053"  # as stored by the apiserver
    spec = tmp_path / "digits-s3.yaml"
    spec.write_text(yaml.safe_dump(doc))

    # The Job the operator would create: its container names the Secret in envFrom and carries
    # no credentials of its own; the kubelet turns the Secret's keys into variables.
    [loaded] = load_evaluations(spec)
    job = build_job(loaded.evaluation, OperatorSettings.from_env({}))
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert "AWS_" not in json.dumps(container.get("env", []))
    env = {**os.environ, **kubelet_env(container, {"s3-creds": s3.secret_data})}

    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "mlmodelscope", "run", str(spec), "--output", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "digits-s3.json").read_text())
    assert result["status"] == "Succeeded"
    assert result["model"]["uri"] == uploaded
    assert (result["model"]["source"], result["model"]["sha256"]) == ("s3", digest)
    assert result["model"]["sha256_verified"] and not result["model"]["cached"]
    assert result["accuracy"]["top1"] >= 0.95
    assert [m["batch_size"] for m in result["measurements"]] == [1, 8]
    for m in result["measurements"]:
        assert m["latency"]["count"] >= 20 and m["latency"]["percentiles_s"]["p50"] > 0
