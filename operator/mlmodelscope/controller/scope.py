"""Which namespaces the operator watches: ``MLMS_OPERATOR_NAMESPACES`` read once, for every
listing and watch the operator makes beside Kopf's.

Plain names are read one namespace at a time, so a namespaced install's Roles suffice; globs
and ``!exclusions`` (or nothing: every namespace) are read cluster-wide and filtered here.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Any, Final

PLAIN_NAMESPACE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def plain_names(patterns: tuple[str, ...]) -> tuple[str, ...] | None:
    """The namespaces to read one at a time, or None when they are read cluster-wide (no
    namespace named, or a glob or exclusion among them)."""
    if patterns and all(PLAIN_NAMESPACE.match(p) for p in patterns):
        return patterns
    return None


def covers(namespace: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``patterns`` (names, globs, ``!exclusions``; empty = all) cover ``namespace``."""
    if not patterns:
        return True
    include = [p for p in patterns if not p.startswith("!")]
    exclude = [p[1:] for p in patterns if p.startswith("!")]
    included = not include or any(fnmatch.fnmatchcase(namespace, p) for p in include)
    return included and not any(fnmatch.fnmatchcase(namespace, p) for p in exclude)


def holds(obj: Mapping[str, Any], patterns: tuple[str, ...]) -> bool:
    """Whether ``patterns`` cover the namespace of the object ``obj``."""
    return covers(str((obj.get("metadata") or {}).get("namespace") or ""), patterns)
