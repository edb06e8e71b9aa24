"""`mlms operator` as a subprocess for the cluster tests (the fixtures that start it are in
conftest.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from mlmodelscope.devcluster.cluster import Cluster


class OperatorProcess:
    """`mlms operator --standalone` (or with peering) as a subprocess, stopped by PID."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        log: Path,
        env: dict[str, str],
        args: list[str],
        standalone: bool = True,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log = log
        self.env = env
        self.args = args
        self.standalone = standalone
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLMS_OPERATOR_")}
        env.update(
            KUBECONFIG=str(self.cluster.kubeconfig),
            MLMS_OPERATOR_NAMESPACES=self.namespace,
            MLMS_OPERATOR_METRICS_PORT="0",  # several operators may run on this machine
            PYTHONUNBUFFERED="1",
        )
        env.update(self.env)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    *("-m", "mlmodelscope", "operator"),
                    *(["--standalone"] if self.standalone else []),
                    *self.args,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as when a node dies under the operator pod."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
