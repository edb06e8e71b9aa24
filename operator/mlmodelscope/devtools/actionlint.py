"""Build actionlint, the GitHub Actions workflow linter, from its pinned Go module into the
tool cache, once (`devtools.gotool`, as Helm is built).

`ensure_actionlint()` returns ``<cache>/tools/actionlint-<version>/bin/actionlint``; it reports
its version from the module's build information, so no link flags are needed. actionlint runs
shellcheck on every ``run:`` script when a ``shellcheck`` is on PATH, and skips that check when
none is. Run ``python -m mlmodelscope.devtools.actionlint`` to build it and print the path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from mlmodelscope.devtools import gotool
from mlmodelscope.devtools.gotool import Log

ACTIONLINT_VERSION: Final = "v1.7.12"
"""github.com/rhysd/actionlint."""

ACTIONLINT: Final = gotool.GoTool(
    name="actionlint",
    label="actionlint",
    package="github.com/rhysd/actionlint/cmd/actionlint",
    version=ACTIONLINT_VERSION,
    go_min=(1, 25),  # actionlint v1.7.12's go.mod: `go 1.25.0`
    inline=False,
)


def is_built() -> bool:
    """True when the binary exists and its stamp matches the current pin."""
    return gotool.is_built(ACTIONLINT)


def ensure_actionlint(log: Log = gotool.stderr_log) -> Path:
    """The pinned actionlint binary, built first if missing or stale."""
    gotool.build(ACTIONLINT, log=log)
    return ACTIONLINT.binary()


def main(argv: list[str] | None = None) -> int:
    """``python -m mlmodelscope.devtools.actionlint [--force]``: build if needed, print the path."""
    return gotool.main(ACTIONLINT, argv)


if __name__ == "__main__":
    raise SystemExit(main())
