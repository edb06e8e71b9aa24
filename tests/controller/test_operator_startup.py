"""An operator that cannot start says why in one line and exits 2, never with a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def start(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MLMS_OPERATOR_", "KUBE"))}
    return subprocess.run(
        [sys.executable, "-m", "mlmodelscope", "operator", "--standalone"],
        env={**clean, "KUBECONFIG": str(tmp_path / "missing"), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_no_credentials_is_one_line_naming_kubeconfig(tmp_path: Path) -> None:
    done = start(tmp_path)
    assert done.returncode == 2
    assert "KUBECONFIG" in done.stderr and "Traceback" not in done.stderr


def test_a_taken_metrics_port_names_the_setting(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = start(tmp_path, KUBECONFIG=str(kubeconfig), MLMS_OPERATOR_METRICS_PORT=str(port))
    assert done.returncode == 2, done.stderr
    assert "MLMS_OPERATOR_METRICS_PORT" in done.stderr and "Traceback" not in done.stderr
