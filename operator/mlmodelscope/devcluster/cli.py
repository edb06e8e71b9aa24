"""`mlms dev-cluster`: build, start, inspect and stop the local control plane.

`up` leaves the cluster running detached; its state (PIDs, ports, kubeconfig, logs) lives in a
run dir, so `down` or `status` from any other shell finds it.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from mlmodelscope.devcluster.cluster import Cluster

app = typer.Typer(
    name="dev-cluster",
    help="A real Kubernetes control plane (etcd, API server, controllers, scheduler, kwok) "
    "with simulated CPU and GPU nodes, for tests and local development.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

RunDir = Annotated[
    Path | None,
    typer.Option(
        "--run-dir",
        help="State, kubeconfig and logs [default: $MLMS_CACHE_DIR/dev-cluster].",
        envvar="MLMS_DEV_CLUSTER_DIR",
    ),
]


def _run_dir(run_dir: Path | None) -> Path:
    from mlmodelscope.devcluster.cluster import default_run_dir

    return run_dir or default_run_dir()


def _err(msg: str) -> None:
    typer.echo(msg, err=True)


@app.command()
def build(
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")] = False,
) -> None:
    """Build the pinned binaries into the cache (a no-op when they are up to date)."""
    from mlmodelscope.devcluster import build as builder

    try:
        result = builder.build(force=force, log=_err)
    except builder.BuildError as exc:
        _err(str(exc))
        raise typer.Exit(1) from exc
    if result.seconds:
        timings = ", ".join(f"{k} {v:.0f}s" for k, v in result.seconds.items())
        _err(f"cold build took {result.total_seconds:.0f}s ({timings})")
    else:
        _err(f"all components up to date in {result.bin_dir}")


@app.command()
def up(
    run_dir: RunDir = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 180.0,
    real_node: Annotated[
        bool,
        typer.Option(
            "--real-node",
            help="Also run cpu-kubelet-0: a real kubelet with containerd, runc and a CNI "
            "bridge, running pods in containers (root; Debian's containerd, runc, "
            "containernetworking-plugins and iptables).",
        ),
    ] = False,
) -> None:
    """Start the cluster in the background and print, for `eval "$(mlms dev-cluster up)"`,
    the shell lines that point this shell's kubectl at it. A cluster already running from
    the run dir, ready and with the real node if asked for, is used as it is."""
    from mlmodelscope.devcluster.build import BuildError
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError
    from mlmodelscope.devcluster.node import NodeError
    from mlmodelscope.devcluster.registry import RegistryError

    running = _running(_run_dir(run_dir))
    if running is not None and (running.real_node or not real_node):
        _err(f"already running from {running.run_dir}; using it")
        typer.echo(_exports(running))
        return
    cluster = Cluster(_run_dir(run_dir), detach=True, real_node=real_node, log=_err)
    try:
        cluster.start(timeout=timeout)
    except (ClusterError, BuildError, NodeError, RegistryError) as exc:
        _err(str(exc))
        if not sys.stdout.isatty():  # captured by eval "$(...)": make the eval fail too
            typer.echo("false")
        raise typer.Exit(1) from exc
    typer.echo(_exports(cluster))
    _err(f"kubectl: {cluster.kubectl_dir / 'kubectl'}   logs: {cluster.logs_dir}")
    _err(f"registry: push to {cluster.registry_address} (mlms dev-cluster push)")
    _err("stop with: mlms dev-cluster down")


def _running(run_dir: Path) -> Cluster | None:
    """The cluster of ``run_dir`` when every component of it runs and the API server is ready."""
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError

    try:
        cluster = Cluster.attach(run_dir, log=_err)
    except (ClusterError, ValueError, TypeError, KeyError):
        return None
    assert cluster.state is not None
    everything = {p.name for p in cluster.state.processes}
    if not everything or set(cluster.alive_components()) != everything:
        return None
    return cluster if cluster.is_ready() else None


def shell_exports(kubeconfig: Path, run_dir: Path, kubectl_dir: Path, registry: str) -> str:
    """KUBECONFIG, the run dir (so `down`, `status` and logs find this cluster), the cluster's
    kubectl first on PATH and the registry's address (MLMS_DEV_REGISTRY, for pushes and
    ``helm install oci://$MLMS_DEV_REGISTRY/...``)."""
    return "\n".join(
        [
            f"export KUBECONFIG={shlex.quote(str(kubeconfig))}",
            f"export MLMS_DEV_CLUSTER_DIR={shlex.quote(str(run_dir))}",
            f'export PATH={shlex.quote(str(kubectl_dir))}:"$PATH"',
            f"export MLMS_DEV_REGISTRY={shlex.quote(registry)}",
        ]
    )


def _exports(cluster: Cluster) -> str:
    return shell_exports(
        cluster.kubeconfig, cluster.run_dir, cluster.kubectl_dir, cluster.registry_address
    )


@app.command("examples-claim")
def examples_claim(
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of the claim (it must exist).")
    ],
    run_dir: RunDir = None,
) -> None:
    """Give a namespace the claim `mlmodelscope-examples` holding the example models (the
    digits CNN in every format), as `default` has it from `up`."""
    from mlmodelscope.devcluster import examples
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError
    from mlmodelscope.devcluster.rest import KubeError

    try:
        cluster = Cluster.attach(_run_dir(run_dir), log=_err)
        rest = cluster.rest()
        examples.provision(rest, cluster.examples_dir, namespace)
        deadline = time.monotonic() + 60
        while not examples.claim_bound(rest, namespace):
            if time.monotonic() > deadline:
                _err(f"claim {namespace}/{examples.CLAIM} not bound after 60 s")
                raise typer.Exit(1)
            time.sleep(0.2)
    except (ClusterError, KubeError) as exc:
        _err(str(exc))
        raise typer.Exit(1) from exc
    typer.echo(f"persistentvolumeclaim/{examples.CLAIM} bound in {namespace}")


@app.command()
def down(run_dir: RunDir = None) -> None:
    """Stop every process of the cluster started by `up` (by PID), from any shell."""
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError

    try:
        cluster = Cluster.attach(_run_dir(run_dir), log=_err)
    except ClusterError as exc:
        _err(f"nothing to stop: {exc}")
        return
    leftovers = cluster.stop()
    if leftovers:
        _err(f"still running after SIGKILL: {leftovers}")
        raise typer.Exit(1)
    _err(f"stopped; logs kept in {cluster.logs_dir}")


@app.command()
def status(
    run_dir: RunDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Show each component's PID and whether it runs, the API server's readiness and nodes."""
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError

    try:
        cluster = Cluster.attach(_run_dir(run_dir), log=_err)
    except ClusterError as exc:
        _err(f"not running: {exc}")
        raise typer.Exit(1) from exc
    assert cluster.state is not None
    alive = cluster.alive_components()
    ready = bool(alive) and cluster.is_ready()
    info = {
        "ready": ready,
        "server": cluster.state.server,
        "registry": cluster.state.registry,
        "kubeconfig": cluster.state.kubeconfig,
        "components": {
            p.name: {"pid": p.pid, "running": p.name in alive} for p in cluster.state.processes
        },
        "ready_seconds": cluster.state.ready_seconds,
    }
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    else:
        typer.echo(f"server {info['server']}  ready={ready}")
        typer.echo(f"KUBECONFIG={info['kubeconfig']}")
        typer.echo(f"registry {info['registry']}")
        for p in cluster.state.processes:
            typer.echo(f"  {p.name:<24} pid {p.pid:<8} {'running' if p.name in alive else 'DOWN'}")
        if ready:
            typer.echo(cluster.kubectl("get", "nodes", "-L", "mlmodelscope.io/pool").stdout)
    raise typer.Exit(0 if ready else 1)


@app.command("load-images")
def load_images(
    images: Annotated[list[str], typer.Argument(help="Image references in the Docker engine.")],
    run_dir: RunDir = None,
) -> None:
    """Copy images from the Docker engine ($DOCKER_HOST) into the real node's containerd,
    where its pods find them (nothing is pulled); an image already loaded is skipped."""
    from mlmodelscope.devcluster import node
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError

    try:
        cluster = Cluster.attach(_run_dir(run_dir), log=_err)
    except ClusterError as exc:
        _err(f"not running: {exc}")
        raise typer.Exit(1) from exc
    if not cluster.real_node:
        _err("this cluster has no real node: start it with `mlms dev-cluster up --real-node`")
        raise typer.Exit(1)
    paths = cluster.node_paths
    try:
        loaded = node.load_images(paths.socket, paths.images_stamp, images, ["docker"], _err)
    except node.NodeError as exc:
        _err(str(exc))
        raise typer.Exit(1) from exc
    for item in loaded:
        how = "already loaded" if item.cached else f"loaded in {item.seconds:.0f}s"
        _err(f"{item.reference}: {how}")


@app.command()
def push(
    image: Annotated[str, typer.Argument(help="Image reference in the Docker engine.")],
    repository: Annotated[
        str, typer.Option("--repository", "-r", help="Repository in the registry, e.g. mlms/agent.")
    ],
    tag: Annotated[str | None, typer.Option(help="Also tag the manifest.")] = None,
    run_dir: RunDir = None,
) -> None:
    """Push an image from the Docker engine ($DOCKER_HOST) to the cluster's registry, by
    digest, and print the reference a pod uses (registry.mlmodelscope.local/REPO@sha256:…)."""
    from mlmodelscope.devcluster import registry
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError

    try:
        cluster = Cluster.attach(_run_dir(run_dir), log=_err)
        address = cluster.registry_address
    except ClusterError as exc:
        _err(f"not running: {exc}")
        raise typer.Exit(1) from exc
    if not address:
        _err("this cluster was started without a registry: restart it (mlms dev-cluster up)")
        raise typer.Exit(1)
    try:
        pushed = registry.push_docker_image(address, repository, image, tag=tag, log=_err)
    except registry.RegistryError as exc:
        _err(str(exc))
        raise typer.Exit(1) from exc
    how = "already there" if pushed.cached else f"{pushed.uploaded} blob(s) sent"
    _err(f"{image}: {how}, {pushed.present} present, {pushed.seconds:.1f}s")
    typer.echo(pushed.reference)


@app.command(hidden=True)
def execlet(run_dir: Annotated[Path, typer.Argument()]) -> None:
    """Internal: the exec kubelet process the cluster starts."""
    from mlmodelscope.devcluster.execlet import main

    main(run_dir)
    sys.exit(0)
