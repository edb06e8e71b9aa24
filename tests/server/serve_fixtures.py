"""Helpers of the `mlms serve` API tests (imported by conftest.py and the test modules; a
module name of its own, since tests/ folders are not packages)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi.testclient import TestClient

READ_TOKEN = "read-token-for-tests"
WRITE_TOKEN = "write-token-for-tests"

ClientFactory = Callable[..., TestClient]
"""``make_client(read_token=..., write_token=...)``: the app in-process (TestClient)."""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class LiveServer:
    """A real `mlms serve` process on a loopback port."""

    url: str
    store_url: str
    read_token: str
    write_token: str
