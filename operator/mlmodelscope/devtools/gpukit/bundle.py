"""The bundle: the wheels the GPU machine lacks, downloaded here and unpacked there.

``prepare`` runs ``pip download`` for CPython 3.12 manylinux x86_64 at the versions pinned in
constraints.txt, checks that the working tree plus the wheels stay well under the transfer
limit, and returns the remote call to make. ``install`` (on the GPU machine, no network)
unpacks each wheel into a folder put on ``PYTHONPATH``, unless the machine already has that
distribution at the same or a newer version, so its torch and numpy stay what they are.
Unpacking is all ``pip install --target`` would do for these wheels (no scripts, no
``.data``), and it needs neither pip nor a resolver there. Standard library only.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Final

WHEELS: Final = Path(".gpukit/wheels")
TRANSFER_LIMIT_BYTES: Final = 64 << 20
BUDGET_BYTES: Final = 32 << 20
"""Wheels plus working tree must stay under this: half the limit, room for the tree to grow."""
PACKAGES: Final = (
    # the core's dependencies (pyproject.toml) the machine lacks, and theirs
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-extensions",
    "typing-inspection",
    "packaging",
    # tracing (the telemetry extra's SDK; no exporter: traces go to a file)
    "opentelemetry-api",
    "opentelemetry-sdk",
    "opentelemetry-semantic-conventions",
)
GPU_MACHINE_HAS: Final = (
    "torch", "numpy", "onnx", "onnxruntime", "nvidia-ml-py", "pyyaml", "rich", "typer",
    "prometheus-client",
)  # fmt: skip
"""What the GPU machine has installed (issue 29): the core's other dependencies."""
TARGET: Final = (
    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
    "--platform", "manylinux2014_x86_64",
)  # fmt: skip
RUN_COMMAND: Final = 'PYTHONPATH=operator python3 -m mlmodelscope.devtools.gpukit run "$OUT"'
RUN_TIMEOUT_S: Final = 540
"""The remote call's limit: the kit's 480 s plus start-up and install, under the 600 s cap."""


def normalize(name: str) -> str:
    """PEP 503: ``Typing_Extensions`` and ``typing.extensions`` are ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(constraints: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """``name==version`` for each package, from constraints.txt; a missing pin is an error."""
    pinned: dict[str, str] = {}
    for line in constraints.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pinned[normalize(name)] = version.strip()
    missing = [p for p in packages if normalize(p) not in pinned]
    if missing:
        raise ValueError(f"{constraints} pins no version of {missing}")
    return [f"{p}=={pinned[normalize(p)]}" for p in packages]


def download(root: Path, dest: Path) -> list[Path]:
    """``pip download`` the pinned wheels (and anything they need, pinned too) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    constraints = root / "constraints.txt"
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        *TARGET, "-c", str(constraints), "-d", str(dest), *pins(constraints),
    ]  # fmt: skip
    subprocess.run(command, check=True, timeout=600)
    return sorted(dest.glob("*.whl"))


def tree_bytes(root: Path) -> int:
    """Bytes of what the remote call copies besides the carried wheels: tracked files and
    untracked files git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    paths = (root / p for p in listed.decode().split("\0") if p)
    return sum(p.stat().st_size for p in paths if p.is_file())


@dataclass(frozen=True)
class SizeCheck:
    """The transfer's size against the budget."""

    wheels_bytes: int
    tree_bytes: int
    budget_bytes: int = BUDGET_BYTES

    @property
    def total_bytes(self) -> int:
        return self.wheels_bytes + self.tree_bytes

    @property
    def ok(self) -> bool:
        return self.total_bytes <= self.budget_bytes

    def describe(self) -> str:
        mib = 1 << 20
        verdict = "within" if self.ok else "OVER"
        return (
            f"wheels {self.wheels_bytes / mib:.1f} MiB + tree {self.tree_bytes / mib:.1f} MiB = "
            f"{self.total_bytes / mib:.1f} MiB, {verdict} the {self.budget_bytes / mib:.0f} MiB "
            f"budget (transfer limit {TRANSFER_LIMIT_BYTES / mib:.0f} MiB)"
        )


def size_check(wheels: Path, tree: int) -> SizeCheck:
    return SizeCheck(sum(p.stat().st_size for p in wheels.glob("*.whl")), tree)


def run_call() -> dict[str, Any]:
    """The arguments of the session's ``run`` tool call that runs the kit on the GPU machine."""
    return {"command": RUN_COMMAND, "carry": [str(WHEELS)], "timeout_s": RUN_TIMEOUT_S}


def prepare(root: Path) -> tuple[list[Path], SizeCheck]:
    """Download the wheels into ``root/.gpukit/wheels`` and measure the transfer."""
    wheels = download(root, root / WHEELS)
    return wheels, size_check(root / WHEELS, tree_bytes(root))


# ------------------------------------------------------------------ on the GPU machine


def wheel_name(path: Path) -> tuple[str, str]:
    """(normalized distribution, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return normalize(name), version


def fits_this_python(path: Path) -> bool:
    """False for a CPython-specific wheel built for another version (a cp312 wheel on 3.11)."""
    python_tag = path.name.split("-")[-3]
    ours = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return not python_tag.startswith("cp") or ours in python_tag.split(".")


def _release(version: str) -> tuple[int, ...]:
    match = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(n) for n in match.group().split(".")) if match else ()


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def install(wheels: Path, site: Path) -> dict[str, Any]:
    """Unpack into ``site`` each wheel whose distribution is missing or older here; the
    caller puts ``site`` on ``PYTHONPATH``. Returns what was unpacked, what was kept, and the
    wheels for another Python (unfit: a dry run on 3.11 of the bundle for 3.12)."""
    unpacked: list[str] = []
    kept: list[str] = []
    unfit: list[str] = []
    shutil.rmtree(site, ignore_errors=True)  # a warm machine keeps an earlier run's
    site.mkdir(parents=True)
    for wheel in sorted(wheels.glob("*.whl")):
        name, version = wheel_name(wheel)
        if not fits_this_python(wheel):
            unfit.append(wheel.name)
            continue
        have = installed_version(name)
        if have is not None and _release(have) >= _release(version):
            kept.append(f"{name} {have} (bundle {version})")
            continue
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        unpacked.append(f"{name} {version}" + (f" (over {have})" if have else ""))
    return {
        "wheels": str(wheels),
        "site": str(site),
        "unpacked": unpacked,
        "kept": kept,
        "unfit": unfit,
    }


def main_prepare(root: Path) -> int:
    """Print what was downloaded, the size check and the remote call."""
    wheels, check = prepare(root)
    for wheel in wheels:
        print(f"  {wheel.name}  {wheel.stat().st_size / 1024:.0f} KiB")  # noqa: T201
    print(check.describe())  # noqa: T201
    if not check.ok:
        return 1
    print("run this on the GPU machine (the session's run tool):")  # noqa: T201
    print(json.dumps(run_call(), indent=2))  # noqa: T201
    return 0
