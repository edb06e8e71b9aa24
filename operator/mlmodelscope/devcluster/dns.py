"""The dev cluster's DNS: CoreDNS (``hack/dns``, pinned to `versions.COREDNS_VERSION`) serving
the cluster domain to the real node's pods, as kube-dns does in any cluster.

It listens on the node bridge's address (`nodenet.NODE_IP`, port 53), which the kubelet names
as the pods' ``clusterDNS``; its kubernetes plugin watches Services and EndpointSlices with the
cluster's admin kubeconfig and answers ``<service>.<namespace>.svc.cluster.local`` (a headless
Service with its ready pods' addresses). Any other name is NXDOMAIN: nothing past this machine
is asked. No kube-proxy runs here, so a ClusterIP answers but carries no traffic; in-cluster
clients use headless Services (the chart's PostgreSQL has one), and `kubernetes` itself is the
one DNAT rule `nodenet` keeps.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from mlmodelscope.devcluster import gosource, nodenet, versions
from mlmodelscope.devcluster.gosource import SourceBuildError, SourceTool

Log = Callable[[str], None]

CLUSTER_DOMAIN: Final = "cluster.local"
PORT: Final = 53
TOOL: Final = SourceTool("dns", "mlms-dns", "coredns", versions.COREDNS_VERSION)


class DNSError(RuntimeError):
    """CoreDNS could not be built; the message says why."""


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def ensure_dns(log: Log = _stderr) -> Path:
    """The CoreDNS binary, built first when missing or stale."""
    try:
        TOOL.build(log)
    except SourceBuildError as exc:
        raise DNSError(str(exc)) from exc
    return TOOL.binary_path()


def corefile(kubeconfig: Path, health_port: int, address: str = nodenet.NODE_IP) -> str:
    """The cluster domain from the API server; NXDOMAIN for every other name."""
    return (
        f"{CLUSTER_DOMAIN}:{PORT} {{\n"
        f"  bind {address}\n"
        "  errors\n"
        f"  health 127.0.0.1:{health_port}\n"
        f"  kubernetes {CLUSTER_DOMAIN} {{\n"
        f"    kubeconfig {kubeconfig}\n"
        "    pods insecure\n"
        "    ttl 5\n"
        "  }\n"
        "}\n"
        f".:{PORT} {{\n"
        f"  bind {address}\n"
        "  errors\n"
        "  template ANY ANY {\n"
        "    rcode NXDOMAIN\n"
        "  }\n"
        "}\n"
    )


def argv(binary: Path, corefile_path: Path) -> list[str]:
    return [str(binary), "-conf", str(corefile_path)]


def main(argv: list[str] | None = None) -> int:
    """``python -m mlmodelscope.devcluster.dns [--force]``: build if needed, print the path."""
    return gosource.main(TOOL, argv)


if __name__ == "__main__":
    raise SystemExit(main())
