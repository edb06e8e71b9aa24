"""A client of a remote `mlms serve`, with the standard library only: `mlms compare --server`
and `mlms report --server` read run ids through it instead of the local results store.

:class:`RemoteRuns` has the one method :class:`~mlmodelscope.report.compare.RunStore` asks
for, ``get(run_id)``, and lists a sweep's runs for ``--sweep``; errors are
:class:`RemoteError` with a message that says what to do.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Final

from mlmodelscope import __version__

TOKEN_ENV: Final = "MLMS_TOKEN"
"""The environment variable the CLI reads the bearer token from."""
TIMEOUT_S: Final = 30.0


class RemoteError(RuntimeError):
    """The server could not be reached, refused the token, or answered something else."""


class RemoteRuns:
    """Result documents from the `mlms serve` at ``url`` (``http://host:8080``), with the
    bearer ``token`` (its read or write token) when given."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = TIMEOUT_S) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise RemoteError(f"{url!r}: not a server URL (expected http://host:port)")
        self.url = url.rstrip("/")
        self.token = token or None
        self.timeout_s = timeout_s

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The result document of ``run_id``, or None when the server has no such run."""
        path = f"/api/v1/runs/{urllib.parse.quote(run_id, safe='')}"
        found = self._get_json(path, missing_ok=True)
        if found is None:
            return None
        if not isinstance(found, dict):
            raise RemoteError(f"{self.url}{path}: not a JSON object")
        return found

    def sweep_run_ids(self, sweep: str, limit: int) -> list[str]:
        """Run ids of the runs labelled ``mlmodelscope.io/sweep=<sweep>``, newest first."""
        query = urllib.parse.urlencode({"sweep": sweep, "limit": limit})
        page = self._get_json(f"/api/v1/runs?{query}")
        if not isinstance(page, dict) or not isinstance(page.get("items"), list):
            raise RemoteError(f"{self.url}/api/v1/runs: not a page of runs")
        return [str(item["run_id"]) for item in page["items"]]

    def close(self) -> None:
        """Nothing to release (one connection per request); here for symmetry with a store."""

    def _get_json(self, path: str, *, missing_ok: bool = False) -> Any:
        headers = {"Accept": "application/json", "User-Agent": f"mlmodelscope/{__version__}"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(f"{self.url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and missing_ok:
                return None
            raise RemoteError(self._refused(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise RemoteError(f"cannot reach mlms serve at {self.url}: {reason}") from None
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RemoteError(f"{self.url}{path}: the answer is not JSON: {exc}") from None

    def _refused(self, exc: urllib.error.HTTPError) -> str:
        detail = _detail(exc)
        where = f"{self.url} answered {exc.code}"
        if exc.code == 401:
            if self.token is None:
                return f"{where}: it needs a token; set ${TOKEN_ENV} to its read token ({detail})"
            return f"{where}: it refused the token in ${TOKEN_ENV} ({detail})"
        if exc.code == 403:
            return f"{where}: the token in ${TOKEN_ENV} may not do this ({detail})"
        return f"{where}: {detail}"


def _detail(exc: urllib.error.HTTPError) -> str:
    """The ``detail`` of an error answer, else its reason."""
    try:
        body = json.loads(exc.read())
    except (OSError, ValueError):
        return str(exc.reason)
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(detail) if detail else str(exc.reason)
