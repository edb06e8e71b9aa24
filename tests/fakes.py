"""One in-memory Kubernetes API server for unit tests, behind the operator's own client.

:class:`FakeKube` is a :class:`~mlmodelscope.contract.kube.Kube` whose requests go to a
:class:`FakeApiServer` instead of the network, so everything above ``Kube.request`` (404 as
None, 409 AlreadyExists as success, paging, DeleteOptions) runs as in production. The server
keeps what the operator relies on and what tests/controller/test_fake_api_server.py checks
against the real kube-apiserver: resourceVersion and 409 Conflict on a stale one, 404,
AlreadyExists, label and field selectors, paged lists, generation bumped by spec changes,
the status subresource, finalizers, garbage collection of owned objects, and a log of watch
events. It does not validate schemas, run controllers or enforce RBAC: those need the real
parts (the ``*_cluster.py`` tests). It serves every version of a resource as the same objects.

Container logs (``GET pods/NAME/log``, plain text) are what a test put in :attr:`logs`, served
with ``container``, ``tailLines`` and ``limitBytes`` as the kubelet applies them; a pod that
exists without a log there answers 400 as a container not yet started does, a missing pod
404. Not checked against the real API server (test_fake_api_server.py): its log answers come
from a kubelet, which the dev cluster's exec nodes may not serve.

Unlike the real garbage collector, which works asynchronously, dependents are deleted with
their owner, in the same request.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from mlmodelscope.contract.kube import Kube, KubeError, Watch, request_kind
from mlmodelscope.contract.kube import WatchEvent as KubeWatchEvent

CLUSTER_SCOPED: Final = frozenset(
    {"namespaces", "nodes", "customresourcedefinitions", "clusterroles", "clusterrolebindings"}
    | {"clusterkopfpeerings"}  # Kopf's peering of an operator that watches every namespace
)
WITH_STATUS: Final = frozenset(
    {"jobs", "pods", "modelevaluations", "evaluationsweeps", "workloads", "nodes", "namespaces"}
)
"""Resources with a status subresource: a write to the object keeps its status, a write to
``/status`` keeps everything else, and spec changes bump ``metadata.generation``."""
KINDS: Final = {
    "configmaps": "ConfigMap",
    "events": "Event",
    "jobs": "Job",
    "namespaces": "Namespace",
    "pods": "Pod",
    "rolebindings": "RoleBinding",
    "roles": "Role",
    "serviceaccounts": "ServiceAccount",
    "modelevaluations": "ModelEvaluation",
    "evaluationsweeps": "EvaluationSweep",
    "models": "Model",
    "nodes": "Node",
    "workloads": "Workload",
    "kopfpeerings": "KopfPeering",
    "clusterkopfpeerings": "ClusterKopfPeering",
}

Rejecter = Callable[[Mapping[str, Any]], str | None]
"""Returns why the API server refuses an object (its 422 message), or None to accept it."""


@dataclass(frozen=True)
class Target:
    """What a request path names: a collection (``name`` empty), an object, or its status."""

    group: str
    resource: str
    namespace: str
    name: str = ""
    subresource: str = ""

    @property
    def collection(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.namespace)


@dataclass(frozen=True)
class WatchEvent:
    """One change as a watch would deliver it: ADDED, MODIFIED or DELETED, with the object."""

    type: str
    resource: str
    object: dict[str, Any]
    version: int = 0
    """The server's resourceVersion after this change."""

    @property
    def key(self) -> tuple[str, str]:
        meta = self.object["metadata"]
        return (str(meta.get("namespace") or ""), str(meta["name"]))


@dataclass(frozen=True)
class Request:
    """One request as the server receives it (what :attr:`FakeApiServer.before` is given)."""

    method: str
    path: str
    body: Any
    params: Mapping[str, str]

    @property
    def target(self) -> Target:
        return parse_path(self.path)

    @property
    def key(self) -> tuple[str, str]:
        """(verb, resource), as :attr:`FakeApiServer.requests` counts it."""
        return request_kind(self.method, self.path)


def parse_path(path: str) -> Target:
    """``/api/v1/...`` or ``/apis/<group>/<version>/...`` into a :class:`Target`."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not an API path: {path}")
    if rest[0] == "namespaces" and len(rest) >= 3:
        return Target(group, rest[2], rest[1], *rest[3:5])
    if rest[0] in CLUSTER_SCOPED:
        return Target(group, rest[0], "", *rest[1:3])
    if len(rest) == 1:
        return Target(group, rest[0], "*")  # a list across namespaces
    raise ValueError(f"unsupported API path: {path}")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _terms(selector: str) -> list[str]:
    """Split a selector on the commas outside ``in (a,b)`` lists."""
    return [t.strip() for t in re.split(r",(?![^(]*\))", selector) if t.strip()]


def matches_labels(labels: Mapping[str, str], selector: str | None) -> bool:
    """Whether ``labels`` satisfy a label selector (=, ==, !=, in, notin, exists, !exists)."""
    for term in _terms(selector or ""):
        if found := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term):
            key, op, values = found[1], found[2], {v.strip() for v in found[3].split(",")}
            if (key in labels and labels[key] in values) != (op == "in"):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: Mapping[str, Any], dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


def matches_fields(obj: Mapping[str, Any], selector: str | None) -> bool:
    """Whether ``obj`` satisfies a field selector (``a.b=v``, ``a.b==v``, ``a.b!=v``)."""
    for term in _terms(selector or ""):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key) == value:
                return False
        else:
            key, value = term.replace("==", "=").split("=", 1)
            if _field(obj, key) != value:
                return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _status_body(code: int, reason: str, message: str) -> str:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
              "reason": reason, "code": code}  # fmt: skip
    return json.dumps(status)


@dataclass
class FakeApiServer:
    """Objects by (group, resource, namespace, name); see the module for what it keeps.

    ``before``, when set, is called with each :class:`Request` before it is served, and may
    change the server (a concurrent writer between a client's read and its write) or raise
    (a :class:`KubeError` as the server's answer, ``OSError`` as a lost connection) instead
    of serving it. Requests the hook itself makes to the server are served without it.
    """

    clock: Callable[[], str] = now
    """Timestamps it sets (creation, deletion): the real time, as the operator ages objects
    by the real clock."""
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    watch_log: list[WatchEvent] = field(default_factory=list)
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Requests served, by (verb, resource): ``get``, ``list``, ``create``, ``patch``, ..."""
    rejecters: dict[str, Rejecter] = field(default_factory=dict)
    before: Callable[[Request], None] | None = None
    """Called with each request before it is served (see above)."""
    logs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """Container logs by (namespace, pod, container), served as ``pods/NAME/log``."""
    _in_hook: bool = field(default=False, init=False, repr=False)
    _serving: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    """One request served at a time, as the operator makes some at once (its fanout)."""
    _changed: threading.Condition = field(
        default_factory=threading.Condition, init=False, repr=False
    )
    """Notified at each change, for the watches waiting on :attr:`watch_log`."""
    _version: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _uids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    resource_version: int = 0
    compacted: int = 0
    """A watch from an older resourceVersion answers 410 Gone (etcd compacted it)."""

    # ------------------------------------------------------------------ the HTTP surface

    def handle(self, method: str, path: str, body: Any, params: Mapping[str, str]) -> Any:
        """Serve one request as the API server would; raises KubeError on non-2xx."""
        with self._serving:
            return self._handle(method, path, body, params)

    def _handle(self, method: str, path: str, body: Any, params: Mapping[str, str]) -> Any:
        target = parse_path(path)
        self.requests[request_kind(method, path)] += 1
        if self.before is not None and not self._in_hook:
            self._in_hook = True
            try:
                self.before(Request(method, path, body, params))
            finally:
                self._in_hook = False
        if method == "GET" and not target.name:
            return self._list(target, params)
        if method == "GET" and (target.resource, target.subresource) == ("pods", "log"):
            return self._log(target, params, path)
        if method == "GET":
            return copy.deepcopy(self._existing(target, method, path))
        if method == "POST":
            return self._create(target, body, path)
        if method == "PATCH":
            return self._patch(target, body, path)
        if method == "DELETE":
            return self._delete(target, body or {}, path)
        raise KubeError(405, method, path, _status_body(405, "MethodNotAllowed", method))

    def _key(self, target: Target, name: str | None = None) -> tuple[str, str, str, str]:
        return (target.group, target.resource, target.namespace, name or target.name)

    def _existing(self, target: Target, method: str, path: str) -> dict[str, Any]:
        obj = self.objects.get(self._key(target))
        if obj is None:
            message = f'{target.resource} "{target.name}" not found'
            raise KubeError(404, method, path, _status_body(404, "NotFound", message))
        return obj

    def _list(self, target: Target, params: Mapping[str, str]) -> dict[str, Any]:
        items = [
            copy.deepcopy(obj)
            for (group, resource, namespace, _), obj in sorted(self.objects.items())
            if (group, resource) == (target.group, target.resource)
            and target.namespace in ("*", namespace)
            and matches_labels(obj["metadata"].get("labels") or {}, params.get("labelSelector"))
            and matches_fields(obj, params.get("fieldSelector"))
        ]
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or 0) or len(items)
        page = items[start : start + limit]
        meta: dict[str, Any] = {"resourceVersion": str(self.resource_version)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page}

    def _log(self, target: Target, params: Mapping[str, str], path: str) -> str:
        """A container's log as the kubelet serves it: ``tailLines`` last lines, then at most
        ``limitBytes`` bytes of them."""
        pod = self._existing(Target("", "pods", target.namespace, target.name), "GET", path)
        names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = params.get("container") or (names[0] if len(names) == 1 else "")
        if container not in names:
            message = f"container {container} is not valid for pod {target.name}"
            raise KubeError(400, "GET", path, _status_body(400, "BadRequest", message))
        text = self.logs.get((target.namespace, target.name, container))
        if text is None:
            message = (
                f'container "{container}" in pod "{target.name}" is waiting to start: '
                "ContainerCreating"
            )
            raise KubeError(400, "GET", path, _status_body(400, "BadRequest", message))
        if params.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(params["tailLines"]) :]) if int(params["tailLines"]) else ""
        if params.get("limitBytes"):
            text = text.encode()[: int(params["limitBytes"])].decode(errors="replace")
        return text

    def _create(self, target: Target, body: Mapping[str, Any], path: str) -> dict[str, Any]:
        obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._uids):05x}"
        if target.namespace and not self.objects.get(("", "namespaces", "", target.namespace)):
            message = f'namespaces "{target.namespace}" not found'
            raise KubeError(404, "POST", path, _status_body(404, "NotFound", message))
        key = self._key(target, meta.get("name"))
        if key in self.objects:
            message = f'{target.resource} "{meta["name"]}" already exists'
            raise KubeError(409, "POST", path, _status_body(409, "AlreadyExists", message))
        rejecter = self.rejecters.get(target.resource)
        refused = rejecter(obj) if rejecter else None
        if refused:
            kind = KINDS.get(target.resource, target.resource)
            message = f'{kind} "{meta["name"]}" is invalid: {refused}'
            raise KubeError(422, "POST", path, _status_body(422, "Invalid", message))
        if target.namespace:
            meta["namespace"] = target.namespace
        meta["uid"] = f"uid-{next(self._uids):06d}"
        meta["creationTimestamp"] = self.clock()
        if target.resource in WITH_STATUS:
            meta["generation"] = 1
            obj.pop("status", None)  # status is written through /status
        if target.resource == "namespaces":
            obj["status"] = {"phase": "Active"}
        obj.setdefault("kind", KINDS.get(target.resource, target.resource))
        self._store(key, obj, "ADDED", target.resource)
        return copy.deepcopy(obj)

    def _patch(self, target: Target, patch: Mapping[str, Any], path: str) -> dict[str, Any]:
        current = self._existing(target, "PATCH", path)
        wanted = ((patch.get("metadata") or {}).get("resourceVersion")) if patch else None
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            message = (
                f'Operation cannot be fulfilled on {target.resource} "{target.name}": the '
                "object has been modified; please apply your changes to the latest version "
                "and try again"
            )
            raise KubeError(409, "PATCH", path, _status_body(409, "Conflict", message))
        if target.subresource == "status":
            updated = dict(current, status=merge_patch(current.get("status"), patch.get("status")))
        else:
            updated = merge_patch(current, patch)
            if target.resource in WITH_STATUS:
                updated["status"] = copy.deepcopy(current.get("status"))
                if updated["status"] is None:
                    del updated["status"]
            for immutable in ("uid", "creationTimestamp", "generation", "namespace", "name"):
                if immutable in current["metadata"]:
                    updated["metadata"][immutable] = current["metadata"][immutable]
            if target.resource in WITH_STATUS and _spec_of(updated) != _spec_of(current):
                updated["metadata"]["generation"] = current["metadata"]["generation"] + 1
        if updated == current:
            return copy.deepcopy(current)  # a no-op patch writes nothing (no new version)
        meta = updated["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(self._key(target), target.resource, "Background")
            return copy.deepcopy(updated)
        self._store(self._key(target), updated, "MODIFIED", target.resource)
        return copy.deepcopy(updated)

    def _delete(self, target: Target, options: Mapping[str, Any], path: str) -> dict[str, Any]:
        current = self._existing(target, "DELETE", path)
        if current["metadata"].get("finalizers"):
            if not current["metadata"].get("deletionTimestamp"):
                marked = copy.deepcopy(current)
                marked["metadata"]["deletionTimestamp"] = self.clock()
                self._store(self._key(target), marked, "MODIFIED", target.resource)
                return copy.deepcopy(marked)
            return copy.deepcopy(current)
        self._remove(self._key(target), target.resource, options.get("propagationPolicy"))
        return {"kind": "Status", "status": "Success"}

    # ------------------------------------------------------------------ storage and events

    def _store(self, key: tuple[str, str, str, str], obj: dict[str, Any], kind: str,
               resource: str) -> None:  # fmt: skip
        self.resource_version = next(self._version)
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self.objects[key] = obj
        self._log_change(WatchEvent(kind, resource, copy.deepcopy(obj), self.resource_version))

    def _remove(self, key: tuple[str, str, str, str], resource: str, propagation: Any) -> None:
        gone = self.objects.pop(key)
        self.resource_version = next(self._version)
        deleted = copy.deepcopy(gone)
        deleted["metadata"]["resourceVersion"] = str(self.resource_version)
        self._log_change(WatchEvent("DELETED", resource, deleted, self.resource_version))
        uid = gone["metadata"]["uid"]
        for other_key, other in list(self.objects.items()):
            owners = other["metadata"].get("ownerReferences") or []
            if not any(ref.get("uid") == uid for ref in owners):
                continue
            if propagation == "Orphan":
                kept = [ref for ref in owners if ref.get("uid") != uid]
                other["metadata"]["ownerReferences"] = kept
            elif other_key in self.objects:
                self._remove(other_key, other_key[1], "Background")

    def _log_change(self, event: WatchEvent) -> None:
        with self._changed:
            self.watch_log.append(event)
            self._changed.notify_all()

    def wait_for_changes(self, index: int, timeout_s: float) -> list[WatchEvent]:
        """The watch events from the ``index``-th on, waiting up to ``timeout_s`` for one."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.watch_log) > index, timeout_s)
            return self.watch_log[index:]

    # ------------------------------------------------------------------ for tests

    def add_namespace(self, name: str, annotations: Mapping[str, str] | None = None) -> None:
        meta: dict[str, Any] = {"name": name}
        if annotations:
            meta["annotations"] = dict(annotations)
        self._create(Target("", "namespaces", ""), {"apiVersion": "v1", "metadata": meta}, "")

    def seed(self, collection: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``obj`` in the collection at API path ``collection``, then write its
        ``status`` through ``/status`` where status is a subresource (a create drops it), as
        a client would; returns the stored object. The server sets uid and generation; the
        creationTimestamp is ``obj``'s when it names one (the clock then), else the clock's."""
        body = copy.deepcopy(dict(obj))
        wanted = body.pop("status", None)
        created = (body.get("metadata") or {}).get("creationTimestamp")
        clock = self.clock
        if created:
            self.clock = lambda: str(created)
        try:
            stored: dict[str, Any] = self.handle("POST", collection, body, {})
        finally:
            self.clock = clock
        if wanted is None:
            return stored
        path = f"{collection}/{stored['metadata']['name']}"
        if parse_path(collection).resource in WITH_STATUS:
            path += "/status"
        patched: dict[str, Any] = self.handle("PATCH", path, {"status": wanted}, {})
        return patched

    def reject(self, resource: str, rejecter: Rejecter) -> None:
        """Refuse objects of ``resource`` that ``rejecter`` names a problem with (422)."""
        self.rejecters[resource] = rejecter

    def changes(self, since: int = 0, resource: str | None = None) -> list[WatchEvent]:
        """The watch events after the first ``since`` (optionally of one resource)."""
        return [e for e in self.watch_log[since:] if resource in (None, e.resource)]

    def of(self, resource: str, namespace: str = "") -> list[dict[str, Any]]:
        """Stored objects of ``resource`` (in ``namespace`` when given), by name."""
        return [
            copy.deepcopy(obj)
            for (_, kind, ns, _), obj in sorted(self.objects.items())
            if kind == resource and namespace in ("", ns)
        ]

    def count(self, resource: str | None = None) -> int:
        """Requests served (for ``resource`` and its subresources when given)."""
        return sum(
            n for (_, res), n in self.requests.items()
            if resource is None or res.split("/")[0] == resource
        )  # fmt: skip


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a generation counts: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class FakeKube(Kube):
    """The operator's client, answered by :class:`FakeApiServer` instead of the network."""

    def __init__(self, server: FakeApiServer | None = None) -> None:
        super().__init__(api_client=None)
        self.server = server or FakeApiServer()
        self.requests: Counter[tuple[str, str]] = Counter()
        """The requests this client made, by (verb, resource); the server counts all."""
        self._counting = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        query = dict(params or {})
        if "?" in path:
            path, _, raw = path.partition("?")
            query.update(dict(p.split("=", 1) for p in raw.split("&") if "=" in p))
        with self._counting:
            self.requests[request_kind(method, path)] += 1
        answer = self.server.handle(method, path, copy.deepcopy(body), query)
        return json.loads(json.dumps(answer))

    def text(self, path: str, params: Mapping[str, str] | None = None) -> str:
        with self._counting:
            self.requests[request_kind("GET", path)] += 1
        return str(self.server.handle("GET", path, None, dict(params or {})))

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        label_selector: str | None = None,
        timeout_s: int = 60,
    ) -> Watch:
        with self._counting:
            self.requests[("watch", request_kind("GET", path)[1])] += 1
        if int(resource_version or 0) < self.server.compacted:
            message = f"too old resource version: {resource_version} ({self.server.compacted})"
            raise KubeError(410, "WATCH", path, _status_body(410, "Expired", message))
        return FakeWatch(self.server, parse_path(path), resource_version, label_selector, timeout_s)


class FakeWatch(Watch):
    """A watch of :class:`FakeApiServer`: its changes to one collection after a
    resourceVersion, as they happen, until ``timeout_s`` or :meth:`close`."""

    def __init__(
        self,
        server: FakeApiServer,
        target: Target,
        resource_version: str,
        label_selector: str | None,
        timeout_s: float,
    ) -> None:
        super().__init__(None, "")
        self.server = server
        self.target = target
        self.after = int(resource_version or 0)
        self.label_selector = label_selector
        self.deadline = time.monotonic() + timeout_s
        self.closed = threading.Event()

    def events(self) -> Iterator[KubeWatchEvent]:
        index = 0
        while not self.closed.is_set():
            left = self.deadline - time.monotonic()
            if left <= 0:
                return
            changes = self.server.wait_for_changes(index, min(left, 0.05))
            index += len(changes)
            for change in changes:
                if change.version > self.after and self._shows(change):
                    yield KubeWatchEvent(change.type, copy.deepcopy(change.object))

    def _shows(self, change: WatchEvent) -> bool:
        meta = change.object["metadata"]
        return (
            change.resource == self.target.resource
            and self.target.namespace in ("*", "", meta.get("namespace"))
            and matches_labels(meta.get("labels") or {}, self.label_selector)
        )

    def close(self) -> None:
        self.closed.set()
