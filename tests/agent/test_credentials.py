"""Which values of a run the agent treats as credentials: the spec's URI parts, the AWS
variables, and every key of the mounted Secret except the settings."""

from __future__ import annotations

from pathlib import Path

from mlmodelscope.agent.credentials import evaluation_secrets, folder_secrets


def test_every_key_of_a_mounted_secret_is_a_credential_except_the_settings(
    tmp_path: Path,
) -> None:
    """Laid out as the kubelet mounts a Secret: files behind ``..data`` links."""
    data = tmp_path / "..2026_11_26_00_00_00.1"
    data.mkdir()
    values = {
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI\n",
        "HF_TOKEN": "hf_abcdef",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": "http://minio:pw-minio@minio.storage:9000",
    }
    for key, value in values.items():
        (data / key).write_text(value)
        (tmp_path / key).symlink_to(Path("..data") / key)
    (tmp_path / "..data").symlink_to(data.name)
    found = folder_secrets(tmp_path)
    assert {"wJalrXUtnFEMI\n", "hf_abcdef", "pw-minio"} <= found
    assert "us-east-1" not in found and not any("minio.storage" in v for v in found)
    assert folder_secrets(tmp_path / "missing") == set()


def test_a_runs_secrets_come_from_its_spec_its_environment_and_its_secret(
    tmp_path: Path,
) -> None:
    spec = {"model": {"uri": "https://alice:pw-alice@h/m.onnx?sig=s1gnature"}}
    environ = {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SESSION_TOKEN": "FwoGZX",
        "AWS_ENDPOINT_URL": "http://u:pw-endpoint@h:9000",
        "HOME": "/root",
        "MLMS_SECRET_DIR": str(tmp_path),
    }
    (tmp_path / "EXTRA").write_text("extra-value")
    found = evaluation_secrets(spec, environ)
    expected = {"pw-alice", "s1gnature", "AKIAEXAMPLE", "FwoGZX", "pw-endpoint", "extra-value"}
    assert expected <= found
    assert "/root" not in found
