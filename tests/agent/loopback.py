"""A real HTTP(S) server on 127.0.0.1 for the download tests, answering each path from a table
of routes (a body, a redirect, or any behaviour: slow, silent, oversized)."""

from __future__ import annotations

import contextlib
import datetime
import http.server
import ipaddress
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
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


def self_signed_context(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server TLS context for 127.0.0.1 with a fresh self-signed certificate, and the
    certificate's file (for a client's ``SSL_CERT_FILE``). Needs ``cryptography``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file
