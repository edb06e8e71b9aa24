"""pytest fixture: a real PostgreSQL per test session (Debian's ``postgresql`` package).

Register with ``pytest_plugins = ["mlmodelscope.devtools.postgres"]``. ``initdb`` writes a
cluster into a temporary folder and ``postgres`` serves it on a free loopback port (unix socket
in the same folder, trust authentication, fsync off: test data only). PostgreSQL refuses to run
as root, so under root both run as the ``postgres`` system user the package creates, owning the
folder. The server is a :class:`~mlmodelscope.devtools.telemetry_servers.Server`, stopped by
PID at teardown (SIGINT: fast shutdown, then SIGKILL).
``postgresql.create_database()`` gives each test its own empty database. ``stop()`` then
``start()`` takes the same server down and brings it back (same data folder and port), for
tests of a database that goes away.

Works without pytest too (``PostgreSQL(workdir, find_bin_dir())``, then ``stop()``).
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
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlmodelscope.devtools.telemetry_servers import Server, free_port, wait_until

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


def _run_as() -> str | None:
    """``postgres`` when we are root (PostgreSQL refuses root), else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise RuntimeError("running as root and no `postgres` user: install postgresql") from exc
    return "postgres"


class PostgreSQL(Server):
    """A throwaway PostgreSQL cluster and server; ``url`` is a SQLAlchemy URL (psycopg 3)."""

    def __init__(self, workdir: Path, bin_dir: Path) -> None:
        self.user = _run_as()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(workdir, entry.pw_uid, entry.pw_gid)
        self.port = free_port()
        data = workdir / "data"
        self._call(
            [bin_dir / "initdb", "-D", data, "-U", USER, "-A", "trust", "-E", "UTF8", "--no-sync"],
            workdir,
        )
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
        self.workdir = workdir
        self._cmd = cmd
        self._ready_cmd = [
            str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)
        ]  # fmt: skip
        self._starts = 0
        self.url = self.url_for("postgres")
        self.start()

    def start(self) -> None:
        """Start the server (again, after :meth:`stop`: same data folder, same port) and wait
        until it accepts connections. The log of an earlier start is kept as
        ``postgres.<n>.log``."""
        if self._starts and self.process.poll() is None:
            return
        if self._starts:
            self.log_path.rename(self.workdir / f"postgres.{self._starts}.log")
        self._starts += 1
        # SIGINT is PostgreSQL's fast shutdown: it disconnects clients instead of waiting.
        Server.__init__(
            self, "postgres", self._cmd, self.workdir, user=self.user, stop_signal=signal.SIGINT
        )
        wait_until(lambda: self._ready(self._ready_cmd), START_TIMEOUT_S, "postgresql")

    def is_running(self) -> bool:
        return self.process.poll() is None

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def _call(self, cmd: list[str | Path], workdir: Path) -> None:
        done = subprocess.run(
            [str(c) for c in cmd],
            cwd=workdir,
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
        self.check_alive()
        return subprocess.run(cmd, check=False).returncode == 0

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = name or f"test_{uuid.uuid4().hex[:12]}"
        dsn = f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url_for(name)


@contextlib.contextmanager
def running_postgresql() -> Iterator[PostgreSQL]:
    """A started PostgreSQL in a fresh folder, stopped afterwards (its log kept); skips the
    test when the Debian package is missing."""
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


@pytest.fixture(scope="session")
def postgresql() -> Iterator[PostgreSQL]:
    """A running PostgreSQL (Debian package) on a free loopback port for the whole session;
    ``postgresql.create_database()`` returns the URL of a fresh database."""
    with running_postgresql() as server:
        yield server


@pytest.fixture
def private_postgresql() -> Iterator[PostgreSQL]:
    """A PostgreSQL of one test alone (the session's is shared), so the test may stop and
    start it."""
    with running_postgresql() as server:
        yield server
