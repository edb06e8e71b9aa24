"""Kube.watch reads the API server's watch stream: JSON lines split anywhere across chunks,
an ERROR event as KubeError with its Status code (410: list again), and close() from another
thread ends it quietly. Here against a local HTTP server that streams as the API server does;
against the real one in tests/controller/test_launch_cluster_real.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from mlmodelscope.contract.kube import Kube, KubeError, evaluation_path


def event(kind: str, name: str, version: int) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "resourceVersion": str(version)}
    return {"type": kind, "object": {"metadata": meta}}


class Streams(BaseHTTPRequestHandler):
    """Answers each watch with the server's ``chunks``, then holds the stream open until
    ``hold_s`` passes."""

    chunks: list[bytes] = []
    hold_s = 0.0
    paths: list[str] = []

    def do_GET(self) -> None:
        type(self).paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in self.chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            time.sleep(self.hold_s)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client closed its end

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def served() -> Iterator[tuple[Kube, type[Streams]]]:
    handler = type("Handler", (Streams,), {"chunks": [], "hold_s": 0.0, "paths": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield Kube(client.ApiClient(configuration)), handler
    finally:
        server.shutdown()
        server.server_close()


def test_events_split_across_chunks_arrive_whole_and_in_order(
    served: tuple[Kube, type[Streams]],
) -> None:
    kube, handler = served
    stream = b"".join(
        json.dumps(e).encode() + b"\n"
        for e in (event("ADDED", "a", 5), event("MODIFIED", "a", 6), event("BOOKMARK", "", 9))
    )
    handler.chunks = [stream[:7], stream[7:40], stream[40:]]
    watch = kube.watch(evaluation_path("ns"), "4", label_selector="x", timeout_s=5)
    seen = [(e.type, e.resource_version) for e in watch.events()]
    assert seen == [("ADDED", "5"), ("MODIFIED", "6"), ("BOOKMARK", "9")]
    [path] = handler.paths
    assert "watch=true" in path and "resourceVersion=4" in path and "labelSelector=x" in path
    assert "allowWatchBookmarks=true" in path and "timeoutSeconds=5" in path


def test_an_error_event_raises_its_status_code(served: tuple[Kube, type[Streams]]) -> None:
    kube, handler = served
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    handler.chunks = [json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n"]
    with pytest.raises(KubeError) as raised:
        list(kube.watch(evaluation_path("ns"), "1").events())
    assert (raised.value.status, raised.value.reason) == (410, "Expired")


def test_close_from_another_thread_ends_the_watch_quietly(
    served: tuple[Kube, type[Streams]],
) -> None:
    kube, handler = served
    handler.chunks = [json.dumps(event("ADDED", "a", 5)).encode() + b"\n"]
    handler.hold_s = 30.0
    watch = kube.watch(evaluation_path("ns"), "1", timeout_s=30)
    events = watch.events()
    assert next(events).type == "ADDED"
    threading.Timer(0.2, watch.close).start()
    started = time.monotonic()
    assert list(events) == []
    assert time.monotonic() - started < 5
