"""A real HTTP(S) server on 127.0.0.1 for the download tests, answering each path from a table
of routes (a body, a redirect, or any behaviour: slow, silent, oversized)."""

from __future__ import annotations

import contextlib
import http.server
import ssl
import threading
from collections.abc import Callable
from typing import Any

Route = Callable[[http.server.BaseHTTPRequestHandler], None]


def send(body: bytes, *, length: bool = True) -> Route:
    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        if length:
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return route


def redirect(location: str, code: int = 302) -> Route:
    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(code)
        h.send_header("Location", location)
        h.send_header("Content-Length", "0")
        h.end_headers()

    return route


class Site:
    """A loopback HTTP(S) server answering each path from ``routes``; it records what it was
    asked (path and Authorization header). ``stop`` releases handlers that wait on it."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.stop = threading.Event()
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.requests.append((self.path, self.headers.get("Authorization")))
                route = site.routes.get(self.path.partition("?")[0])
                if route is None:
                    self.send_error(404)
                    return
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    route(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if context is not None else "http"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1", userinfo: str = "") -> str:
        return f"{self.scheme}://{userinfo}{host}:{self.port}{path}"

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
