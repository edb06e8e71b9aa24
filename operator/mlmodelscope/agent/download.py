"""Bounded, guarded downloads: http(s) with redirects, and the size and time budget shared with
s3.

``urllib`` resolves a host itself, follows redirects anywhere and never stops reading, so
http(s) goes through :mod:`http.client` here instead: each hop's host is checked by
:func:`~mlmodelscope.agent.netguard.checked_addresses` and the socket connects to an address
that check returned (no second DNS lookup); at most :data:`REDIRECT_LIMIT` redirects, never
from https down to http; credentials in the URI's userinfo go only to its own origin. A
:class:`Budget` bounds the bytes (``Content-Length`` refused early, the stream counted) and the
time (per connect/read, and a total deadline enforced by a watchdog that closes the socket, so
a server dripping bytes or headers cannot hold the agent). Environment proxies are not used:
a proxy would connect to an address this guard never saw.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import BinaryIO, Final

from mlmodelscope.agent import netguard
from mlmodelscope.contract.fetch import DEADLINE_ENV, MAX_BYTES_ENV, FetchPolicy
from mlmodelscope.contract.redact import redact_uri, remember_secrets, secrets_in_uri
from mlmodelscope.spec.base import SpecError

CHUNK: Final = 1 << 20
REDIRECT_LIMIT: Final = 5
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
USER_AGENT: Final = "mlmodelscope-agent"


class FetchError(RuntimeError):
    """A transient-looking transport failure (network, HTTP 5xx, deadline): retrying may help.

    Problems the user has to fix in the spec (404, wrong digest, missing file, a blocked
    host, a model over the size limit) raise :class:`SpecError` instead, so the operator does
    not retry them.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Budget:
    """What one download (all its redirects) may still spend: bytes and seconds."""

    def __init__(self, policy: FetchPolicy, shown: str, field: str) -> None:
        self.policy = policy
        self.shown = shown
        self.field = field
        self.deadline = time.monotonic() + policy.deadline_s
        self.received = 0
        self.expired = threading.Event()
        """Set by the watchdog when it closed the socket at the deadline."""

    def past_deadline(self) -> bool:
        return self.expired.is_set() or time.monotonic() >= self.deadline

    def timeout(self) -> float:
        """Seconds the next connect or read may block: the per-operation timeout, or less
        when the deadline is closer. Raises FetchError once the deadline has passed."""
        if self.past_deadline():
            raise self.overdue()
        return min(self.policy.timeout_s, self.deadline - time.monotonic())

    def overdue(self) -> FetchError:
        return FetchError(
            f"GET {self.shown}: not finished within {self.policy.deadline_s:g} s "
            f"({DEADLINE_ENV}; in a cluster the operator's MLMS_OPERATOR_FETCH_DEADLINE_SECONDS)"
        )

    def declare(self, length: int | None) -> None:
        """Refuse a response whose Content-Length is over the limit, before reading it."""
        if length is not None and self.policy.max_bytes and length > self.policy.max_bytes:
            raise self.too_large(f"is {length} bytes")

    def add(self, count: int) -> None:
        """Count received bytes; refuse once over the limit or past the deadline."""
        self.received += count
        if self.policy.max_bytes and self.received > self.policy.max_bytes:
            raise self.too_large(f"sent more than {self.policy.max_bytes} bytes")
        self.timeout()

    def too_large(self, what: str) -> SpecError:
        return SpecError(
            self.field,
            f"{self.shown} {what}, over the download limit of {self.policy.max_bytes} bytes "
            f"({MAX_BYTES_ENV}; in a cluster the operator's MLMS_OPERATOR_FETCH_MAX_BYTES); "
            "raise the limit, or put the model on a volume and use pvc://",
        )

    @contextlib.contextmanager
    def watching(self, sock: socket.socket) -> Iterator[None]:
        """Shut ``sock``'s connection down at the deadline, whatever the reader is blocked in
        (TLS handshake, headers, a body read); an error that causes becomes :meth:`overdue`.

        It shuts down a duplicate descriptor of its own: that acts on the connection even
        after TLS took over the original socket object, and it is never a descriptor that
        was closed and reused meanwhile.
        """
        watched = sock.dup()

        def expire() -> None:
            self.expired.set()
            with contextlib.suppress(OSError):
                watched.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(max(self.deadline - time.monotonic(), 0.0), expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        except (OSError, http.client.HTTPException) as exc:
            if self.past_deadline():  # the watchdog, or a read timeout cut short to meet it
                raise self.overdue() from exc
            raise
        finally:
            timer.cancel()
            timer.join()
            watched.close()


def copy_hashing(chunks: Iterator[bytes], out: BinaryIO, budget: Budget) -> tuple[str, int]:
    """Write ``chunks`` to ``out`` within ``budget``; returns (sha256 hex, size)."""
    digest = hashlib.sha256()
    for chunk in chunks:
        budget.add(len(chunk))
        digest.update(chunk)
        out.write(chunk)
    budget.timeout()  # a watchdog-closed stream ends early: never take it as complete
    return digest.hexdigest(), budget.received


# --------------------------------------------------------------------------------------- http


def _basic_auth(parts: urllib.parse.SplitResult) -> str | None:
    """An Authorization header for ``user:password@`` in the URI (None without userinfo)."""
    if parts.username is None:
        return None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _connect(addresses: list[tuple[int, netguard.SockAddr]], budget: Budget) -> socket.socket:
    """A TCP connection to the first checked address that answers (no name lookup here)."""
    error: OSError = OSError("no address")
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(budget.timeout())
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


class _Hop:
    """One request of a download: the URL, its parts, and how messages name it."""

    def __init__(self, url: str, shown: str, field: str) -> None:
        remember_secrets(secrets_in_uri(url))  # a redirect's target may be presigned too
        here = redact_uri(url)
        self.url = url
        self.shown = shown if here == shown else f"{here} (redirected from {shown})"
        try:
            self.parts = urllib.parse.urlsplit(url)
            port = self.parts.port
        except ValueError as exc:
            raise SpecError(field, f"{self.shown} is not a valid URL: {exc}") from None
        self.port = port or (443 if self.parts.scheme == "https" else 80)
        name = self.parts.hostname or ""
        if not name:
            raise SpecError(field, f"{self.shown} names no host")
        try:  # IDNA for a non-ASCII name: what DNS and the Host header take
            self.host = name if name.isascii() else name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise SpecError(field, f"{self.shown} has an invalid host name: {exc}") from None

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.parts.scheme, self.host.lower(), self.port

    @property
    def target(self) -> str:
        """Path and query as sent: spaces and non-ASCII percent-encoded, the rest as written."""
        path = self.parts.path or "/"
        target = f"{path}?{self.parts.query}" if self.parts.query else path
        return urllib.parse.quote(target, safe="/%?=&;:@!$'()*+,~[]")


@contextlib.contextmanager
def _response(
    hop: _Hop, auth: str | None, policy: FetchPolicy, budget: Budget, field: str
) -> Iterator[tuple[http.client.HTTPResponse, socket.socket]]:
    """GET one URL through a guarded connection; yields the response and its socket."""
    addresses = netguard.checked_addresses(hop.host, hop.port, policy, field=field, shown=hop.shown)
    sock = _connect(addresses, budget)
    with contextlib.ExitStack() as stack:
        stack.callback(sock.close)
        stack.enter_context(budget.watching(sock))
        conn: http.client.HTTPConnection
        if hop.parts.scheme == "https":
            context = ssl.create_default_context()
            conn = http.client.HTTPSConnection(hop.host, hop.port, context=context)
            sock = stack.enter_context(context.wrap_socket(sock, server_hostname=hop.host))
        else:
            conn = http.client.HTTPConnection(hop.host, hop.port)
        conn.sock = sock  # connected to a checked address: http.client never connects itself
        stack.callback(conn.close)
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if auth is not None:
            headers["Authorization"] = auth
        sock.settimeout(budget.timeout())
        conn.request("GET", hop.target, headers=headers)
        yield conn.getresponse(), sock


def _next_hop(hop: _Hop, response: http.client.HTTPResponse, shown: str, field: str) -> _Hop:
    """The redirect's target, refused unless http(s) and not a downgrade from https."""
    location = response.getheader("Location")
    if not location:
        raise FetchError(f"GET {hop.shown}: HTTP {response.status} without a Location")
    target = urllib.parse.urljoin(hop.url, location.strip())
    scheme = urllib.parse.urlsplit(target).scheme
    if scheme not in ("http", "https"):
        raise SpecError(field, f"{hop.shown} redirects to {redact_uri(target)}, not http(s)")
    if hop.parts.scheme == "https" and scheme == "http":
        raise SpecError(
            field, f"{hop.shown} redirects from https down to http ({redact_uri(target)})"
        )
    return _Hop(target, shown, field)


def _status_error(hop: _Hop, response: http.client.HTTPResponse, field: str) -> Exception:
    code = response.status
    message = f"GET {hop.shown} failed: HTTP {code} {response.reason}"
    if 400 <= code < 500 and code not in (408, 429):
        hint = "check the URI" if code == 404 else "check the URI and that it is readable"
        return SpecError(field, f"{message}; {hint}")
    return FetchError(message, status=code)


def _content_length(response: http.client.HTTPResponse) -> int | None:
    value = (response.getheader("Content-Length") or "").strip()
    return int(value) if value.isdigit() else None


def _body(
    response: http.client.HTTPResponse, sock: socket.socket, budget: Budget
) -> Iterator[bytes]:
    """The body in pieces of at most one socket read each, so the budget is checked between
    them (``read(n)`` would block until ``n`` bytes came, however slowly)."""
    while True:
        sock.settimeout(budget.timeout())
        chunk = response.read1(CHUNK)
        if not chunk:
            return
        yield chunk


def http_download(uri: str, out: BinaryIO, field: str, policy: FetchPolicy) -> tuple[str, int]:
    """GET ``uri`` into ``out`` within the policy; returns (sha256 hex, size).

    Raises :class:`SpecError` naming ``field`` for what the spec must fix (blocked host,
    4xx, too large, too many redirects) and :class:`FetchError` for what may pass (network,
    5xx, deadline). Messages show the URI redacted.
    """
    shown = redact_uri(uri)
    budget = Budget(policy, shown, field)
    hop = _Hop(uri, shown, field)
    origin, auth = hop.origin, _basic_auth(hop.parts)
    try:
        for _ in range(REDIRECT_LIMIT + 1):
            credentials = auth if hop.origin == origin else None
            with _response(hop, credentials, policy, budget, field) as (response, sock):
                if response.status in REDIRECT_STATUSES:
                    hop = _next_hop(hop, response, shown, field)
                    continue
                if not 200 <= response.status < 300:
                    raise _status_error(hop, response, field)
                declared = _content_length(response)
                budget.declare(declared)
                digest, size = copy_hashing(_body(response, sock, budget), out, budget)
            if declared is not None and declared != size:
                raise FetchError(
                    f"GET {hop.shown}: got {size} bytes, Content-Length said {declared}"
                )
            return digest, size
    except (OSError, http.client.HTTPException) as exc:
        raise FetchError(f"GET {hop.shown} failed: {exc}") from exc
    raise SpecError(
        field, f"{shown} redirects more than {REDIRECT_LIMIT} times; give the final URI"
    )
