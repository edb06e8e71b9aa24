"""Tiny OCI images for registry tests, built in memory: the pause binary in one layer and a
marker file in a second, so each test's image (and every blob but the first) is new."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _tar(members: Mapping[str, tuple[bytes, int]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Image:
    """An OCI image layout as a tar archive, and the digests a registry will know it by."""

    archive: bytes
    manifest_digest: str
    layer_digests: tuple[str, ...]

    def blob(self, digest: str) -> bytes:
        """One blob of the layout, by digest."""
        with tarfile.open(fileobj=io.BytesIO(self.archive)) as tar:
            stream = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert stream is not None
            return stream.read()


def pause_image(pause_binary: bytes, marker: str) -> Image:
    """``/pause`` (runs as 65535 until stopped) plus ``/marker`` holding ``marker``."""
    layers = [
        _tar({"pause": (pause_binary, 0o755)}),
        _tar({"marker": (marker.encode(), 0o644)}),
    ]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer) for layer in layers]},
    }
    config_bytes = _json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": _digest(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {"mediaType": LAYER_TYPE, "digest": _digest(layer), "size": len(layer)}
            for layer in layers
        ],
    }
    manifest_bytes = _json(manifest)
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST_TYPE,
                "digest": _digest(manifest_bytes),
                "size": len(manifest_bytes),
            }
        ],
    }
    blobs = [*layers, config_bytes, manifest_bytes]
    members = {
        "oci-layout": (_json({"imageLayoutVersion": "1.0.0"}), 0o644),
        **{f"blobs/sha256/{_digest(b).removeprefix('sha256:')}": (b, 0o644) for b in blobs},
        "index.json": (_json(index), 0o644),
    }
    return Image(
        archive=_tar(members),
        manifest_digest=_digest(manifest_bytes),
        layer_digests=tuple(_digest(layer) for layer in layers),
    )
