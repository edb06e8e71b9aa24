"""Real HTTP and a real browser for the dashboard tests: the app served by uvicorn on a free
loopback port in a thread, and Debian's headless Chromium driven by Playwright (no browser
download: Playwright is pointed at the system's executable)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from system_chromium import chromium

__all__ = ["chromium", "opened_page", "screenshot_dir", "serve"]


@contextmanager
def serve(app: FastAPI, ready_path: str = "/healthz") -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a socket bound here, so no other process can
    take the port in between); yields the base URL once ``ready_path`` answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(base + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"uvicorn did not answer {base}{ready_path} within 30 s")
            time.sleep(0.05)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


def screenshot_dir(tmp_path: Path) -> Path:
    """Where the test's screenshots go: $MLMS_SCREENSHOT_DIR, else the test's tmp_path."""
    folder = Path(os.environ.get("MLMS_SCREENSHOT_DIR") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def watched_page(browser: Any, problems: list[str]) -> Any:
    """A new 1300x900 page whose script errors are added to ``problems``: uncaught errors and
    console errors (a CSP violation says "Refused to ..."), but not the browser's note on an
    HTTP error answer ("Failed to load resource": a refusal a test asks for, the favicon's
    404)."""
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    def console(message: Any) -> None:
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            problems.append(message.text)

    page.on("console", console)
    return page


@contextmanager
def opened_page(
    app: FastAPI, problems: list[str], path: str | None = None
) -> Iterator[tuple[str, Any]]:
    """``app`` served (:func:`serve`) and a :func:`watched_page` in the system's headless
    Chromium, at ``path`` when given; yields the base URL and the page, and closes the browser
    after (skips the test when there is no Chromium)."""
    executable = chromium()
    from playwright.sync_api import sync_playwright

    with serve(app) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            page = watched_page(browser, problems)
            if path is not None:
                page.goto(base + path)
            yield base, page
        finally:
            browser.close()
