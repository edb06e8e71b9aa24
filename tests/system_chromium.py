"""The system's Chromium for the browser tests (Playwright drives it; no browser download)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def chromium() -> str:
    """The system Chromium ($MLMS_CHROMIUM, else Debian's); skips the test when there is
    none."""
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (dev extra)")
    for candidate in (os.environ.get("MLMS_CHROMIUM"), *CHROMIUM_PATHS, shutil.which("chromium")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip(
        "no Chromium for Playwright: install Debian's (apt-get install chromium) or set "
        "$MLMS_CHROMIUM to a Chromium executable"
    )
