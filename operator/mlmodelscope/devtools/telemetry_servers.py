"""pytest fixtures: a real Prometheus, Pushgateway and Jaeger per test session.

Register with ``pytest_plugins = ["mlmodelscope.devtools.telemetry_servers"]``. Prometheus and the
Pushgateway are Debian's packages (``apt-get install prometheus prometheus-pushgateway``);
Jaeger is built from its pinned Go module (:mod:`mlmodelscope.devtools.jaeger`). Each server
listens on a free loopback port with a temporary data folder and is stopped by PID at teardown
(SIGTERM, then SIGKILL), even when tests fail; its log stays in the session's temp folder.

The server classes work without pytest too (the benchmarks use them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 60.0
SCRAPE_TIMING = ("scrape_interval", "scrape_timeout")
APT_HINT = "apt-get install -y prometheus prometheus-pushgateway"


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        data: bytes = response.read()
        return data


def http_post(url: str, data: bytes = b"", timeout_s: float = 5.0) -> bytes:
    request = urllib.request.Request(url, data=data, method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        out: bytes = response.read()
        return out


def wait_until(
    check: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last = exc
        time.sleep(interval_s)
    raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s" + (f": {last}" if last else ""))


def death_signal(sig: int) -> Callable[[], None]:
    """A preexec_fn: Linux sends ``sig`` to the server if the test process dies without
    tearing down (a crash). libc is loaded here, in the parent, so the child only makes one
    system call, which is safe before exec and after a change of user."""
    import ctypes
    import ctypes.util

    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").prctl
    except (OSError, AttributeError):
        return lambda: None
    return lambda: prctl(1, sig)  # PR_SET_PDEATHSIG


class Server:
    """One started process: stopped by PID, log kept in ``workdir``."""

    def __init__(
        self,
        name: str,
        cmd: Sequence[str],
        workdir: Path,
        env: dict[str, str] | None = None,
        *,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        """Start ``cmd`` in ``workdir``, as ``user`` when given (and we may switch to it);
        ``stop_signal`` ends it at :meth:`stop` and when the test process dies."""
        self.name = name
        self.workdir = workdir
        self.stop_signal = stop_signal
        self.log_path = workdir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            list(cmd),
            cwd=workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            user=user,
            group=user,
            extra_groups=[] if user else None,
            preexec_fn=death_signal(stop_signal),
        )
        self.pid = self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
            )

    def stop(self, timeout_s: float = 10.0) -> None:
        """The stop signal (SIGTERM unless told), wait, then SIGKILL: by PID, never by name."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, self.stop_signal)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.process.wait(timeout_s)
        self._log.close()


class Prometheus(Server):
    """Prometheus with a 1 s scrape interval; ``scrape`` adds a job and reloads the config."""

    def __init__(self, workdir: Path, binary: str = "prometheus") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.jobs: dict[str, dict[str, Any]] = {}
        self.config = workdir / "prometheus.yml"
        self._write_config()
        cmd = [
            binary,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]
        super().__init__("prometheus", cmd, workdir)
        wait_until(self._ready, START_TIMEOUT_S, "prometheus")

    def _ready(self) -> bool:
        self.check_alive()
        return http_get(f"{self.url}/-/ready").startswith(b"Prometheus")

    def _write_config(self) -> None:
        lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s", "scrape_configs:"]
        for job, cfg in self.jobs.items():
            lines += [
                f"  - job_name: {json.dumps(job)}",
                f"    honor_labels: {str(cfg['honor_labels']).lower()}",
                f"    metrics_path: {json.dumps(cfg['path'])}",
            ]
            lines += [f"    {key}: {cfg[key]}" for key in SCRAPE_TIMING if cfg.get(key)]
            lines += ["    static_configs:", f"      - targets: {json.dumps(cfg['targets'])}"]
        if not self.jobs:
            lines[-1] = "scrape_configs: []"
        self.config.write_text("\n".join(lines) + "\n")

    def scrape(
        self,
        job: str,
        address: str,
        *,
        honor_labels: bool = False,
        path: str = "/metrics",
        interval: str | None = None,
        timeout: str | None = None,
    ) -> None:
        """Scrape ``address`` (host:port) as ``job`` from now on; waits for the first scrape.

        Use ``honor_labels=True`` for a Pushgateway, so pushed job/instance labels win.
        ``interval`` and ``timeout`` (e.g. ``"2s"``) override the global 1 s for this job."""
        timing = {"scrape_interval": interval, "scrape_timeout": timeout}
        cfg = self.jobs.setdefault(
            job, {"targets": [], "honor_labels": honor_labels, "path": path, **timing}
        )
        if address not in cfg["targets"]:
            cfg["targets"].append(address)
        self._write_config()
        http_post(f"{self.url}/-/reload")

        def up() -> bool:
            data = json.loads(http_get(f"{self.url}/api/v1/targets?state=active"))
            return any(
                t["labels"].get("job") == job
                and t["scrapeUrl"].startswith(f"http://{address}")
                and t["health"] == "up"
                for t in data["data"]["activeTargets"]
            )

        wait_until(up, 30, f"prometheus scraping {address}")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query; raises ValueError with Prometheus' error text when it fails."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            data = json.loads(http_get(url))
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            raise ValueError(f"query {promql!r} failed: {exc.code} {body}") from exc
        if data.get("status") != "success":
            raise ValueError(f"query {promql!r} failed: {data}")
        result: list[dict[str, Any]] = data["data"]["result"]
        return result

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        timeout_s: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Query until ``predicate(result)`` holds (scrapes happen every second)."""
        box: list[list[dict[str, Any]]] = [[]]

        def check() -> bool:
            box[0] = self.query(promql)
            return predicate(box[0])

        wait_until(check, timeout_s, f"PromQL {promql!r}", interval_s=0.5)
        return box[0]


class Pushgateway(Server):
    """A Pushgateway without persistence."""

    def __init__(self, workdir: Path, binary: str = "prometheus-pushgateway") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.address = f"127.0.0.1:{self.port}"
        # Debian builds it with --persistence.file=/var/lib/prometheus/pushgateway.data: an
        # empty one keeps it in memory, so no group of an earlier session comes back.
        cmd = [
            binary,
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--persistence.file=",
            "--log.level=warn",
        ]
        super().__init__("pushgateway", cmd, workdir)
        wait_until(self._ready, START_TIMEOUT_S, "pushgateway")

    def _ready(self) -> bool:
        self.check_alive()
        http_get(f"{self.url}/-/ready")
        return True


def jaeger_config(otlp_port: int, query_port: int, grpc_port: int) -> str:
    """Jaeger v2 (an OTel Collector): OTLP/HTTP receiver, memory storage, query extension."""
    return f"""\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    # no self-tracing: it exports to localhost:4317 and stalls shutdown for 10 s without it
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{grpc_port}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


class Jaeger(Server):
    """Jaeger all-in-one (v2) with memory storage; OTLP/HTTP in, query API out."""

    def __init__(self, workdir: Path, binary: Path) -> None:
        self.otlp_port, self.query_port, grpc_port = free_port(), free_port(), free_port()
        self.otlp_endpoint = f"http://127.0.0.1:{self.otlp_port}"
        self.query_url = f"http://127.0.0.1:{self.query_port}"
        config = workdir / "jaeger.yaml"
        config.write_text(jaeger_config(self.otlp_port, self.query_port, grpc_port))
        super().__init__("jaeger", [str(binary), "--config", str(config)], workdir)
        wait_until(self._ready, START_TIMEOUT_S, "jaeger")

    def _ready(self) -> bool:
        self.check_alive()
        http_get(f"{self.query_url}/api/services")
        with socket.create_connection(("127.0.0.1", self.otlp_port), timeout=1):
            return True

    def trace(self, trace_id: str, min_spans: int = 1, timeout_s: float = 30.0) -> dict[str, Any]:
        """``/api/traces/<id>``, polled until at least ``min_spans`` spans have arrived."""
        box: list[dict[str, Any]] = [{}]

        def check() -> bool:
            try:
                box[0] = json.loads(http_get(f"{self.query_url}/api/traces/{trace_id}"))
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return False
                raise
            data = box[0].get("data") or []
            return bool(data) and len(data[0].get("spans", [])) >= min_spans

        wait_until(check, timeout_s, f"trace {trace_id} in jaeger", interval_s=0.5)
        return box[0]


# ------------------------------------------------------------------------------------ fixtures


@contextlib.contextmanager
def _session_dir(name: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"mlms-{name}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path / "data", ignore_errors=True)  # keep logs, drop the TSDB


def _need(binary: str) -> str:
    found = shutil.which(binary)
    if found is None:
        pytest.skip(f"{binary} is not installed; install it with: {APT_HINT}")
    return found


@pytest.fixture(scope="session")
def prometheus() -> Iterator[Prometheus]:
    """A running Prometheus (Debian package) scraping every second; ``prometheus.scrape(job,
    address)`` adds targets, ``query``/``wait_for`` run PromQL over the HTTP API."""
    binary = _need("prometheus")
    with _session_dir("prometheus") as workdir:
        server = Prometheus(workdir, binary)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def pushgateway() -> Iterator[Pushgateway]:
    """A running Pushgateway (Debian package), no persistence."""
    binary = _need("prometheus-pushgateway")
    with _session_dir("pushgateway") as workdir:
        server = Pushgateway(workdir, binary)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def jaeger() -> Iterator[Jaeger]:
    """A running Jaeger v2 built from its pinned module (the first build takes a while)."""
    from mlmodelscope.devtools import jaeger as tools

    if not tools.is_built() and shutil.which("go") is None:
        pytest.skip(
            "Jaeger is not built and `go` is missing; "
            "run: python -m mlmodelscope.devtools.jaeger build"
        )
    binary = tools.build_jaeger()
    with _session_dir("jaeger") as workdir:
        server = Jaeger(workdir, binary)
        try:
            yield server
        finally:
            server.stop()
