"""pytest fixture: a real PostgreSQL per test session (Debian's ``postgresql`` package).

Register with ``pytest_plugins = ["mlmodelscope.devtools.postgres"]``. ``initdb`` writes a
cluster into a temporary folder and ``postgres`` serves it on a free loopback port (unix socket
in the same folder, trust authentication, fsync off: test data only). PostgreSQL refuses to run
as root, so under root both run as the ``postgres`` system user the package creates, owning the
folder. The server is stopped by PID at teardown (SIGINT: fast shutdown, then SIGKILL).
``postgresql.create_database()`` gives each test its own empty database.

Works without pytest too (``PostgreSQL(workdir)``, then ``stop()``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mlmodelscope.devtools.telemetry_servers import free_port, wait_until

START_TIMEOUT_S = 60.0
APT_HINT = "apt-get install -y postgresql"
USER = "mlms"


def find_bin_dir() -> Path | None:
    """The folder with initdb and postgres: on PATH, else Debian's newest
    /usr/lib/postgresql/<version>/bin."""
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return Path(initdb).resolve().parent
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: [int(n) for n in re.findall(r"\d+", p.parts[-3])],
    )
    return found[-1].parent if found else None


def _death_signal() -> Callable[[], None]:
    """A preexec_fn: SIGINT the server if the test process dies without tearing down. libc is
    loaded here, in the parent: the child has already dropped root when the function runs."""
    import ctypes
    import ctypes.util

    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").prctl
    except (OSError, AttributeError):
        return lambda: None
    return lambda: prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def _run_as() -> str | None:
    """``postgres`` when we are root (PostgreSQL refuses root), else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise RuntimeError("running as root and no `postgres` user: install postgresql") from exc
    return "postgres"


class PostgreSQL:
    """A throwaway PostgreSQL cluster and server; ``url`` is a SQLAlchemy URL (psycopg 3)."""

    def __init__(self, workdir: Path, bin_dir: Path) -> None:
        self.workdir = workdir
        self.user = _run_as()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(workdir, entry.pw_uid, entry.pw_gid)
        self.port = free_port()
        self.log_path = workdir / "postgres.log"
        data = workdir / "data"
        self._call(
            [bin_dir / "initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync"]
        )
        self._log = self.log_path.open("wb")
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(workdir),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        cmd = [str(bin_dir / "postgres"), "-D", str(data)]
        for key, value in settings.items():
            cmd += ["-c", f"{key}={value}"]
        self.process = subprocess.Popen(
            cmd,
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            user=self.user,
            group=self.user,
            extra_groups=[] if self.user else None,
            preexec_fn=_death_signal(),  # runs after the uid change, so the signal stays set
        )
        self.pid = self.process.pid
        self.url = self.url_for("postgres")
        ready = [str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        wait_until(lambda: self._ready(ready), START_TIMEOUT_S, "postgresql")

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def _call(self, cmd: list[str | Path]) -> None:
        done = subprocess.run(
            [str(c) for c in cmd],
            cwd=self.workdir,
            capture_output=True,
            text=True,
            user=self.user,
            group=self.user,
            extra_groups=[] if self.user else None,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def _ready(self, cmd: list[str]) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"postgres exited with {self.process.returncode}:\n{self.log_tail()}"
            )
        return subprocess.run(cmd, check=False).returncode == 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = name or f"test_{uuid.uuid4().hex[:12]}"
        dsn = f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url_for(name)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGINT (fast shutdown: disconnects clients), wait, then SIGKILL: by PID."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGINT)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout_s)
        self._log.close()


@pytest.fixture(scope="session")
def postgresql() -> Iterator[PostgreSQL]:
    """A running PostgreSQL (Debian package) on a free loopback port for the whole session;
    ``postgresql.create_database()`` returns the URL of a fresh database."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip(f"PostgreSQL is not installed; install it with: {APT_HINT}")
    workdir = Path(tempfile.mkdtemp(prefix="mlms-postgres-"))
    server = PostgreSQL(workdir, bin_dir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir / "data", ignore_errors=True)  # keep the log
