"""The real node's network, all of it on this machine: a bridge, a service route, a fence.

- **The bridge** ``mlms0`` carries ``10.213.0.1/24``: the node's InternalIP (the API server
  refuses to proxy logs and exec to a loopback address) and the pods' gateway. The harness
  creates it before the kubelet starts (a kubelet's ``--node-ip`` must be a local address);
  the CNI ``bridge`` plugin then finds it and plugs each pod's veth into it.
- **The ``kubernetes`` Service.** Pods reach the API server as every in-cluster client does,
  at ``KUBERNETES_SERVICE_HOST:443`` (10.0.0.1). One DNAT rule, which the harness manages in
  place of kube-proxy, sends that to the API server on ``127.0.0.1``; ``route_localnet`` on the
  bridge lets the kernel route a bridge packet to a loopback address (what kube-proxy does for
  NodePorts on localhost). The API server keeps listening on loopback only.
- **The fence.** Pods may talk to each other and to this host, never past it: forwarded
  traffic from the bridge to any other interface is dropped (the CNI bridge plugin turns IP
  forwarding on, and nothing masquerades pod addresses).

Every rule lives in chains of our own (``MLMS-NODE-*``), so teardown removes exactly what
setup added, and a crashed run's leftovers are removed by the next setup.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mlmodelscope.devcluster import pki

BRIDGE: Final = "mlms0"
POD_SUBNET: Final = "10.213.0.0/24"
NODE_IP: Final = "10.213.0.1"
PREFIX_LEN: Final = 24
NAT_CHAIN: Final = "MLMS-NODE-SERVICES"
FENCE_CHAIN: Final = "MLMS-NODE-FENCE"


class NetworkError(RuntimeError):
    """A command that sets up or tears down the node's network failed."""


@dataclass(frozen=True)
class Rule:
    """One iptables rule: its table, chain and match/target arguments."""

    table: str
    chain: str
    args: tuple[str, ...]


def service_rules(api_port: int) -> list[Rule]:
    """The DNAT of the ``kubernetes`` Service to the loopback API server."""
    dnat = (
        "-d", f"{pki.KUBERNETES_SERVICE_IP}/32", "-p", "tcp", "--dport", "443",
        "-j", "DNAT", "--to-destination", f"127.0.0.1:{api_port}",
    )  # fmt: skip
    return [Rule("nat", NAT_CHAIN, dnat)]


def fence_rules() -> list[Rule]:
    """Bridge traffic stays on the bridge or goes to this host: nothing is forwarded out."""
    return [Rule("filter", FENCE_CHAIN, ("-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"))]


JUMPS: Final = (
    Rule("nat", "PREROUTING", ("-j", NAT_CHAIN)),
    Rule("filter", "FORWARD", ("-j", FENCE_CHAIN)),
)
"""Where our chains hook in: PREROUTING for packets arriving from pods, FORWARD for the fence."""


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc


def _iptables() -> str:
    path = shutil.which("iptables")
    if path is None:
        raise NetworkError("iptables is missing: apt-get install iptables")
    return path


def _sysctl(path: str, value: str) -> None:
    Path("/proc/sys", path).write_text(value)


def setup(api_port: int) -> None:
    """Create the bridge and the rules (after removing any a crashed run left behind)."""
    teardown()
    _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "addr", "add", f"{NODE_IP}/{PREFIX_LEN}", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])
    _sysctl(f"net/ipv4/conf/{BRIDGE}/route_localnet", "1")
    ipt = _iptables()
    for table, chain in (("nat", NAT_CHAIN), ("filter", FENCE_CHAIN)):
        _run([ipt, "-w", "-t", table, "-N", chain])
    for rule in (*service_rules(api_port), *fence_rules()):
        _run([ipt, "-w", "-t", rule.table, "-A", rule.chain, *rule.args])
    for jump in JUMPS:
        _run([ipt, "-w", "-t", jump.table, "-I", jump.chain, "1", *jump.args])


def teardown() -> None:
    """Remove the jumps, our chains and the bridge; whatever is already gone is skipped."""
    ipt = shutil.which("iptables")
    if ipt is not None:
        for jump in JUMPS:
            delete = [ipt, "-w", "-t", jump.table, "-D", jump.chain, *jump.args]
            while _run(delete, check=False).returncode == 0:  # a crashed run may have added two
                pass
        for table, chain in (("nat", NAT_CHAIN), ("filter", FENCE_CHAIN)):
            _run([ipt, "-w", "-t", table, "-F", chain], check=False)
            _run([ipt, "-w", "-t", table, "-X", chain], check=False)
    _run(["ip", "link", "del", BRIDGE], check=False)


def remove_netns(paths: Sequence[str]) -> None:
    """Delete pod network namespaces (bind-mounted files, as CNI leaves them): their veths go
    with them. Used when containers were killed without the kubelet's CNI DEL."""
    for path in paths:
        _run(["umount", path], check=False)
        with contextlib.suppress(OSError):
            Path(path).unlink()
