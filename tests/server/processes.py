"""The `mlms run` processes a server's launch workers started, read from /proc (Linux): which
are running, and which launch folder each runs in."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Agent:
    """An `mlms run` process of a launch: its pid and the launch's temporary folder."""

    pid: int
    folder: Path

    @property
    def evaluation(self) -> str:
        name: str = yaml.safe_load((self.folder / "spec.yaml").read_text())["metadata"]["name"]
        return name

    @property
    def result(self) -> Path:
        """Where the process writes its result document."""
        return self.folder / "results" / f"{self.evaluation}.json"


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (state, ppid, pgrp, session, ...); None: gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet has ended)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def agents_of(server_pid: int) -> list[Agent]:
    """The running `mlms run --no-store` children of ``server_pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None or stat[0] == "Z" or int(stat[1]) != server_pid:
            continue
        with suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"run" in argv and b"--no-store" in argv:
                spec = Path(argv[argv.index(b"run") + 1].decode())
                found.append(Agent(int(entry.name), spec.parent))
    return found
