"""Which hosts a model URI may reach, decided before any connection is attempted.

The spec author chooses the URI, and the agent runs with its node's network: unguarded,
``uri: http://169.254.169.254/latest/meta-data/iam/security-credentials/node`` would fetch
the node's cloud credentials (and as a labels file, their lines would come back as class
names in the result). So every host a download touches (the URI's, each redirect's, an S3
endpoint's) goes through :func:`checked_addresses`: a metadata name is refused without a DNS
lookup; otherwise the name is resolved once, every address it resolves to is checked, and the
caller connects to exactly those addresses, never to a second lookup that DNS rebinding could
answer differently.

Blocked by default (:data:`BLOCKED_NETWORKS`, :data:`METADATA_NAMES`): link-local addresses
(169.254.0.0/16, fe80::/10, where AWS, GCP, Azure and Oracle serve instance metadata),
the other clouds' metadata addresses, unspecified (0.0.0.0/8, ::), multicast and reserved
addresses, and IPv6 forms embedding a blocked IPv4 address (``::ffff:169.254.169.254``,
6to4, Teredo, NAT64). Private ranges stay reachable: in-cluster model servers and MinIO live
there. Loopback is reachable for ``mlms run``; the operator's Jobs block it
(:data:`~mlmodelscope.contract.fetch.CLUSTER_DENY`). ``MLMS_FETCH_DENY`` blocks more,
``MLMS_FETCH_ALLOW`` permits what is blocked.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Final

from mlmodelscope.contract.fetch import (
    ALLOW_ENV,
    DENY_ENV,
    FetchPolicy,
    IPNetwork,
    normalize_host,
)
from mlmodelscope.spec.base import SpecError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SockAddr = tuple[Any, ...]

_LINK_LOCAL = "a link-local address, where clouds serve instance metadata and credentials"
BLOCKED_NETWORKS: Final[tuple[tuple[IPNetwork, str], ...]] = tuple(
    (ipaddress.ip_network(cidr), why)
    for cidr, why in (
        ("169.254.0.0/16", _LINK_LOCAL),
        ("fe80::/10", _LINK_LOCAL),
        ("0.0.0.0/8", "an unspecified address (it reaches this host)"),
        ("::/128", "the unspecified address (it reaches this host)"),
        ("224.0.0.0/4", "a multicast address"),
        ("ff00::/8", "a multicast address"),
        ("240.0.0.0/4", "a reserved address"),
        ("100.100.100.200/32", "Alibaba Cloud's instance metadata address"),
        ("168.63.129.16/32", "Azure's host (WireServer) address"),
        ("fd00:ec2::254/128", "AWS's IPv6 instance metadata address"),
        ("fd20:ce::254/128", "GCP's IPv6 instance metadata address"),
    )
)
"""Blocked addresses and why; ``MLMS_FETCH_ALLOW`` overrides any of them."""

METADATA_NAMES: Final = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
    }
)
"""Instance metadata host names, refused before any DNS lookup."""

_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE: Final = ipaddress.ip_network("::/96")


class BlockedAddressError(SpecError):
    """A URI (or a redirect, or an S3 endpoint) names a host the fetch policy blocks."""


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo client, NAT64 or the
    old IPv4-compatible form), which is where a packet to it may end up."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 0xFFFF):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: IPAddress, policy: FetchPolicy) -> str | None:
    """Why ``address`` is blocked (None when it may be reached)."""
    if policy.allow.has_address(address):
        return None
    for network, reason in BLOCKED_NETWORKS:
        if address in network:
            return reason
    if policy.deny.has_address(address):
        return f"in {DENY_ENV}"
    inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    why = refusal(inner, policy) if inner is not None else None
    return f"{why} ({inner} inside {address})" if why else None


def _refused(detail: str, field: str, shown: str) -> BlockedAddressError:
    return BlockedAddressError(
        field,
        f"{shown}: {detail}; refused before connecting. Give the URI of a model store, or if "
        f"this host is trusted add it to {ALLOW_ENV} (in a cluster: the operator's "
        "MLMS_OPERATOR_FETCH_ALLOW)",
    )


def checked_addresses(
    host: str, port: int, policy: FetchPolicy, *, field: str, shown: str
) -> list[tuple[int, SockAddr]]:
    """``(family, sockaddr)`` for every address of ``host``, each checked against the policy.

    Raises :class:`BlockedAddressError` (naming ``field`` and showing ``shown``, the redacted
    URI) when the name or any address it resolves to is blocked: one bad address refuses the
    host, so a name cannot smuggle a blocked address in beside a good one. Resolution
    failures propagate as :class:`socket.gaierror`.
    """
    name = normalize_host(host)
    trusted = policy.allow.has_name(name)
    if not trusted and name in METADATA_NAMES:
        raise _refused(f"host {host} is an instance metadata server", field, shown)
    if not trusted and policy.deny.has_name(name):
        raise _refused(f"host {host} is in {DENY_ENV}", field, shown)
    found: list[tuple[int, SockAddr]] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(str(sockaddr[0]))
        if not trusted and (why := refusal(address, policy)) is not None:
            is_literal = str(address) == name.strip("[]")
            detail = f"is {why}" if is_literal else f"resolves to {address}, {why}"
            raise _refused(f"host {host} {detail}", field, shown)
        if (family, sockaddr) not in found:
            found.append((family, sockaddr))
    return found
