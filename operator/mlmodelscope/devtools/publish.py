"""Publish the built images and the chart to the dev cluster's registry, as a release
publishes them to a real one: the install path of docs/operator.md's quick start.

Each CPU image of the bake file is pushed by digest under its repository and tag (the bake
tag without its registry: ``mlmodelscope/agent-onnxruntime:0.1.0-cpu``), the chart is
packaged and pushed to ``oci://<registry>/charts``, and a Helm values file pins every image
the chart deploys by digest, under the registry's name the real node's containerd resolves
(``registry.mlmodelscope.local``). Then::

    helm install mlmodelscope oci://127.0.0.1:<port>/charts/mlmodelscope --version 0.1.0 \\
      --plain-http -f <values file>

``python -m mlmodelscope.devtools.publish --values FILE`` builds what is not up to date,
pushes, writes FILE and prints that command. ``--images-only`` pushes the images alone, through
a registry started for the push on the dev registry's data, before any cluster runs (`make test`).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from mlmodelscope.devcluster import registry
from mlmodelscope.devtools import helm as helm_tool
from mlmodelscope.devtools.images import ROOT, Built

Log = Callable[[str], None]

CHART_DIR: Final = ROOT / "helm" / "mlmodelscope"
CHART_REPOSITORY: Final = "charts"
"""Where charts go in the registry: ``oci://<address>/charts/<chart name>``."""
AGENT_TARGET: Final = re.compile(r"^agent-(?P<framework>[a-z]+)-(?P<device>cpu|gpu)$")


class PublishError(RuntimeError):
    """A push or the chart's packaging failed; the message names the step."""


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def repository_and_tag(image: str) -> tuple[str, str]:
    """``ghcr.io/mlmodelscope/operator:0.1.0`` → (``mlmodelscope/operator``, ``0.1.0``): the
    bake tag without its registry host."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        raise PublishError(f"{image}: not a tagged image reference")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        name = rest
    return name, tag


def chart_values(references: Mapping[str, str]) -> dict[str, Any]:
    """The chart values that pin each published image by digest; ``references`` maps a bake
    target (``operator``, ``postgresql``, ``agent-<framework>-<device>``) to the reference a
    pod uses (``<registry>/<repository>@sha256:…``). Targets the chart does not deploy are
    left out."""
    values: dict[str, Any] = {}
    for target, ref in sorted(references.items()):
        repository, _, digest = ref.rpartition("@")
        if not digest.startswith("sha256:"):
            raise PublishError(f"{target}: {ref} is not a reference by digest")
        agent = AGENT_TARGET.match(target)
        if target == "operator":
            values["image"] = {"repository": repository, "digest": digest}
        elif target == "postgresql":
            values["postgresql"] = {"image": {"repository": repository, "digest": digest}}
        elif agent:
            images = values.setdefault("operator", {}).setdefault("images", {})
            images.setdefault(agent["framework"], {})[agent["device"]] = ref
    return values


def push_images(
    address: str, built: Sequence[Built], docker: Sequence[str] = ("docker",), log: Log = _stderr
) -> dict[str, registry.Pushed]:
    """Push each built image by digest, tagged as the bake file tags it; by bake target."""
    pushed = {}
    for image in built:
        repository, tag = repository_and_tag(image.tag)
        pushed[image.name] = registry.push_docker_image(
            address, repository, image.tag, docker, tag=tag, log=log
        )
    return pushed


@dataclass(frozen=True)
class ChartPushed:
    """The chart in the registry: what ``helm install`` names."""

    url: str
    """``oci://<address>/charts/<name>``."""
    version: str
    digest: str


def push_chart(address: str, helm: Path, chart: Path = CHART_DIR) -> ChartPushed:
    """``helm package`` the chart and ``helm push`` it to ``oci://<address>/charts``."""
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    name, version = str(meta["name"]), str(meta["version"])
    with tempfile.TemporaryDirectory() as tmp:
        _helm(helm, "package", str(chart), "--destination", tmp)
        package = Path(tmp) / f"{name}-{version}.tgz"
        out = _helm(
            helm, "push", str(package), f"oci://{address}/{CHART_REPOSITORY}", "--plain-http"
        )
    digest = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", out, flags=re.M)
    if digest is None:
        raise PublishError(f"helm push printed no digest:\n{out}")
    return ChartPushed(f"oci://{address}/{CHART_REPOSITORY}/{name}", version, digest[1])


def _helm(helm: Path, *args: str) -> str:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise PublishError(f"helm {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout + proc.stderr


def install_command(chart: ChartPushed, values_file: Path, release: str = "mlmodelscope") -> str:
    return (
        f"helm install {release} {chart.url} --version {chart.version} --plain-http "
        f"-f {values_file}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from mlmodelscope.devcluster.cluster import Cluster, ClusterError, default_run_dir
    from mlmodelscope.devtools import images

    parser = argparse.ArgumentParser(prog="python -m mlmodelscope.devtools.publish")
    parser.add_argument("--values", type=Path, help="the values file to write")
    parser.add_argument(
        "--images-only",
        action="store_true",
        help="push the CPU images only, through a registry started for the push on the dev "
        "registry's data (no cluster needed; a later cluster's pods pull them without a push)",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=os.environ.get("MLMS_DEV_CLUSTER_DIR") or None,
        help="the dev cluster's run dir [default: $MLMS_DEV_CLUSTER_DIR, else mlms dev-cluster's]",
    )
    parser.add_argument("--ca-bundle", type=Path, help="a CA bundle pip trusts in the build")
    args = parser.parse_args(argv)
    if args.images_only:
        return _push_images_only(args.ca_bundle)
    if args.values is None:
        parser.error("--values is required (or --images-only)")
    try:
        cluster = Cluster.attach(args.run_dir or default_run_dir(), log=_stderr)
        address = cluster.registry_address
    except ClusterError as exc:
        _stderr(f"no dev cluster running: {exc} (start one: mlms dev-cluster up --real-node)")
        return 1
    try:
        built, docker = _built_images(args.ca_bundle)
        pushed = push_images(address, built, docker)
        chart = push_chart(address, helm_tool.ensure_helm(log=_stderr))
    except (images.ImageBuildError, registry.RegistryError, PublishError) as exc:
        _stderr(str(exc))
        return 1
    values = chart_values({name: p.reference for name, p in pushed.items()})
    args.values.write_text(yaml.safe_dump(values, sort_keys=True))
    _stderr(f"pushed {len(pushed)} image(s) and {chart.url}:{chart.version} ({chart.digest})")
    sys.stdout.write(install_command(chart, args.values) + "\n")
    return 0


def _built_images(ca_bundle: Path | None) -> tuple[list[Built], list[str]]:
    """Every CPU image built (or found up to date), and the Docker CLI argv that saves them."""
    from mlmodelscope.devtools import images

    built = images.build(ca_bundle=ca_bundle)
    docker = images.docker_cli(images.ensure_engine())
    return built, ["env", f"DOCKER_HOST={docker.host}", docker.cli]


def _push_images_only(ca_bundle: Path | None) -> int:
    from mlmodelscope.devtools import images

    try:
        built, docker = _built_images(ca_bundle)
        with registry.serving(log=_stderr) as address:
            pushed = push_images(address, built, docker, log=_stderr)
    except (images.ImageBuildError, registry.RegistryError) as exc:
        _stderr(str(exc))
        return 1
    cached = sum(p.cached for p in pushed.values())
    _stderr(f"{len(pushed)} image(s) in {registry.data_dir()} ({cached} pushed before)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
