"""The chart's bundled PostgreSQL image (images/postgresql.Dockerfile), built by
``python -m mlmodelscope.devtools.images build --only postgresql`` and run in the Docker
engine as the chart runs it: UID/GID 999, a read-only root filesystem, every capability
dropped, no privilege escalation, the chart's environment (POSTGRES_USER, POSTGRES_DB,
POSTGRES_PASSWORD, PGDATA in a subfolder of the data volume) and a writable socket folder.

The engine has no bridge network (containers run with ``--network none``), so the host reaches
the server through its Unix socket: the socket folder is a host folder mounted at
/var/run/postgresql. TCP, with its password, is tried from inside the container
(``docker exec psql -h 127.0.0.1``), where the chart's probes and the operator's connections
arrive over TCP as well.

Without an engine the fixtures skip; under MLMS_STRICT_TESTS=1 (make test) such a skip fails.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from alembic.script import ScriptDirectory

from mlmodelscope.agent import container as docker_runtime
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.devtools import images
from mlmodelscope.store import open_store
from mlmodelscope.store.store import alembic_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

USER = "mlmodelscope"
DATABASE = "mlmodelscope"
PASSWORD = "trial-Pw.1"
DATA = "/var/lib/postgresql/data"
PGDATA = f"{DATA}/pgdata"  # the chart's: the volume's root may hold lost+found
SOCKET_DIR = "/var/run/postgresql"
CHART_ENV = {
    "POSTGRES_USER": USER,
    "POSTGRES_DB": DATABASE,
    "POSTGRES_PASSWORD": PASSWORD,
    "PGDATA": PGDATA,
}
"""What templates/postgresql.yaml passes (the password comes from the release's Secret)."""
START_TIMEOUT_S = 60.0


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def image(docker_host: str) -> images.Built:
    """The image, built (or found up to date) as hack/images.sh builds it, alone."""
    try:
        [built] = images.build(["postgresql"])
    except images.ImageBuildError as exc:
        pytest.skip(f"cannot build the PostgreSQL image here: {exc}")
    return built


@pytest.fixture(scope="module")
def client(docker_host: str) -> Any:
    return docker_runtime.connect()


@pytest.fixture
def document(digits_models: Path, tmp_path: Path) -> dict[str, Any]:
    """A real result document: the digits CNN evaluated by the agent in ONNX Runtime, with
    quick scenario settings."""
    from mlmodelscope.agent.digits import digits_evaluation
    from mlmodelscope.agent.runner import evaluate
    from mlmodelscope.spec import load_evaluations

    scenario = {"batchSizes": [1], "warmup": 2, "minQueryCount": 10, "minDuration": "10ms"}
    doc = digits_evaluation(digits_models, "onnxruntime", "pg-image", scenario=scenario)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(doc))
    [evaluation] = load_evaluations(tmp_path / "spec.yaml")
    evaluate(evaluation, output=tmp_path / "result.json")
    loaded: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return loaded


@dataclass
class Volumes:
    """Host folders mounted as the chart mounts its volumes: ``data`` at the data volume's
    mount point, ``run`` at the socket folder (the emptyDir). Short paths under /tmp: a Unix
    socket's path is limited to 107 bytes."""

    data: Path
    run: Path

    @property
    def binds(self) -> dict[str, dict[str, str]]:
        return {
            str(self.data): {"bind": DATA, "mode": "rw"},
            str(self.run): {"bind": SOCKET_DIR, "mode": "rw"},
        }

    def url(self) -> str:
        """The store's URL through the socket (the password is sent; the socket trusts)."""
        return f"postgresql+psycopg://{USER}:{PASSWORD}@/{DATABASE}?host={self.run}"


@pytest.fixture
def volumes() -> Iterator[Volumes]:
    root = Path(tempfile.mkdtemp(prefix="mlms-pg-"))
    made = Volumes(root / "data", root / "run")
    for folder in (made.data, made.run):
        folder.mkdir()
        folder.chmod(0o777)  # as the dev cluster's hostPath volumes: UID 999 may write
    yield made
    shutil.rmtree(root, ignore_errors=True)


class Server:
    """One container of the image, run as the chart's StatefulSet runs its pod."""

    def __init__(self, client: Any, image: str, volumes: Volumes, env: dict[str, str]) -> None:
        self.volumes = volumes
        self.box = client.containers.run(
            image,
            detach=True,
            name=f"mlms-pg-test-{uuid.uuid4().hex[:8]}",
            user="999:999",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            network_mode="none",
            environment=env,
            volumes=volumes.binds,
        )

    def logs(self) -> str:
        return str(self.box.logs().decode(errors="replace"))

    def exited(self) -> int | None:
        self.box.reload()
        if self.box.status in ("exited", "dead"):
            return int(self.box.attrs["State"]["ExitCode"])
        return None

    def accepts(self) -> bool:
        """The server answers a query through the socket (what pg_isready checks, and more)."""
        if self.exited() is not None:
            pytest.fail(f"the server exited ({self.exited()}):\n{self.logs()}")
        try:
            with psycopg.connect(host=str(self.volumes.run), user=USER, dbname=DATABASE) as conn:
                return conn.execute("select 1").fetchone() == (1,)
        except psycopg.OperationalError:
            return False

    def wait_ready(self) -> None:
        wait_for("PostgreSQL accepting connections", self.accepts, START_TIMEOUT_S, self.logs)

    def exec(self, *cmd: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        code, out = self.box.exec_run(list(cmd), environment=env or {}, user="999:999")
        return int(code), out.decode(errors="replace")

    def psql_tcp(self, query: str, password: str | None) -> tuple[int, str]:
        """``psql -h 127.0.0.1`` inside the container: over TCP, as the operator connects."""
        env = {"PGPASSWORD": password} if password is not None else {}
        cmd = ["psql", "-h", "127.0.0.1", "-U", USER, "-d", DATABASE, "-w", "-tAc", query]
        return self.exec(*cmd, env=env)

    def stop(self) -> int:
        """Stop as Kubernetes does (the image's STOPSIGNAL, SIGINT: fast shutdown); the exit
        code."""
        self.box.stop(timeout=30)
        code = self.exited()
        assert code is not None
        return code

    def remove(self) -> None:
        self.box.remove(v=True, force=True)


class Servers:
    """Starts Servers of the image; the ``servers`` fixture removes them at teardown."""

    def __init__(self, client: Any, image: images.Built) -> None:
        self.client = client
        self.image = image
        self.started: list[Server] = []

    def start(self, volumes: Volumes, **env: str) -> Server:
        server = Server(self.client, self.image.tag, volumes, env)
        self.started.append(server)
        return server

    def run_once(self, volumes: Volumes, **env: str) -> tuple[int, str]:
        """Run the image to its end as the chart would; its exit code and output."""
        box = self.client.containers.run(
            self.image.tag,
            detach=True,
            user="999:999",
            read_only=True,
            cap_drop=["ALL"],
            network_mode="none",
            environment=env,
            volumes=volumes.binds,
        )
        try:
            code = int(box.wait(timeout=START_TIMEOUT_S)["StatusCode"])
            return code, box.logs().decode(errors="replace")
        finally:
            box.remove(v=True, force=True)


@pytest.fixture
def servers(client: Any, image: images.Built) -> Iterator[Servers]:
    made = Servers(client, image)
    yield made
    for server in made.started:
        server.remove()


# --------------------------------------------------------------------------------- image


def test_image_is_debian_postgresql_15_as_999_within_its_size_target(
    image: images.Built, client: Any
) -> None:
    assert not image.over, f"{image.size / 1e6:.0f} MB, over {image.target_size}"
    config = client.images.get(image.tag).attrs["Config"]
    assert config["User"] == "999:999"
    assert config["Entrypoint"] == ["postgresql-entrypoint"] and config["Cmd"] == ["postgres"]
    assert config["StopSignal"] == "SIGINT"
    assert set(config["Volumes"]) == {DATA, SOCKET_DIR}
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "mlmodelscope-postgresql"
    assert labels["org.opencontainers.image.base.name"] == image.base
    assert labels[images.INPUTS_LABEL]
    script = (
        "postgres --version; id -u postgres; id -g postgres; "
        "command -v psql; command -v pg_isready; "
        "find / -xdev \\( -name 'ssl-cert-snakeoil*' -o -name 'llvmjit*' -o -name 'libLLVM*' "
        "\\) | wc -l; "
        "grep -E '^(listen_addresses|jit) ' /usr/share/postgresql/15/postgresql.conf.sample"
    )
    code, out = run_shell(client, image, script)  # as root: find reads every folder
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("postgres (PostgreSQL) 15.") and "Debian" in lines[0], out
    assert lines[1:3] == ["999", "999"], out
    bin_dir = "/usr/lib/postgresql/15/bin"  # first on PATH: Debian's wrappers need Perl
    assert lines[3:5] == [f"{bin_dir}/psql", f"{bin_dir}/pg_isready"], out
    assert lines[5] == "0", out  # no snakeoil key baked in, no JIT provider, no LLVM
    assert lines[6:] == ["listen_addresses = '*'", "jit = off"], out


def run_shell(client: Any, image: images.Built, script: str) -> tuple[int, str]:
    box = client.containers.create(
        image.tag, ["-c", script], entrypoint=["sh"], user="0:0", network_mode="none",
        read_only=True,
    )  # fmt: skip
    try:
        box.start()
        code = int(box.wait(timeout=60)["StatusCode"])
        return code, box.logs().decode(errors="replace")
    finally:
        box.remove(v=True, force=True)


# ------------------------------------------------------------------------------ running


@pytest.mark.frameworks
def test_first_start_initialises_as_999_and_the_store_records_runs_across_a_restart(
    volumes: Volumes, servers: Servers, document: dict[str, Any]
) -> None:
    first = servers.start(volumes, **CHART_ENV)
    first.wait_ready()
    logs = first.logs()
    assert f"initialising {PGDATA} for user {USER}" in logs, logs
    assert f"created database {DATABASE}" in logs, logs
    assert 'listening on IPv4 address "0.0.0.0", port 5432' in logs, logs
    # initdb ran as 999: the cluster's files are 999's, and the folder is the owner's alone
    pgdata = volumes.data / "pgdata"
    assert (pgdata.stat().st_uid, pgdata.stat().st_gid) == (999, 999)
    assert (pgdata / "PG_VERSION").read_text().strip() == "15"
    assert pgdata.stat().st_mode & 0o777 == 0o700
    assert first.exec("id", "-u") == (0, "999\n")

    # the chart's probe, as it runs it
    code, out = first.exec("pg_isready", "-h", "127.0.0.1", "-U", USER, "-d", DATABASE)
    assert code == 0 and "accepting connections" in out, out

    # the database is the user's, and the user is initdb's superuser
    code, out = first.psql_tcp(
        "select pg_get_userbyid(datdba), current_setting('server_encoding') from pg_database "
        "where datname = current_database()",
        PASSWORD,
    )
    assert (code, out.strip()) == (0, f"{USER}|UTF8"), out

    # the store: its migrations, then a run recorded and read back
    with open_store(volumes.url()) as store:
        assert store.record(document) is True
        assert store.get(document["run_id"]) == document
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    code, out = first.psql_tcp("select version_num from alembic_version", PASSWORD)
    assert (code, out.strip()) == (0, head), out

    # a restart on the same PGDATA: no initdb, the run is still there. Before it the folder is
    # opened to the group, as a volume's fsGroup does, which the server alone would refuse.
    code, out = first.exec("chmod", "2770", PGDATA)
    assert code == 0, out
    assert first.stop() == 0
    assert "database system is shut down" in first.logs()
    second = servers.start(volumes, **{**CHART_ENV, "POSTGRES_PASSWORD": ""})
    second.wait_ready()
    assert "initialising" not in second.logs(), second.logs()
    with open_store(volumes.url()) as store:
        assert store.get(document["run_id"]) == document
        assert [r.run_id for r in store.list_runs()] == [document["run_id"]]


def test_tcp_connections_need_the_password(volumes: Volumes, servers: Servers) -> None:
    server = servers.start(volumes, **CHART_ENV)
    server.wait_ready()
    code, out = server.psql_tcp("select current_user", PASSWORD)
    assert (code, out.strip()) == (0, USER), out
    code, out = server.psql_tcp("select current_user", "wrong")
    assert code != 0 and f'password authentication failed for user "{USER}"' in out, out
    code, out = server.psql_tcp("select current_user", None)
    assert code != 0 and "no password supplied" in out, out
    # every TCP rule, loopback included, asks for the password; the socket (this pod's alone)
    # trusts
    code, out = server.psql_tcp("select type, auth_method from pg_hba_file_rules", PASSWORD)
    rules = {tuple(line.split("|")) for line in out.split()}
    assert rules == {("local", "trust"), ("host", "scram-sha-256")}, out
    code, out = server.psql_tcp(
        "select rolpassword like 'SCRAM-SHA-256$%' from pg_authid", PASSWORD
    )
    assert out.split() == ["t"], out


def test_an_empty_pgdata_without_a_password_is_a_clear_error(
    volumes: Volumes, servers: Servers
) -> None:
    env = {k: v for k, v in CHART_ENV.items() if k != "POSTGRES_PASSWORD"}
    code, out = servers.run_once(volumes, **env)
    assert code == 1, out
    assert "postgresql-entrypoint: error: POSTGRES_PASSWORD is empty or not set" in out, out
    assert f"user {USER} needs a password" in out, out
    assert not (volumes.data / "pgdata" / "PG_VERSION").exists()


def test_a_read_only_socket_folder_is_a_clear_error(volumes: Volumes, servers: Servers) -> None:
    """Without the chart's emptyDir the socket folder is on the read-only root: said so."""
    volumes.run.chmod(0o755)  # the test's user owns it: UID 999 cannot write there
    code, out = servers.run_once(volumes, **CHART_ENV)
    assert code == 1, out
    assert f"{SOCKET_DIR} is not writable by UID 999: mount a writable volume there" in out, out
