"""A real S3-compatible server for the s3:// tests, in its own process on a free loopback port.

It is moto's S3 and IAM behind moto's HTTP server (``python -m moto.server``, from the dev
extra), spoken to over HTTP with SigV4 by the same boto3 the agent uses. Credentials are
enforced: the first :data:`BOOTSTRAP_REQUESTS` requests may be unsigned, and they create an IAM
user with an access key and an ``s3:*`` policy; every later request must be signed with that
key, so a wrong key ends in ``InvalidAccessKeyId`` or ``SignatureDoesNotMatch`` as on AWS or
MinIO. The server is stopped by PID (SIGTERM, then SIGKILL) and its log kept in ``workdir``.

Why not MinIO, built from its Go module like Jaeger and Helm: ``go install
github.com/minio/minio@<pseudo-version>`` works (its go.mod has no replace directive), but a cold
build took 22 minutes on the 2-core CI machine next to the control-plane build, for a 112 MB
binary and ~1 GB of Go build cache: more than the whole s3:// suite is worth (and its
``RELEASE.*`` tags are not semver, so a pin would be a pseudo-version).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

BOOTSTRAP_REQUESTS = 3
"""Unsigned requests moto allows (``INITIAL_NO_AUTH_ACTION_COUNT``): create_user,
create_access_key, put_user_policy."""
INSTALL_HINT = "pip install -c constraints.txt -e '.[dev,s3]'"
REGION = "us-east-1"
POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


START_TIMEOUT_S = 60.0


def _die_with_parent() -> None:
    """Linux: SIGTERM the server if the test process dies without tearing down (a crash)."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class S3Server:
    """moto's server with IAM-checked credentials; ``secret_data`` is what a Kubernetes Secret
    for ``spec.model.credentialsSecretRef`` would hold to reach it."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "moto-s3.log"
        cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(BOOTSTRAP_REQUESTS)}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                cmd,
                cwd=workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # sets one signal: safe before exec
            )
        try:
            self._wait_ready()
            self.access_key_id, self.secret_access_key = self._bootstrap()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                log = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"moto server exited with {self.process.returncode}:\n{log}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, wait, then SIGKILL: by PID, never by name."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout_s)

    def _bootstrap(self) -> tuple[str, str]:
        """The IAM user all tests use, created with the unsigned requests; then a check that
        the server has started refusing unknown keys."""
        import boto3
        import botocore.exceptions

        unsigned = {"aws_access_key_id": "bootstrap", "aws_secret_access_key": "bootstrap"}
        iam = boto3.client("iam", region_name=REGION, endpoint_url=self.endpoint, **unsigned)
        iam.create_user(UserName="mlms-agent")
        key = iam.create_access_key(UserName="mlms-agent")["AccessKey"]
        iam.put_user_policy(
            UserName="mlms-agent", PolicyName="read-models", PolicyDocument=json.dumps(POLICY)
        )
        try:
            self.client(**unsigned).list_buckets()
        except botocore.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] == "InvalidAccessKeyId":
                return str(key["AccessKeyId"]), str(key["SecretAccessKey"])
            raise
        raise RuntimeError("moto accepted an unknown access key: credentials are not enforced")

    @property
    def secret_data(self) -> dict[str, str]:
        """The keys of a Secret that reaches this server (``stringData``)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
        }

    def client(self, **credentials: str) -> Any:
        """A boto3 S3 client for the test's own uploads (the agent builds its own)."""
        import boto3
        from botocore.config import Config

        keys = credentials or {
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
        }
        return boto3.client(
            "s3",
            region_name=REGION,
            endpoint_url=self.endpoint,
            config=Config(s3={"addressing_style": "path"}),
            **keys,
        )

    def new_bucket(self, prefix: str = "models") -> str:
        """A fresh bucket, so tests sharing the server never see each other's objects."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> str:
        """Upload ``data``; returns its ``s3://`` URI."""
        self.client().put_object(Bucket=bucket, Key=key, Body=data)
        return f"s3://{bucket}/{key}"


def isolated_aws_environment(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """No AWS settings from the machine: no profile, config or credentials file, no instance
    metadata lookups (they would leave the loopback), no proxy."""
    for var in list(os.environ):
        if var.startswith("AWS_") or var.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "no-aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("MLMS_SECRET_DIR", str(home / "no-secret"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("HOME", str(home))


@contextlib.contextmanager
def running_s3_server() -> Iterator[S3Server]:
    """Start the server, or skip (a failure under MLMS_STRICT_TESTS=1) when moto or boto3 is
    not installed."""
    for module in ("moto", "boto3", "flask"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed, so no S3 server for the tests: {INSTALL_HINT}")
    workdir = Path(tempfile.mkdtemp(prefix="mlms-s3-"))
    server = S3Server(workdir)
    try:
        yield server
    finally:
        server.stop()
