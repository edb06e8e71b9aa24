"""The fetch guard: blocked hosts are refused before any connection, each redirect is checked
again, and downloads are bounded in size and time.

Nothing here leaves loopback, and the tests prove it rather than trust it: the ``network``
fixture replaces name resolution (a table of made-up names; numeric hosts are parsed, never
looked up) and ``socket.connect`` (every attempt recorded; anything but loopback refused
before a packet is sent). "Refused before connecting" is then an assertion on that record.
The servers are real HTTP(S) servers on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import http.server
import ipaddress
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from loopback import Route, Site, redirect, self_signed_context, send

from mlmodelscope.agent.download import REDIRECT_LIMIT, FetchError
from mlmodelscope.agent.netguard import BlockedAddressError, refusal
from mlmodelscope.agent.sources import fetch_uri
from mlmodelscope.contract.fetch import FetchPolicy, HostList, parse_host_list
from mlmodelscope.spec.base import SpecError

MODEL = b"\x08\x07model-bytes" * 100
SECRET = "s3cret-pw"
SIGNATURE = "sig-abc123"


# ---------------------------------------------------------------------------- the network


@dataclass
class Network:
    """What the code under test asked of the network."""

    names: dict[str, list[list[str]]] = field(default_factory=dict)
    """Made-up DNS: name -> the answers to successive lookups (the last one repeats)."""
    lookups: list[str] = field(default_factory=list)
    connects: list[str] = field(default_factory=list)

    def resolve(self, name: str, *answers: list[str]) -> None:
        self.names[name] = list(answers)


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Network:
    net = Network()
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        name = str(host)
        net.lookups.append(name)
        if name in net.names:
            answers = net.names[name]
            addresses = answers.pop(0) if len(answers) > 1 else answers[0]
            return [
                (
                    socket.AF_INET6 if ":" in a else socket.AF_INET,
                    socket.SOCK_STREAM,
                    6,
                    "",
                    (a, port, 0, 0) if ":" in a else (a, port),
                )
                for a in addresses
            ]
        # Only numeric hosts reach the real resolver, which then parses and never asks DNS.
        return real_getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)

    def connect(self: socket.socket, address: Any) -> None:
        host = str(address[0])
        net.connects.append(host)
        if not ipaddress.ip_address(host.split("%")[0]).is_loopback:
            raise ConnectionRefusedError(f"test network: {host} is not loopback, not connecting")
        real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", lambda self, address: connect(self, address))
    return net


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("MLMS_CACHE_DIR", str(cache))
    for var in ("MLMS_FETCH_ALLOW", "MLMS_FETCH_DENY", "MLMS_FETCH_MAX_BYTES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("MLMS_FETCH_TIMEOUT", raising=False)
    monkeypatch.delenv("MLMS_FETCH_DEADLINE", raising=False)
    return cache


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    server.routes["/model.onnx"] = send(MODEL)
    yield server
    server.close()


# ------------------------------------------------------------------------ which addresses


ALLOW_NOTHING = FetchPolicy()


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("169.254.169.254", "link-local"),  # AWS, GCP, Azure, Oracle instance metadata
        ("169.254.170.2", "link-local"),  # ECS task metadata and credentials
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "AWS"),
        ("fd20:ce::254", "GCP"),
        ("100.100.100.200", "Alibaba"),
        ("168.63.129.16", "Azure"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "reserved"),
        ("::ffff:169.254.169.254", "169.254.169.254 inside"),  # IPv4-mapped
        ("::ffff:0.0.0.0", "0.0.0.0 inside"),
        ("::a9fe:a9fe", "169.254.169.254 inside"),  # IPv4-compatible (deprecated)
        ("2002:a9fe:a9fe::1", "169.254.169.254 inside"),  # 6to4
        ("64:ff9b::a9fe:a9fe", "169.254.169.254 inside"),  # NAT64
        ("2001:0:4136:e378:8000:63bf:5601:5601", "169.254.169.254 inside"),  # Teredo
    ],
)
def test_blocked_addresses(address: str, words: str) -> None:
    why = refusal(ipaddress.ip_address(address), ALLOW_NOTHING)
    assert why is not None and words in why


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "::1", "10.0.0.7", "172.16.3.4", "192.168.1.10", "100.64.0.1", "fd12::1",
     "8.8.8.8", "2001:db8::1", "::ffff:10.0.0.7"],
)  # fmt: skip
def test_reachable_by_default(address: str) -> None:
    assert refusal(ipaddress.ip_address(address), ALLOW_NOTHING) is None


def test_deny_adds_and_allow_overrides() -> None:
    policy = FetchPolicy(
        allow=parse_host_list("169.254.10.0/24,10.1.2.3", "A"),
        deny=parse_host_list("10.0.0.0/8,127.0.0.0/8,::1", "D"),
    )
    assert refusal(ipaddress.ip_address("10.9.9.9"), policy) == "in MLMS_FETCH_DENY"
    assert refusal(ipaddress.ip_address("::ffff:127.0.0.1"), policy) is not None
    assert refusal(ipaddress.ip_address("::1"), policy) is not None
    assert refusal(ipaddress.ip_address("10.1.2.3"), policy) is None
    assert refusal(ipaddress.ip_address("169.254.10.5"), policy) is None
    assert refusal(ipaddress.ip_address("169.254.169.254"), policy) is not None


# ------------------------------------------------------------- refused before connecting


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("http://169.254.169.254/latest/meta-data/iam/security-credentials/", "link-local"),
        ("http://[fe80::a9fe:a9fe]/", "link-local"),
        ("http://[::ffff:169.254.169.254]/", "169.254.169.254 inside"),
        ("http://0.0.0.0:8080/m.onnx", "unspecified"),
        ("http://2852039166/latest/meta-data/", "169.254.169.254"),  # a decimal IPv4 form
        ("http://0251.0376.0251.0376/", "169.254.169.254"),  # an octal one
        ("https://100.100.100.200/latest/meta-data/", "Alibaba"),
    ],
)
def test_a_blocked_address_is_refused_without_connecting(
    network: Network, uri: str, words: str
) -> None:
    with pytest.raises(BlockedAddressError) as err:
        fetch_uri(uri)
    assert err.value.field == "spec.model.uri"
    assert words in str(err.value) and "refused before connecting" in str(err.value)
    assert "MLMS_FETCH_ALLOW" in str(err.value)
    assert network.connects == []


@pytest.mark.parametrize(
    "host", ["metadata.google.internal", "METADATA.google.internal.", "metadata", "metadata.goog"]
)
def test_metadata_names_are_refused_without_a_lookup(network: Network, host: str) -> None:
    with pytest.raises(BlockedAddressError, match="instance metadata server"):
        fetch_uri(f"http://{host}/computeMetadata/v1/instance/service-accounts/default/token")
    assert network.lookups == [] and network.connects == []


def test_a_name_resolving_to_a_blocked_address_is_refused(network: Network) -> None:
    network.resolve("models.example", ["::ffff:169.254.169.254"])
    with pytest.raises(BlockedAddressError, match=r"resolves to ::ffff:.*\(169\.254\.169\.254 in"):
        fetch_uri("http://models.example/m.onnx")
    network.resolve("mixed.example", ["127.0.0.1", "169.254.169.254"])
    with pytest.raises(BlockedAddressError, match=r"resolves to 169\.254\.169\.254"):
        fetch_uri("http://mixed.example/m.onnx")
    assert network.connects == [], "one blocked address refuses the host"


def test_the_connection_goes_to_the_address_that_was_checked(network: Network, site: Site) -> None:
    # DNS rebinding: the first answer passes the check, a second lookup would answer with
    # the metadata address. There is no second lookup.
    network.resolve("rebind.example", ["127.0.0.1"], ["169.254.169.254"])
    fetched = fetch_uri(site.url("/model.onnx", host="rebind.example"))
    assert fetched.path.read_bytes() == MODEL
    assert network.lookups.count("rebind.example") == 1
    assert network.connects == ["127.0.0.1"]


def test_the_same_guard_covers_dataset_uris(network: Network) -> None:
    with pytest.raises(BlockedAddressError) as err:
        fetch_uri("http://169.254.169.254/data.npz", kind="datasets", uri_field="spec.dataset.uri")
    assert err.value.field == "spec.dataset.uri"
    assert network.connects == []


def test_a_blocked_s3_endpoint_is_refused_without_connecting(
    network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("boto3")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://169.254.169.254")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    with pytest.raises(BlockedAddressError) as err:
        fetch_uri("s3://latest/meta-data/iam/security-credentials/node")
    assert err.value.field == "spec.model.credentialsSecretRef"
    assert "S3 endpoint http://169.254.169.254" in str(err.value)
    assert network.connects == []


# ------------------------------------------------------------------------------ redirects


@pytest.mark.parametrize(
    ("location", "words"),
    [
        ("http://169.254.169.254/latest/meta-data/iam/security-credentials/", "link-local"),
        ("http://[::ffff:a9fe:a9fe]/latest/meta-data/", "169.254.169.254 inside"),
        ("http://metadata.google.internal/computeMetadata/v1/", "instance metadata server"),
        ("http://imds.example/latest/meta-data/", "resolves to 169.254.169.254"),
    ],
)
def test_a_redirect_to_a_blocked_host_is_refused_without_connecting(
    network: Network, site: Site, location: str, words: str
) -> None:
    network.resolve("imds.example", ["169.254.169.254"])
    site.routes["/m.onnx"] = redirect(location)
    uri = site.url("/m.onnx?X-Amz-Signature=" + SIGNATURE, userinfo=f"alice:{SECRET}@")
    with pytest.raises(BlockedAddressError) as err:
        fetch_uri(uri)
    message = str(err.value)
    assert err.value.field == "spec.model.uri"
    assert words in message and "redirected from" in message
    assert SECRET not in message and SIGNATURE not in message and "REDACTED" in message
    assert network.connects == ["127.0.0.1"], "only the first hop was connected"
    assert "metadata.google.internal" not in network.lookups


def test_each_redirect_is_followed_and_checked(network: Network, site: Site) -> None:
    site.routes["/a"] = redirect("/b", 301)
    site.routes["/b"] = redirect(site.url("/c"), 307)
    site.routes["/c"] = redirect("model.onnx", 308)
    fetched = fetch_uri(site.url("/a"))
    assert fetched.path.read_bytes() == MODEL
    assert [path for path, _ in site.requests] == ["/a", "/b", "/c", "/model.onnx"]
    assert network.connects == ["127.0.0.1"] * 4


def test_odd_urls_are_spec_errors_or_sent_encoded(network: Network, site: Site) -> None:
    for bad, words in (("http:///m.onnx", "names no host"), ("http://[::1/m", "not a valid URL")):
        with pytest.raises(SpecError, match=words):
            fetch_uri(bad)
    site.routes["/my%20model%C3%A9.onnx"] = send(MODEL)
    assert fetch_uri(site.url("/my modelé.onnx")).path.read_bytes() == MODEL
    assert network.connects == ["127.0.0.1"]


def test_redirects_are_bounded(network: Network, site: Site) -> None:
    site.routes["/loop"] = redirect("/loop")
    with pytest.raises(SpecError, match=f"redirects more than {REDIRECT_LIMIT} times"):
        fetch_uri(site.url("/loop"))
    assert len(site.requests) == REDIRECT_LIMIT + 1


def test_credentials_go_to_their_own_origin_only(network: Network, site: Site) -> None:
    other = Site()
    try:
        other.routes["/model.onnx"] = send(MODEL)
        site.routes["/here"] = redirect("/model.onnx")
        site.routes["/away"] = redirect(other.url("/model.onnx"))
        fetch_uri(site.url("/here", userinfo=f"alice:{SECRET}@"))
        fetch_uri(site.url("/away", userinfo=f"alice:{SECRET}@"), sha256=None, kind="labels")
    finally:
        other.close()
    basic = "Basic YWxpY2U6czNjcmV0LXB3"  # base64("alice:s3cret-pw")
    assert [auth for _, auth in site.requests] == [basic, basic, basic]
    assert other.requests == [("/model.onnx", None)], "no credentials to another origin"


# ---------------------------------------------------------------------------- allow, deny


def test_operator_style_deny_blocks_loopback_and_allow_reopens_it(
    network: Network, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLMS_FETCH_DENY", "127.0.0.0/8,::1,store.example")
    with pytest.raises(BlockedAddressError, match="in MLMS_FETCH_DENY"):
        fetch_uri(site.url("/model.onnx"))
    network.resolve("store.example", ["127.0.0.1"])
    with pytest.raises(BlockedAddressError, match=r"host store\.example is in MLMS_FETCH_DENY"):
        fetch_uri(site.url("/model.onnx", host="store.example"))
    assert network.connects == [] and "store.example" not in network.lookups

    monkeypatch.setenv("MLMS_FETCH_ALLOW", "store.example")
    assert fetch_uri(site.url("/model.onnx", host="store.example")).path.read_bytes() == MODEL
    monkeypatch.setenv("MLMS_FETCH_ALLOW", "127.0.0.1/32")
    assert fetch_uri(site.url("/model.onnx"), kind="labels").path.read_bytes() == MODEL


def test_environment_proxies_are_not_used(
    network: Network, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy would connect to an address the guard never saw: downloads go direct.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy"):
        monkeypatch.setenv(var, "http://192.0.2.1:3128")
    assert fetch_uri(site.url("/model.onnx")).path.read_bytes() == MODEL
    assert network.connects == ["127.0.0.1"]


def test_a_bad_policy_variable_is_a_clear_error(
    network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLMS_FETCH_ALLOW", "10.0.0.0/33")
    monkeypatch.setenv("MLMS_FETCH_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="MLMS_FETCH_ALLOW") as err:
        fetch_uri("http://127.0.0.1:9/m.onnx")
    assert "MLMS_FETCH_MAX_BYTES='lots'" in str(err.value)
    assert network.connects == []


def test_policy_round_trips_through_the_environment() -> None:
    policy = FetchPolicy(
        allow=parse_host_list("10.0.0.0/8, Models.Internal.", "A"),
        deny=HostList(),
        max_bytes=123,
        timeout_s=2.5,
        deadline_s=60,
    )
    assert FetchPolicy.from_env(policy.to_env()) == policy
    assert FetchPolicy.from_env({}) == FetchPolicy()


# --------------------------------------------------------------------------- size and time


def test_a_declared_length_over_the_limit_is_refused_before_reading(
    network: Network, site: Site, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLMS_FETCH_MAX_BYTES", "1000")
    site.routes["/big.onnx"] = send(b"x" * 5000)
    with pytest.raises(SpecError) as err:
        fetch_uri(site.url("/big.onnx"))
    assert err.value.field == "spec.model.uri"
    assert "is 5000 bytes, over the download limit of 1000 bytes" in str(err.value)
    assert "MLMS_FETCH_MAX_BYTES" in str(err.value)
    assert not [p for p in clean_env.rglob("*") if p.is_file()]


def test_an_undeclared_stream_over_the_limit_is_cut_off(
    network: Network, site: Site, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLMS_FETCH_MAX_BYTES", "1000")
    site.routes["/big.onnx"] = send(b"x" * 5000, length=False)
    with pytest.raises(SpecError, match="sent more than 1000 bytes"):
        fetch_uri(site.url("/big.onnx"))
    assert not [p for p in clean_env.rglob("*") if p.is_file()]
    site.routes["/ok.onnx"] = send(b"x" * 1000, length=False)
    assert fetch_uri(site.url("/ok.onnx")).path.stat().st_size == 1000


def drip(stop: threading.Event, *, headers: bool) -> Route:
    """A server that sends a byte (of the headers, or of a 1 MB body) every 20 ms until
    ``stop``: each read succeeds quickly, the whole never finishes."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        if headers:
            h.wfile.write(b"HTTP/1.0 200 OK\r\n")
            while not stop.wait(0.02):
                h.wfile.write(b"X-Slow: 1\r\n")
                h.wfile.flush()
            return
        h.send_response(200)
        h.send_header("Content-Length", str(1 << 20))
        h.end_headers()
        while not stop.wait(0.02):
            h.wfile.write(b"x")
            h.wfile.flush()

    return route


@pytest.mark.parametrize("headers", [False, True], ids=["slow-body", "slow-headers"])
def test_a_slow_server_is_cut_off_at_the_deadline(
    network: Network, site: Site, clean_env: Path, monkeypatch: pytest.MonkeyPatch, headers: bool
) -> None:
    monkeypatch.setenv("MLMS_FETCH_TIMEOUT", "30")
    monkeypatch.setenv("MLMS_FETCH_DEADLINE", "0.5")
    site.routes["/slow.onnx"] = drip(site.stop, headers=headers)
    with pytest.raises(FetchError, match=r"not finished within 0\.5 s \(MLMS_FETCH_DEADLINE"):
        fetch_uri(site.url("/slow.onnx"))
    assert not [p for p in clean_env.rglob("*") if p.is_file()]


def test_a_silent_server_times_out(
    network: Network, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLMS_FETCH_TIMEOUT", "0.3")
    site.routes["/silent.onnx"] = lambda h: site.stop.wait()
    with pytest.raises(FetchError, match="timed out"):
        fetch_uri(site.url("/silent.onnx"))


# ----------------------------------------------------------------------------------- https


@pytest.fixture
def tls_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """An HTTPS server for 127.0.0.1 with a self-signed certificate the client trusts
    (through ``SSL_CERT_FILE``, which OpenSSL's default verify paths read)."""
    pytest.importorskip("cryptography")
    context, cert_file = self_signed_context(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    server = Site(context)
    server.routes["/model.onnx"] = send(MODEL)
    yield server
    server.close()


def test_https_is_verified_against_the_name_while_connecting_to_the_checked_address(
    network: Network, tls_site: Site
) -> None:
    fetched = fetch_uri(tls_site.url("/model.onnx"))
    assert fetched.sha256 == hashlib.sha256(MODEL).hexdigest()
    assert network.connects == ["127.0.0.1"]


def test_https_does_not_redirect_down_to_http(network: Network, tls_site: Site, site: Site) -> None:
    tls_site.routes["/m.onnx"] = redirect(site.url("/model.onnx"))
    with pytest.raises(SpecError, match="redirects from https down to http"):
        fetch_uri(tls_site.url("/m.onnx"))
    assert network.connects == ["127.0.0.1"] and site.requests == []
