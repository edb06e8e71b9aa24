"""Plain-JSON access to the Kubernetes API: the one client of the operator and the agent.

The builders produce dicts and the handlers read dicts (Kopf bodies are dicts too), while the
official client's typed methods want pydantic models and return them. This thin layer keeps
the official client for what it is good at, configuration and authentication (kubeconfig,
in-cluster token refresh, TLS), and sends and receives plain JSON.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode

from mlmodelscope import API_GROUP, API_VERSION
from mlmodelscope.contract.paths import container_path

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
LIST_PAGE: Final = 500
"""Objects per LIST page (Kopf's own listings use ``settings.watching.chunk_size``)."""
POOL_SIZE: Final = 64
"""Connections kept open to the API server. The client's default is 5 per CPU (10 on two
cores), fewer than the operator's threads that may call at once (the 32 fanout threads that
make a reconcile's independent requests, the 16 reconciles by default, six Job and pod
handlers, the resync, the retries); past it urllib3 drops each extra connection after its
request ("Connection pool is full") and the next one opens a new TLS connection."""
CREDENTIAL_RECHECK_S: Final = 5.0
"""How often at most the client checks whether its token needs renewing
(:func:`throttle_credential_refresh`)."""
SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
EVALUATIONS: Final = "modelevaluations"
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
"""The label the Job controller puts on each pod of a Job."""
MODELS: Final = "models"
SWEEPS: Final = "evaluationsweeps"
WATCH_GONE: Final = 410
"""The status a watch answers when its resourceVersion is too old: list again."""


class KubeError(RuntimeError):
    """A non-2xx answer; ``status`` is the HTTP code, ``reason`` the Status reason."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        self.status = status
        self.body = body
        self.reason = ""
        self.message = body[:1000]
        try:
            parsed = json.loads(body)
            self.reason = str(parsed.get("reason", ""))
            self.message = str(parsed.get("message", self.message))
        except (ValueError, AttributeError):
            pass
        super().__init__(f"{method} {path}: HTTP {status}: {self.message}")


def namespaced(
    namespace: str, plural: str, name: str = "", *, group: str = "", version: str = "v1"
) -> str:
    """The REST path of a namespaced collection or object (core group when ``group`` is '')."""
    root = f"/apis/{group}/{version}" if group else f"/api/{version}"
    path = f"{root}/namespaces/{quote(namespace)}/{plural}"
    return f"{path}/{quote(name)}" if name else path


def configmap_path(namespace: str, name: str = "") -> str:
    return namespaced(namespace, "configmaps", name)


def job_path(namespace: str, name: str = "") -> str:
    return namespaced(namespace, "jobs", name, group="batch")


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, and the object (a
    BOOKMARK's carries only its resourceVersion)."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class Watch:
    """A watch of one collection, opened by :meth:`Kube.watch`: iterate :meth:`events` until
    the server closes it (its timeout), or :meth:`close` it from another thread.

    An ERROR event raises :class:`KubeError` with its Status's code (410 Gone: the
    resourceVersion is too old, so list again)."""

    def __init__(self, response: Any, path: str) -> None:
        self._response = response
        self._path = path
        self._closed = False

    def events(self) -> Iterator[WatchEvent]:
        buffer = b""
        try:
            for chunk in self._chunks():
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield self._event(json.loads(line))
        finally:
            self._response.release_conn()

    def _chunks(self) -> Iterator[bytes]:
        try:
            yield from self._response.stream(8192, decode_content=True)
        except Exception:
            if self._closed:
                return  # closed from another thread: the watch ends quietly
            raise

    def _event(self, raw: Mapping[str, Any]) -> WatchEvent:
        kind, obj = str(raw.get("type")), raw.get("object") or {}
        if kind == "ERROR":
            raise KubeError(int(obj.get("code") or 500), "WATCH", self._path, json.dumps(obj))
        return WatchEvent(kind, dict(obj))

    def close(self) -> None:
        """End the watch now: the thread in :meth:`events` returns."""
        self._closed = True
        try:
            self._response.shutdown()
        finally:
            self._response.close()


def pod_path(namespace: str, name: str = "") -> str:
    return namespaced(namespace, "pods", name)


def evaluation_path(namespace: str, name: str = "") -> str:
    return namespaced(namespace, EVALUATIONS, name, group=API_GROUP, version=API_VERSION)


def model_path(namespace: str, name: str = "") -> str:
    """A Model (the reusable model manifest kind) or the namespace's Models."""
    return namespaced(namespace, MODELS, name, group=API_GROUP, version=API_VERSION)


def sweep_path(namespace: str, name: str = "") -> str:
    """An EvaluationSweep or the namespace's EvaluationSweeps."""
    return namespaced(namespace, SWEEPS, name, group=API_GROUP, version=API_VERSION)


def all_evaluations_path() -> str:
    return f"/apis/{API_GROUP}/{API_VERSION}/{EVALUATIONS}"


def all_jobs_path() -> str:
    return "/apis/batch/v1/jobs"


@dataclass(frozen=True)
class ServiceAccount:
    """The pod's service-account files and API server address, when running in a pod.

    Paths go through ``MLMS_PATH_MAP``: the dev cluster's exec kubelet runs pods as host
    processes and mounts the projected token under a host folder, not /var/run/secrets.
    """

    server: str
    token: Path
    ca: Path
    namespace: str | None

    @classmethod
    def of_pod(cls) -> ServiceAccount | None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        token = Path(container_path(f"{SERVICE_ACCOUNT_DIR}/token"))
        if not host or not token.is_file():
            return None
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host
        ns_file = Path(container_path(f"{SERVICE_ACCOUNT_DIR}/namespace"))
        namespace = ns_file.read_text().strip() if ns_file.is_file() else None
        ca = Path(container_path(f"{SERVICE_ACCOUNT_DIR}/ca.crt"))
        return cls(f"https://{host}:{port}", token, ca, namespace)


VERBS: Final = {
    "POST": "create",
    "PATCH": "patch",
    "PUT": "update",
    "DELETE": "delete",
    "WATCH": "watch",
}

RequestObserver = Callable[[str, str, int], None]
"""Called after each request with its verb, resource (see :func:`request_kind`) and HTTP
status (0 when no answer came)."""


def request_kind(method: str, path: str) -> tuple[str, str]:
    """(verb, resource) of a request as the API server's audit log and metrics name it:
    ``get``/``list``/``watch``/``create``/``patch``/``update``/``delete``, and ``jobs``,
    ``modelevaluations/status`` (a subresource after a slash)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource, named = (rest[0], len(rest) > 1) if rest else ("", False)
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    verb = VERBS.get(method.upper(), "get" if named else "list")
    return verb, resource


def _configuration() -> Any:
    """A client configuration with room for every operator thread (:data:`POOL_SIZE`)."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.connection_pool_maxsize = POOL_SIZE
    return configuration


def throttle_credential_refresh(
    configuration: Any,
    every_s: float = CREDENTIAL_RECHECK_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run the configuration's credential hook at most once per ``every_s`` seconds.

    The official client's loaders (in-cluster and kubeconfig) install a hook that re-applies
    the whole configuration (host, CA, proxy, token) before every request, and reinstalls
    itself each time; the token it renews (read again a minute after it was read, or when a
    kubeconfig's token expires) stays valid for minutes, so checking it every few seconds
    renews it as surely for a fraction of the work."""
    hook = configuration.refresh_api_key_hook
    if hook is None:
        return
    lock = threading.Lock()
    last = [-math.inf]

    def refresh(config: Any) -> None:
        with lock:
            now = clock()
            due = now - last[0] >= every_s
            if due:
                last[0] = now
        if due:
            hook(config)
        config.refresh_api_key_hook = refresh  # the loader's hook puts itself back

    configuration.refresh_api_key_hook = refresh


class Kube:
    """JSON requests through an authenticated ``kubernetes.client.ApiClient`` (thread-safe)."""

    def __init__(
        self, api_client: Any, timeout: float = 30.0, observer: RequestObserver | None = None
    ) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.observer = observer
        """Told of every request (the operator counts its own by verb and resource)."""

    @classmethod
    def from_environment(cls) -> Kube:
        """In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config."""
        from kubernetes import config

        account = ServiceAccount.of_pod()
        if account is not None:
            return cls.in_cluster(str(account.token), str(account.ca))
        configuration = _configuration()
        api_client = config.new_client_from_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        throttle_credential_refresh(configuration)
        return cls(api_client)

    @classmethod
    def in_cluster(cls, token_file: str, ca_file: str) -> Kube:
        """In-cluster configuration from explicit token/CA paths (the dev cluster's exec
        kubelet mounts them elsewhere than /var/run/secrets)."""
        from kubernetes import client
        from kubernetes.config.incluster_config import InClusterConfigLoader

        configuration = _configuration()
        loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
            token_filename=token_file, cert_filename=ca_file
        )
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
        throttle_credential_refresh(configuration)
        return cls(client.ApiClient(configuration))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> Any:
        """One request; returns the decoded JSON answer, raises :class:`KubeError` on non-2xx."""
        text = self._send(method, path, body, params, content_type, JSON)
        return json.loads(text) if text else None

    def text(self, path: str, params: Mapping[str, str] | None = None) -> str:
        """A GET whose answer is plain text (``pods/NAME/log``); :class:`KubeError` on non-2xx."""
        return self._send("GET", path, None, params, JSON, "text/plain, */*")

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        params: Mapping[str, str] | None,
        content_type: str,
        accept: str,
    ) -> str:
        url_path = path + (f"?{urlencode(dict(params))}" if params else "")
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, _, _ = self.api_client.param_serialize(
            method=method,
            resource_path=url_path,
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(
                method, url, headers, body, None, _request_timeout=self.timeout
            )
        except Exception:
            self._observe(method, path, 0)
            raise
        self._observe(method, path, response.status)
        response.read()
        text = (response.data or b"").decode("utf-8", errors="replace")
        if not 200 <= response.status <= 299:
            raise KubeError(response.status, method, path, text)
        return text

    def _observe(self, method: str, path: str, status: int) -> None:
        if self.observer is not None:
            verb, resource = request_kind(method, path)
            self.observer(verb, resource, status)

    def get(self, path: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", path)
        return result

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def pages(
        self, path: str, label_selector: str | None = None, limit: int = LIST_PAGE
    ) -> Iterator[list[dict[str, Any]]]:
        """A LIST in pages of ``limit`` (the API server's ``continue`` tokens): a caller that
        keeps only what it needs of each page never holds thousands of objects at once."""
        for answer in self.list_answers(path, label_selector, limit):
            yield answer.get("items") or []

    def list_answers(
        self, path: str, label_selector: str | None, limit: int = LIST_PAGE
    ) -> Iterator[dict[str, Any]]:
        """A LIST's answers, one per page of ``limit``: each with its items and the
        resourceVersion the listing is at (the last page's is the one to watch from)."""
        params = {"limit": str(limit)}
        if label_selector:
            params["labelSelector"] = label_selector
        while True:
            answer: dict[str, Any] = self.request("GET", path, params=params)
            yield answer
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return
            params["continue"] = token

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return [item for page in self.pages(path, label_selector) for item in page]

    def list_at(
        self, path: str, label_selector: str | None = None
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """A LIST's objects and its resourceVersion, from which a :meth:`watch` follows it."""
        items: builtins.list[dict[str, Any]] = []
        version = ""
        for answer in self.list_answers(path, label_selector, LIST_PAGE):
            items.extend(answer.get("items") or [])
            version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        return items, version

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        label_selector: str | None = None,
        timeout_s: int = 60,
    ) -> Watch:
        """Open a watch of the collection ``path`` from ``resource_version`` (with bookmarks);
        the server ends it after ``timeout_s``. Raises :class:`KubeError` on a refusal."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        if label_selector:
            params["labelSelector"] = label_selector
        method, url, headers, _, _ = self.api_client.param_serialize(
            method="GET",
            resource_path=f"{path}?{urlencode(params)}",
            header_params={"Accept": JSON},
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(
                method, url, headers, None, None, _request_timeout=(10, timeout_s + 30)
            )
        except Exception:
            self._observe("WATCH", path, 0)
            raise
        self._observe("WATCH", path, response.status)
        if not 200 <= response.status <= 299:
            response.read()
            text = (response.data or b"").decode("utf-8", errors="replace")
            raise KubeError(response.status, "WATCH", path, text)
        return Watch(response.response, path)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", path, dict(body))
        return result

    def create_if_absent(self, path: str, body: Mapping[str, Any]) -> bool:
        """Create; an existing object of that name (409) counts as success. True if created."""
        try:
            self.create(path, body)
        except KubeError as exc:
            if exc.status == 409 and exc.reason == "AlreadyExists":
                return False
            raise
        return True

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("PATCH", path, dict(body), content_type=MERGE_PATCH)
        return result

    def delete(self, path: str, propagation: str = "Background") -> None:
        """Delete; already gone (404) is fine."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        try:
            self.request("DELETE", path, body)
        except KubeError as exc:
            if exc.status != 404:
                raise
