"""A release's image digests, pinned into the Helm chart (.github/workflows/release.yml).

`docker buildx bake --metadata-file` writes, for each target it pushed, the digest the registry
got (``containerimage.digest``: with attestations, the image index) and the image's name
(``image.name``). `read_metadata` reads those files (one per target: the workflow builds each
target in its own job) and `pin_values` writes the digests into the chart's values.yaml text:
the operator as ``image.repository``, ``image.tag`` and ``image.digest`` (PostgreSQL the same
under ``postgresql.image``), each agent ``agent-<framework>-<device>`` as
``operator.images.<framework>.<device>``, a full ``name:tag@digest`` reference. Only those
lines change, so the packaged chart keeps every comment of its values; the result is checked
by parsing both texts. `unpinned` lists what a rendered chart would still pull by tag,
`parse_helm_push` reads the chart's digest from ``helm push``, and `summary` writes the
Markdown the workflow publishes.

``python -m mlmodelscope.devtools.release pin|check|refs|record``: the workflow's steps.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

ValuePath = tuple[str, ...]

IMAGE_VALUES: Final[Mapping[str, ValuePath]] = {
    "operator": ("image",),
    "postgresql": ("postgresql", "image"),
}
"""Targets whose image the chart takes as ``repository``, ``tag`` and ``digest`` values."""
AGENT_TARGET: Final = re.compile(r"agent-(?P<framework>[a-z0-9]+)-(?P<device>cpu|gpu)")
DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
BY_DIGEST: Final = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
AGENT_SETTING: Final = re.compile(r"MLMS_OPERATOR_IMAGE_[A-Z0-9]+_(CPU|GPU)")
"""The operator's agent-image settings in the chart's ConfigMap (not _VERSION, _PULL_POLICY)."""
RELEASE_GROUP: Final = "default"
"""The bake group a release builds: every image."""


class ReleaseError(ValueError):
    """The release's inputs disagree; the message names the target, file or value."""


@dataclass(frozen=True)
class PushedImage:
    """One image the release pushed: its bake target, name, tag and the pushed digest."""

    target: str
    repository: str
    tag: str
    digest: str

    @property
    def by_digest(self) -> str:
        """``repository@digest``: what is signed, and what the operator image becomes."""
        return f"{self.repository}@{self.digest}"

    @property
    def reference(self) -> str:
        """``repository:tag@digest``: pulled by digest, the tag kept for the reader."""
        return f"{self.repository}:{self.tag}@{self.digest}"


def split_name(name: str) -> tuple[str, str]:
    """``ghcr.io/x/agent:1.0-cpu`` -> (``ghcr.io/x/agent``, ``1.0-cpu``); a registry port
    (``host:5000/agent``) is not a tag."""
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon <= slash:
        raise ReleaseError(f"image name {name!r} has no tag")
    return name[:colon], name[colon + 1 :]


# ---- bake ---------------------------------------------------------------------------------


def release_targets(bake: Mapping[str, Any], group: str = RELEASE_GROUP) -> list[str]:
    """The targets of a bake file's group, each checked to be a target of the file."""
    try:
        targets = [str(t) for t in bake["group"][group]["targets"]]
    except (KeyError, TypeError) as exc:
        raise ReleaseError(f"the bake file has no group {group!r} with targets") from exc
    missing = [t for t in targets if t not in bake.get("target", {})]
    if missing:
        raise ReleaseError(f"group {group!r} names targets the bake file lacks: {missing}")
    return targets


def read_metadata(documents: Iterable[Mapping[str, Any]]) -> dict[str, PushedImage]:
    """Every pushed target of ``docker buildx bake --metadata-file`` outputs, by target.

    Keys that are not targets (``buildx.build.warnings``) are skipped; a target without a
    digest (built, not pushed) or with two different digests is refused."""
    images: dict[str, PushedImage] = {}
    for doc in documents:
        for target, result in doc.items():
            if target.startswith("buildx.") or not isinstance(result, Mapping):
                continue
            digest = str(result.get("containerimage.digest", ""))
            if not DIGEST.fullmatch(digest):
                raise ReleaseError(f"{target}: no pushed digest in the bake metadata ({digest!r})")
            names = str(result.get("image.name", "")).split(",")
            repository, tag = split_name(names[0].strip())
            image = PushedImage(target, repository, tag, digest)
            if images.get(target, image) != image:
                raise ReleaseError(f"{target}: two results ({images[target]} and {image})")
            images[target] = image
    return images


def complete(images: Mapping[str, PushedImage], targets: Sequence[str]) -> None:
    """Refuse a release that lacks an image of ``targets`` or has one it does not know."""
    missing = sorted(set(targets) - set(images))
    extra = sorted(set(images) - set(targets))
    if missing or extra:
        raise ReleaseError(f"bake metadata lacks {missing} and has unexpected {extra}")


# ---- values.yaml --------------------------------------------------------------------------


def value_pins(images: Mapping[str, PushedImage]) -> dict[ValuePath, str]:
    """The values.yaml scalars a release sets, by path."""
    pins: dict[ValuePath, str] = {}
    for target, image in sorted(images.items()):
        agent = AGENT_TARGET.fullmatch(target)
        if target in IMAGE_VALUES:
            where = IMAGE_VALUES[target]
            pins[(*where, "repository")] = image.repository
            pins[(*where, "tag")] = image.tag
            pins[(*where, "digest")] = image.digest
        elif agent:
            pins[("operator", "images", agent["framework"], agent["device"])] = image.reference
        else:
            raise ReleaseError(f"bake target {target!r} has no place in the chart's values")
    return pins


_KEY_LINE: Final = re.compile(
    r"(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<value>(?: +[^#\s][^#]*?)?)(?P<comment> +#.*)?"
)


def set_scalars(text: str, pins: Mapping[ValuePath, str]) -> str:
    """``text`` with the scalar at each path of ``pins`` replaced (a double-quoted string),
    every other line as it was. Paths go through mappings only; each must be found once."""
    lines = text.splitlines(keepends=True)
    parents: list[tuple[int, str]] = []  # (indent, key) of the mappings around the line
    block_indent: int | None = None  # inside a `key: |` block scalar deeper than this
    found: set[ValuePath] = set()
    for number, line in enumerate(lines):
        body = line.rstrip("\r\n")
        indent = len(body) - len(body.lstrip(" "))
        if not body.strip() or body.lstrip().startswith("#"):
            continue
        if block_indent is not None and indent > block_indent:
            continue
        block_indent = None
        match = _KEY_LINE.fullmatch(body)
        if match is None:  # a list item or a flow continuation: no key of ours
            continue
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = (*(key for _, key in parents), match["key"])
        value = match["value"].strip()
        if path in pins:
            if path in found:
                raise ReleaseError(f"{'.'.join(path)} is in values.yaml twice")
            if not value or value[0] in "|>{[&*!":
                raise ReleaseError(f"{'.'.join(path)} is not a plain scalar in values.yaml")
            head = f"{match['indent']}{match['key']}: {json.dumps(pins[path])}"
            lines[number] = f"{head}{match['comment'] or ''}{line[len(body) :]}"
            found.add(path)
        if not value:
            parents.append((indent, match["key"]))
        elif value[0] in "|>":
            block_indent = indent
    missing = sorted(".".join(p) for p in set(pins) - found)
    if missing:
        raise ReleaseError(f"values.yaml has no {missing} to pin")
    return "".join(lines)


def _with(values: Any, pins: Mapping[ValuePath, str]) -> Any:
    for path, value in pins.items():
        node = values
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return values


def pin_values(text: str, images: Mapping[str, PushedImage]) -> str:
    """The chart's values.yaml with the release's digests, checked: parsed, it is the original
    with exactly the pinned values changed."""
    pins = value_pins(images)
    pinned = set_scalars(text, pins)
    try:
        want = _with(yaml.safe_load(text), pins)
    except (KeyError, TypeError) as exc:
        raise ReleaseError(f"values.yaml has no mapping for {exc}") from exc
    if yaml.safe_load(pinned) != want:
        raise ReleaseError("pinning changed more of values.yaml than the pinned values")
    return pinned


# ---- the rendered chart -------------------------------------------------------------------


def _pod_spec(manifest: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = manifest.get("spec") or {}
    kind = manifest.get("kind")
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template") if isinstance(spec, Mapping) else None
    return (template or {}).get("spec") if isinstance(template, Mapping) else None


def image_references(manifests: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Every image a rendered chart names, by where: each container's and init container's
    ``image``, and the operator's agent-image settings in ConfigMaps."""
    found: dict[str, str] = {}
    for manifest in manifests:
        where = f"{manifest.get('kind')}/{(manifest.get('metadata') or {}).get('name')}"
        pod = _pod_spec(manifest)
        if pod:
            for field in ("initContainers", "containers"):
                for container in pod.get(field) or []:
                    found[f"{where} {field}/{container.get('name')}"] = str(container["image"])
        if manifest.get("kind") == "ConfigMap":
            for key, value in (manifest.get("data") or {}).items():
                if AGENT_SETTING.fullmatch(key):
                    found[f"{where} {key}"] = str(value)
    return found


def unpinned(
    manifests: Iterable[Mapping[str, Any]], images: Mapping[str, PushedImage]
) -> list[str]:
    """What is wrong with a rendered chart as a release: an image named by tag alone, or a
    pushed image it does not name by its digest (``repository@digest``, or the agents' full
    ``repository:tag@digest`` in the operator's settings)."""
    refs = image_references(manifests)
    problems = [
        f"{where}: {ref} (not by digest)"
        for where, ref in sorted(refs.items())
        if not BY_DIGEST.fullmatch(ref)
    ]
    named = set(refs.values())
    for target, image in sorted(images.items()):
        if not {image.by_digest, image.reference} & named:
            problems.append(f"{target}: the chart does not name {image.by_digest}")
    return problems


# ---- publishing ---------------------------------------------------------------------------


def parse_helm_push(output: str) -> str:
    """``repository@digest`` of the chart ``helm push`` printed (``Pushed: ref:version`` and
    ``Digest: sha256:...``)."""
    pushed = re.search(r"^Pushed: (\S+)$", output, flags=re.M)
    digest = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", output, flags=re.M)
    if not pushed or not digest:
        raise ReleaseError(f"no 'Pushed:' and 'Digest:' lines in helm push's output:\n{output}")
    repository, _ = split_name(pushed[1])
    return f"{repository}@{digest[1]}"


def record(images: Mapping[str, PushedImage], chart: str | None = None) -> dict[str, Any]:
    """The release's digests as a JSON document (the release asset)."""
    doc: dict[str, Any] = {
        "images": {
            target: {
                "repository": image.repository,
                "tag": image.tag,
                "digest": image.digest,
                "reference": image.reference,
            }
            for target, image in sorted(images.items())
        }
    }
    if chart:
        doc["chart"] = chart
    return doc


def from_record(doc: Mapping[str, Any]) -> dict[str, PushedImage]:
    """The images of a `record` document."""
    return {
        target: PushedImage(target, str(i["repository"]), str(i["tag"]), str(i["digest"]))
        for target, i in doc["images"].items()
    }


def summary(images: Mapping[str, PushedImage], chart: str) -> str:
    """Markdown for the job summary and the release notes: every digest, and how to verify."""
    rows = [
        f"| `{target}` | `{image.repository}:{image.tag}` | `{image.digest}` |"
        for target, image in sorted(images.items())
    ]
    return "\n".join(
        [
            "## Release digests",
            "",
            f"Helm chart: `{chart}`",
            "",
            "| bake target | image | digest |",
            "| --- | --- | --- |",
            *rows,
            "",
            "Every image and the chart are signed with cosign (keyless, this workflow's identity);"
            " each image carries SBOM and provenance attestations. See docs/install.md,"
            ' "Installing a release".',
            "",
        ]
    )


# ---- command line -------------------------------------------------------------------------


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReleaseError(f"{path}: {exc}") from exc


def _pin(args: argparse.Namespace) -> None:
    targets = release_targets(_load_json(args.bake))
    images = read_metadata(_load_json(path) for path in args.metadata)
    complete(images, targets)
    args.values.write_text(pin_values(args.values.read_text(), images))
    args.digests.write_text(json.dumps(record(images), indent=2) + "\n")
    for image in images.values():
        sys.stdout.write(f"pinned {image.target}: {image.reference}\n")


def _check(args: argparse.Namespace) -> None:
    images = from_record(_load_json(args.digests))
    manifests = [m for m in yaml.safe_load_all(args.rendered.read_text()) if m]
    problems = unpinned(manifests, images)
    if problems:
        raise ReleaseError("the pinned chart still pulls by tag:\n  " + "\n  ".join(problems))
    sys.stdout.write(f"every image of the chart is pinned by digest ({len(images)} images)\n")


def _refs(args: argparse.Namespace) -> None:
    for image in from_record(_load_json(args.digests)).values():
        sys.stdout.write(f"{image.by_digest}\n")


def _record(args: argparse.Namespace) -> None:
    images = from_record(_load_json(args.digests))
    chart = parse_helm_push(args.helm_push.read_text())
    args.out.write_text(json.dumps(record(images, chart), indent=2) + "\n")
    with args.markdown.open("a") as out:
        out.write(summary(images, chart))
    sys.stdout.write(f"{chart}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mlmodelscope.devtools.release COMMAND``; exit 1 with the reason on stderr."""
    parser = argparse.ArgumentParser(prog="python -m mlmodelscope.devtools.release")
    commands = parser.add_subparsers(required=True)
    pin = commands.add_parser("pin", help="write the pushed digests into a values.yaml")
    pin.add_argument("--bake", type=Path, required=True, help="images/docker-bake.json")
    pin.add_argument("--values", type=Path, required=True, help="values.yaml to rewrite")
    pin.add_argument("--digests", type=Path, required=True, help="where to write digests.json")
    pin.add_argument("metadata", type=Path, nargs="+", help="bake --metadata-file outputs")
    pin.set_defaults(run=_pin)
    check = commands.add_parser("check", help="fail unless a rendered chart pins every image")
    check.add_argument("--digests", type=Path, required=True)
    check.add_argument("rendered", type=Path, help="`helm template` output")
    check.set_defaults(run=_check)
    refs = commands.add_parser("refs", help="print repository@digest of every image")
    refs.add_argument("digests", type=Path)
    refs.set_defaults(run=_refs)
    rec = commands.add_parser("record", help="add the chart's digest; print its reference")
    rec.add_argument("--digests", type=Path, required=True)
    rec.add_argument("--helm-push", type=Path, required=True, help="helm push's output")
    rec.add_argument("--out", type=Path, required=True, help="the release's JSON record")
    rec.add_argument("--markdown", type=Path, required=True, help="append the summary here")
    rec.set_defaults(run=_record)
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except ReleaseError as exc:
        sys.stderr.write(f"release: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
