"""Which replica acts: a distinct Kopf peering priority per replica, and the same decision for
the work the operator does outside Kopf's handlers.

Kopf pauses an operator while a live peer in its peering object has a higher *or equal*
priority, so replicas that share a priority all pause and nothing is reconciled. Unless
``MLMS_OPERATOR_PEERING_PRIORITY`` sets one, each replica therefore takes its own priority from
its start time (:func:`start_priority`): the oldest live replica acts and the others are hot
standbys. Oldest rather than newest, so a standby that restarts never preempts the replica that
is working; when the active one goes, the next oldest takes over. The priorities are negative,
so an explicit priority of 0 or more (a developer's operator) outranks every replica.

Kopf pauses only its watches and handlers. The operator's own threads (:mod:`.runtime.periodic`: the
resync, record retries, sweep resync, Kueue polling) ask :meth:`Peering.acting` before every
tick, which reads the peering objects and applies Kopf's rule, so a standby does nothing.
"""

from __future__ import annotations

import fnmatch
import getpass
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import urllib3

from mlmodelscope.contract.kube import Kube, KubeError

log = logging.getLogger(__name__)

KOPF_PEERINGS: Final = "/apis/kopf.dev/v1"
DEFAULT_LIFETIME: Final = 60
"""What Kopf assumes for a peer that states no lifetime."""


def start_priority(now_s: float | None = None, jitter: int | None = None) -> int:
    """A priority from the start time, lower for later starts: ``-(ms since 1970 * 1000 +
    jitter)``; the random jitter (0-999) separates replicas started in the same millisecond.
    About -1.7e15, within the integers every JSON reader keeps exactly (2**53)."""
    ms = int((time.time() if now_s is None else now_s) * 1000)
    return -(ms * 1000 + (random.randrange(1000) if jitter is None else jitter))


def own_identity() -> str:
    """Kopf's peer identity for this process: the pod name (``POD_ID``, set by the chart), else
    user@host with the PID and a random suffix, so two local operators never share one."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    suffix = "".join(random.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=4))
    return f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}/{suffix}"


@dataclass(frozen=True)
class Peer:
    identity: str
    priority: int
    deadline: datetime


def peers_of(body: Mapping[str, Any]) -> list[Peer]:
    """The keep-alives in a peering object's status, as Kopf writes and reads them."""
    out = []
    for identity, info in (body.get("status") or {}).items():
        if not isinstance(info, Mapping):
            continue
        try:
            seen = datetime.fromisoformat(str(info["lastseen"])) if "lastseen" in info else None
            lifetime = int(info.get("lifetime", DEFAULT_LIFETIME))
            priority = int(info.get("priority", 0))
        except (TypeError, ValueError):
            continue
        seen = seen or datetime.now(UTC)
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=UTC)
        out.append(Peer(str(identity), priority, seen + timedelta(seconds=lifetime)))
    return out


def rivals(peers: Iterable[Peer], identity: str, priority: int, now: datetime) -> list[Peer]:
    """Live peers other than us that make Kopf pause us: higher or equal priority."""
    return [
        p for p in peers if p.identity != identity and p.deadline > now and p.priority >= priority
    ]


def resuming(acting: Callable[[], bool], then: Callable[[], None]) -> Callable[[], bool]:
    """``acting``, which also calls ``then`` when it says yes after it said no: the replica
    acts again after standing by. Kopf's watches list again when Kopf resumes them; the
    operator's own watches do the same through ``then``, so an evaluation created while the
    replica stood by (and the leader did not reconcile) is reconciled."""
    lock = threading.Lock()
    stood_by = False

    def ask() -> bool:
        nonlocal stood_by
        answer = acting()
        with lock:
            resumed = answer and stood_by
            stood_by = not answer
        if resumed:
            log.info("acting again after standing by: listing the evaluations again")
            then()
        return answer

    return ask


def _matches(namespace: str, patterns: Iterable[str]) -> bool:
    """Kopf's namespace patterns: globs, ``!glob`` excludes."""
    patterns = list(patterns)
    included = any(fnmatch.fnmatchcase(namespace, p) for p in patterns if not p.startswith("!"))
    excluded = any(fnmatch.fnmatchcase(namespace, p[1:]) for p in patterns if p.startswith("!"))
    return included and not excluded


@dataclass
class Peering:
    """This replica in the peering object ``name``: a ClusterKopfPeering when ``namespaces`` is
    empty, else a KopfPeering in each watched namespace (as Kopf uses them)."""

    kube: Kube
    name: str
    identity: str
    priority: int
    namespaces: tuple[str, ...] = ()
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    _acting: bool | None = None

    def _objects(self) -> list[dict[str, Any]]:
        if not self.namespaces:
            found = self.kube.get_or_none(f"{KOPF_PEERINGS}/clusterkopfpeerings/{self.name}")
            return [found] if found else []
        spaces = list(self.namespaces)
        if any(c in ns for ns in spaces for c in "*?!"):
            listed = self.kube.list("/api/v1/namespaces")
            spaces = [n["metadata"]["name"] for n in listed]
            spaces = [ns for ns in spaces if _matches(ns, self.namespaces)]
        paths = (f"{KOPF_PEERINGS}/namespaces/{ns}/kopfpeerings/{self.name}" for ns in spaces)
        return [found for path in paths if (found := self.kube.get_or_none(path))]

    def acting(self) -> bool:
        """Whether this replica is the one that acts now: no live peer in any of its peering
        objects has a priority as high as ours (Kopf's rule). Unreadable peering objects keep
        the last answer (at first: not acting), so an API outage never makes two replicas act;
        a missing one counts as no peers, as it does for Kopf."""
        try:
            objects = self._objects()
        except (KubeError, OSError, urllib3.exceptions.HTTPError) as exc:
            log.warning("reading peering %s: %s", self.name, exc)
            return bool(self._acting)
        now = self.clock()
        ahead = [
            peer
            for body in objects
            for peer in rivals(peers_of(body), self.identity, self.priority, now)
        ]
        acting = not ahead
        if acting != self._acting:
            if acting:
                log.info("peering %s: this replica (%s) acts", self.name, self.identity)
            else:
                who = ", ".join(sorted({p.identity for p in ahead}))
                log.info("peering %s: this replica (%s) is on standby for %s", self.name,
                         self.identity, who)  # fmt: skip
        self._acting = acting
        return acting
