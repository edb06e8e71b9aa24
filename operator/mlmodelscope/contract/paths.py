"""The one hook between programs in a pod and the dev cluster's exec kubelet.

A real kubelet mounts volumes where the pod spec says, so a container path is a real path and
``container_path`` returns it unchanged. The dev cluster's exec kubelet
(:mod:`mlmodelscope.devcluster.execlet`) runs a pod's command as a host process instead: it
materializes each volume under a host folder, rewrites the mount paths it finds in ``args`` and
``env`` itself, and exports ``MLMS_PATH_MAP`` (``{mountPath: hostPath}``, JSON) for the paths a
program builds on its own (a ``pvc://`` URI, the service-account token). Everything that turns
a container path into a file to open goes through :func:`container_path`; nothing else reads
``MLMS_PATH_MAP``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

PATH_MAP_ENV: Final = "MLMS_PATH_MAP"


def parse_path_map(raw: str | None) -> dict[str, str]:
    """``MLMS_PATH_MAP``'s value as ``{containerPath: hostPath}``; empty when unset.

    Raises ValueError naming the variable when it is set but not a JSON object of strings.
    """
    if not raw:
        return {}
    try:
        mapping = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{PATH_MAP_ENV} is not valid JSON ({exc}); expected an object") from exc
    if not isinstance(mapping, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise ValueError(f"{PATH_MAP_ENV} must be a JSON object of {{containerPath: hostPath}}")
    return mapping


def _under(path: str, prefix: str) -> str | None:
    """The rest of ``path`` below ``prefix`` ('' for the prefix itself), matched on whole
    components (``/data`` holds ``/data/x``, not ``/database``); None when outside."""
    prefix = prefix.rstrip("/") or "/"
    if path == prefix:
        return ""
    head = prefix.rstrip("/") + "/"
    return path[len(head) :] if path.startswith(head) else None


def map_path(path: str, mapping: Mapping[str, str]) -> str:
    """``path`` as the process sees it, given a path map (pure; :func:`container_path` reads
    the map from the environment).

    - A path already under one of the host folders stays as it is (the exec kubelet
      substituted it in ``args``; mapping twice would nest it).
    - Otherwise the longest matching container prefix wins.
    - A path that exists on the host while its mapped twin does not is a host path already
      (a model in a cache under /tmp, with an emptyDir mounted at /tmp) and stays as it is.
    """
    if not mapping:
        return path
    if any(host and _under(path, host) is not None for host in mapping.values()):
        return path
    for container in sorted(mapping, key=len, reverse=True):
        rest = _under(path, container)
        if rest is None:
            continue
        mapped = str(Path(mapping[container]) / rest) if rest else mapping[container]
        if not Path(mapped).exists() and Path(path).exists():
            return path
        return mapped
    return path


def container_path(path: str) -> str:
    """The file behind container path ``path`` in this process: ``path`` itself in a real pod
    or outside a cluster, its host folder in an exec pod of the dev cluster."""
    return map_path(path, parse_path_map(os.environ.get(PATH_MAP_ENV)))
