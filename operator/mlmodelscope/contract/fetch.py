"""How far the agent may reach for a model: address lists and download bounds.

The agent reads these ``MLMS_FETCH_*`` variables (``mlms run`` locally, or the Job's
environment, which the operator fills from its ``MLMS_OPERATOR_FETCH_*`` settings). Both sides
parse them here, so the operator refuses at startup a value the agent would refuse later.
Which addresses are blocked by default is the agent's (:mod:`mlmodelscope.agent.netguard`);
this module only says what a list entry may be.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_ENV: Final = "MLMS_FETCH_ALLOW"
"""Comma-separated CIDRs, addresses or host names the agent may reach even when blocked."""
DENY_ENV: Final = "MLMS_FETCH_DENY"
"""Comma-separated CIDRs, addresses or host names blocked on top of the built-in list."""
MAX_BYTES_ENV: Final = "MLMS_FETCH_MAX_BYTES"
TIMEOUT_ENV: Final = "MLMS_FETCH_TIMEOUT"
DEADLINE_ENV: Final = "MLMS_FETCH_DEADLINE"

DEFAULT_MAX_BYTES: Final = 16 * 2**30
"""16 GiB: larger than any vision or language model this project evaluates in one file, small
enough that a hostile URI cannot fill a node's disk unnoticed."""
DEFAULT_TIMEOUT_S: Final = 60.0
"""Connect and per-read timeout: a server silent this long is gone."""
DEFAULT_DEADLINE_S: Final = 3600.0
"""Total time for one download, redirects included: 16 GiB at ~40 Mbit/s."""

CLUSTER_DENY: Final = "127.0.0.0/8,::1/128"
"""What the operator's Jobs also block unless told otherwise (``MLMS_OPERATOR_FETCH_DENY``):
loopback, which in a pod reaches only the pod's own containers (a service mesh's admin port),
never a model store. ``mlms run`` allows it, so a model served on the own machine works."""

_LABEL = r"[a-z0-9_]([-a-z0-9_]*[a-z0-9_])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")
T = TypeVar("T")


@dataclass(frozen=True)
class HostList:
    """Networks and host names (lower case, no trailing dot)."""

    networks: tuple[IPNetwork, ...] = ()
    names: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return ",".join([*(str(n) for n in self.networks), *sorted(self.names)])

    def has_name(self, host: str) -> bool:
        return normalize_host(host) in self.names

    def has_address(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(address in network for network in self.networks)


def normalize_host(host: str) -> str:
    """Host names compare case-insensitively and without the root's trailing dot."""
    return host.strip().lower().rstrip(".")


def parse_host_list(raw: str, variable: str) -> HostList:
    """``10.0.0.0/8,::1,models.internal`` as a :class:`HostList`; raises ValueError naming
    ``variable`` and every entry that is neither a CIDR, an address nor a host name."""
    networks: list[IPNetwork] = []
    names: set[str] = set()
    bad: list[str] = []
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        name = normalize_host(entry)
        if _HOST_NAME.match(name) and not name.replace(".", "").isdigit():
            names.add(name)
        else:
            bad.append(entry)
    if bad:
        raise ValueError(
            f"{variable}: expected CIDRs (10.0.0.0/8), addresses (127.0.0.1, ::1) or host "
            f"names (models.internal), comma-separated; not {', '.join(map(repr, bad))}"
        )
    return HostList(tuple(networks), frozenset(names))


def parse_max_bytes(raw: str, variable: str) -> int:
    """A whole number of bytes >= 0 (0 = no limit)."""
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"{variable}={raw!r}: expected a whole number of bytes >= 0 (0 = no limit)"
        )
    return value


def parse_seconds(raw: str, variable: str) -> float:
    """A finite number of seconds > 0."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ValueError(f"{variable}={raw!r}: expected a number of seconds > 0")
    return value


@dataclass(frozen=True)
class FetchPolicy:
    """What the agent may reach and for how long (defaults: ``mlms run`` with nothing set)."""

    allow: HostList = HostList()
    """Permitted even when the built-in list or ``deny`` blocks them (a host name here
    permits every address it resolves to)."""
    deny: HostList = HostList()
    """Blocked on top of the built-in list (link-local, cloud metadata, unspecified, ...)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Largest download; 0 = no limit."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    deadline_s: float = DEFAULT_DEADLINE_S

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> FetchPolicy:
        """Read the ``MLMS_FETCH_*`` variables; raises ValueError listing every bad one."""
        problems: list[str] = []

        def read(variable: str, parse: Callable[[str, str], T], default: T) -> T:
            raw = environ.get(variable, "").strip()
            if not raw:
                return default
            try:
                return parse(raw, variable)
            except ValueError as exc:
                problems.append(str(exc))
                return default

        policy = cls(
            allow=read(ALLOW_ENV, parse_host_list, HostList()),
            deny=read(DENY_ENV, parse_host_list, HostList()),
            max_bytes=read(MAX_BYTES_ENV, parse_max_bytes, DEFAULT_MAX_BYTES),
            timeout_s=read(TIMEOUT_ENV, parse_seconds, DEFAULT_TIMEOUT_S),
            deadline_s=read(DEADLINE_ENV, parse_seconds, DEFAULT_DEADLINE_S),
        )
        if problems:
            raise ValueError("; ".join(problems))
        return policy

    def to_env(self) -> dict[str, str]:
        """The variables that make an agent read this same policy."""
        env = {
            MAX_BYTES_ENV: str(self.max_bytes),
            TIMEOUT_ENV: f"{self.timeout_s:g}",
            DEADLINE_ENV: f"{self.deadline_s:g}",
        }
        if self.allow.networks or self.allow.names:
            env[ALLOW_ENV] = str(self.allow)
        if self.deny.networks or self.deny.names:
            env[DENY_ENV] = str(self.deny)
        return env
