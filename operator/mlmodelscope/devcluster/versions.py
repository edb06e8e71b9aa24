"""Pinned versions of every control-plane component, in one place.

Changing a pin changes the build fingerprint, so the next `build` recompiles only what moved.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

KUBERNETES_VERSION: Final = "v1.36.3"
"""k8s.io/kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl."""

KUBERNETES_STAGING_VERSION: Final = "v0.36.3"
"""The published k8s.io/<staging> modules matching KUBERNETES_VERSION."""

ETCD_VERSION: Final = "v3.6.16"
"""go.etcd.io/etcd/server/v3 (and its sibling modules at the same tag)."""

KWOK_VERSION: Final = "v0.8.0"
"""sigs.k8s.io/kwok: simulates kubelets for the kwok-managed nodes."""

KUEUE_VERSION: Final = "v0.17.1"
"""sigs.k8s.io/kueue: the job queueing controller, built only for the tests that run it (not
part of ALL_COMPONENTS). Built against k8s.io client v0.35; it runs against the 1.36 API."""

KUEUE_SUMS: Final = (
    "sigs.k8s.io/kueue v0.17.1 h1:r4cwg3ZFF75l7RjVbdCJgM+0RpU0MJGp7t3rLH8Zyh4=",
    "sigs.k8s.io/kueue v0.17.1/go.mod h1:bRlc6Egt3iDQ3QmbXFi3Oh6KB8m/OXCGN+JVQ3jzfHo=",
)
"""go.sum lines of the pinned Kueue module, seeded into its wrapper's go.sum: the module proxy
serves this version but the checksum database lookup for it fails (404), so `go` verifies the
download against these instead of asking sum.golang.org."""

GO_CONTAINERREGISTRY_VERSION: Final = "v0.22.1"
"""github.com/google/go-containerregistry: its pkg/registry is the dev cluster's OCI registry
(`registry`). hack/registry/go.mod requires this version; a unit test keeps the two equal."""
COREDNS_VERSION: Final = "v1.14.7"
"""github.com/coredns/coredns, the dev cluster's DNS (hack/dns/go.mod pins it)."""

GO_MIN_VERSION: Final = "1.26"
"""Kubernetes 1.36 and etcd 3.6.16 need Go 1.26; GOTOOLCHAIN=local forbids downloading one."""

KUBERNETES_STAGING_MODULES: Final = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "cri-streaming",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
    "streaming",
)
"""k8s.io/kubernetes replaces these with ./staging paths, which a dependent module cannot see."""

ETCD_SIBLING_MODULES: Final = (
    "go.etcd.io/etcd/api/v3",
    "go.etcd.io/etcd/client/pkg/v3",
    "go.etcd.io/etcd/client/v3",
    "go.etcd.io/etcd/pkg/v3",
)
"""etcd's server module replaces these with ../ paths; we pin them to the same tag instead."""

KUBE_COMPONENTS: Final = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ALL_COMPONENTS: Final = (*KUBE_COMPONENTS, "etcd", "kwok")
NODE_COMPONENTS: Final = ("kubelet", "pause")
"""The real node's own binaries: the kubelet (from the same k8s.io/kubernetes module as the
control plane) and the sandbox's pause process (our own few lines of Go: no registry serves
registry.k8s.io/pause here)."""
OPTIONAL_COMPONENTS: Final = ("kueue", *NODE_COMPONENTS)
"""Built on request (`build(["kueue"])`), never by a plain `build`."""
GROUPS: Final = {"control-plane": ALL_COMPONENTS, "node": NODE_COMPONENTS}
"""Names `python -m mlmodelscope.devcluster.build` also accepts, for several components."""


def cache_base() -> Path:
    """The mlmodelscope cache root (`MLMS_CACHE_DIR`, default ~/.cache/mlmodelscope)."""
    env = os.environ.get("MLMS_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mlmodelscope"


def cluster_cache_dir() -> Path:
    """Where this Kubernetes version's wrapper modules and binaries live, outside the repo."""
    return cache_base() / "cluster" / KUBERNETES_VERSION


def bin_dir() -> Path:
    """The built binaries (kube-apiserver, …, etcd, kwok)."""
    return cluster_cache_dir() / "bin"
