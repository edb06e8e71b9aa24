"""A minimal JSON client for the harness's own calls (node registration, exec kubelet).

The generated `kubernetes` client validates every object through pydantic models; the exec
kubelet patches raw status documents many times a second, so it talks plain JSON instead.
Tests and the operator still use the official client with the same kubeconfig.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode

import urllib3
import yaml

JSON: Final = "application/json"
STRATEGIC: Final = "application/strategic-merge-patch+json"
MERGE: Final = "application/merge-patch+json"


class KubeError(RuntimeError):
    """A non-2xx answer; `status` is the HTTP code (404, 409, 410, …)."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class KubeREST:
    """Bearer-token JSON access to one API server, thread-safe (urllib3 pool)."""

    def __init__(self, server: str, token: str, ca_pem: bytes) -> None:
        self.server = server.rstrip("/")
        self.token = token
        ctx = ssl.create_default_context(cadata=ca_pem.decode())
        self.http = urllib3.PoolManager(maxsize=8, ssl_context=ctx)

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeREST:
        """Read the single-context kubeconfig the dev cluster writes."""
        config = yaml.safe_load(path.read_text())
        cluster = config["clusters"][0]["cluster"]
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"])
        else:
            ca = Path(cluster["certificate-authority"]).read_bytes()
        return cls(cluster["server"], config["users"][0]["user"]["token"], ca)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        content_type: str = JSON,
        timeout: float = 30.0,
    ) -> Any:
        url = self.server + path + (f"?{urlencode(params)}" if params else "")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": JSON}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        resp = self.http.request(
            method, url, body=data, headers=headers, timeout=timeout, retries=False
        )
        text = resp.data.decode(errors="replace")
        if resp.status >= 300:
            raise KubeError(resp.status, method, path, text)
        return json.loads(text) if text else None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def create_absent(self, objects: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Create each (collection path, object); one that exists already (409) is left as
        it is."""
        for path, body in objects:
            try:
                self.create(path, body)
            except KubeError as exc:
                if exc.status != 409:
                    raise

    def patch(self, path: str, body: dict[str, Any], content_type: str = STRATEGIC) -> Any:
        return self.request("PATCH", path, body, content_type=content_type)

    def delete(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.request("DELETE", path, body)

    def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 60
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yield (type, object) from a watch; ends when the server closes it (timeout)."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        url = f"{self.server}{path}?{urlencode(params)}"
        resp = self.http.request(
            "GET",
            url,
            headers={"Authorization": f"Bearer {self.token}", "Accept": JSON},
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=timeout_seconds + 30),
            retries=False,
        )
        try:
            if resp.status >= 300:
                raise KubeError(resp.status, "WATCH", path, resp.read().decode(errors="replace"))
            buf = b""
            for chunk in resp.stream(8192, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield event["type"], event["object"]
        finally:
            resp.release_conn()


def pod_path(namespace: str, name: str = "", sub: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/pods"
    path = f"{base}/{quote(name)}" if name else base
    return f"{path}/{sub}" if sub else path
