"""Energy per inference: the hardware's own energy counter read right before and right after
each timed window (never inside it; warm-up and the Server search are not metered). Under
``driver: loadgen`` the window is LoadGen's whole test (:func:`metered` around it).

Two counters are read, whichever the run has: NVML's board counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules) when the model runs on a GPU, and the
CPU packages' RAPL counters (``/sys/class/powercap/intel-rapl:N/energy_uj``, microjoules,
wrapping at ``max_energy_range_uj``) when it runs on the CPU and the files are readable
(Linux restricts them to root since 2020). Both count the whole board or package, idle power
and other processes included. Without either a window's energy is recorded as not measured,
with the reason.

The arithmetic (:func:`counter_joules`, :func:`window_energy`, :func:`choose_method`) is
pure; :func:`open_meter`, :func:`metered` and the readers do the I/O.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

Method = Literal["nvml", "rapl"]

POWERCAP_ROOT: Final = Path("/sys/class/powercap")
PACKAGE_DOMAIN: Final = re.compile(r"^intel-rapl:\d+$")
"""A CPU package's RAPL domain (``intel-rapl:0``); ``intel-rapl:0:0`` and the like are its
subdomains (cores, uncore, DRAM), already inside the package's figure."""
MIN_WINDOW_S: Final[Mapping[str, float]] = {"nvml": 1.0, "rapl": 0.01}
"""The shortest window whose energy per inference is reported, per counter: NVML's advances
in steps tens of milliseconds apart; RAPL's about every millisecond."""
NOT_MEASURED: Final = "not measured: no NVML GPU and no readable RAPL powercap"

Counters = tuple[int, ...]
"""One read of a meter: each domain's raw counter, in the meter's unit."""


# ---------------------------------------------------------------------------- pure parts


def counter_delta(before: int, after: int, max_range: int | None) -> int | None:
    """How far a counter advanced; one wrap past ``max_range`` is undone (RAPL's counters
    wrap every few minutes to hours). None when it went back and cannot wrap."""
    if after >= before:
        return after - before
    if max_range is None or max_range <= 0:
        return None
    return max_range - before + after


def counter_joules(
    before: Counters, after: Counters, max_ranges: Sequence[int | None], unit_j: float
) -> float | None:
    """Joules between two reads, summed over the domains; None when a domain went back."""
    if len(before) != len(after) or len(before) != len(max_ranges) or not before:
        return None
    total = 0
    for b, a, top in zip(before, after, max_ranges, strict=True):
        delta = counter_delta(b, a, top)
        if delta is None:
            return None
        total += delta
    return total * unit_j


@dataclass(frozen=True)
class WindowEnergy:
    """One timed window's energy: joules and joules per inference (per sample), or why not."""

    method: Method | None
    """The counter read: ``nvml``, ``rapl``; None: not measured."""
    joules: float | None
    seconds: float
    samples: int
    joules_per_inference: float | None
    mean_power_w: float | None
    reason: str | None = None
    """Why ``joules_per_inference`` is missing, starting ``not measured:``."""
    source: str | None = None
    """What was read, e.g. ``GPU 0`` or ``package-0, package-1``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "source": self.source,
            "joules": self.joules,
            "seconds": self.seconds,
            "samples": self.samples,
            "joules_per_inference": self.joules_per_inference,
            "mean_power_w": self.mean_power_w,
            "reason": self.reason,
        }


def not_measured(reason: str, seconds: float = 0.0, samples: int = 0) -> WindowEnergy:
    """A window with no counter read."""
    return WindowEnergy(None, None, seconds, samples, None, None, reason)


def window_energy(
    method: Method,
    joules: float | None,
    seconds: float,
    samples: int,
    *,
    source: str | None = None,
) -> WindowEnergy:
    """Joules per inference = joules / samples of the window; refused (with the reason) for
    a counter that went back or did not advance, a window too short for the counter
    (:data:`MIN_WINDOW_S`), or no samples."""
    reason: str | None = None
    shortest = MIN_WINDOW_S[method]
    if joules is None:
        reason = f"not measured: the {method} counter went back during the window"
    elif seconds < shortest:
        reason = (
            f"not measured: window {seconds:.3f} s < {shortest:g} s, too short for the "
            f"{method} counter"
        )
    elif joules <= 0:
        reason = f"not measured: the {method} counter did not advance in {seconds:.3f} s"
    elif samples <= 0:
        reason = "not measured: no samples"
    if reason is not None:
        return WindowEnergy(method, joules, seconds, samples, None, None, reason, source)
    assert joules is not None
    return WindowEnergy(
        method, joules, seconds, samples, joules / samples, joules / seconds, None, source
    )


def gpu_index(device: str) -> int | None:
    """The CUDA device index a backend's device names (``cuda:1`` -> 1, ``cuda`` -> 0);
    None for anything else (the CPU)."""
    match = re.fullmatch(r"(?:cuda|gpu)(?::(\d+))?", device.strip().lower())
    if match is None:
        return None
    return int(match.group(1) or 0)


def nvml_target(index: int, visible: str | None) -> int | str | None:
    """The NVML device (index, or UUID) behind CUDA device ``index``, through
    ``CUDA_VISIBLE_DEVICES``; None when it names fewer devices."""
    if visible is None:
        return index
    items = [part.strip() for part in visible.split(",") if part.strip()]
    if index >= len(items):
        return None
    item = items[index]
    return int(item) if item.isdigit() else item


def choose_method(
    device: str, nvml_problem: str | None, rapl_problem: str | None
) -> tuple[Method | None, str | None]:
    """Which counter measures a run on ``device``, given why each cannot be read (None: it
    can): a GPU run reads NVML only (RAPL would leave the GPU out), a CPU run RAPL."""
    if gpu_index(device) is not None:
        if nvml_problem is None:
            return "nvml", None
        return None, (
            f"not measured: the model runs on {device} and NVML's energy counter cannot be "
            f"read ({nvml_problem}); the CPU's RAPL counter would leave the GPU out"
        )
    if rapl_problem is None:
        return "rapl", None
    return None, NOT_MEASURED


# ---------------------------------------------------------------------------- the meters


@dataclass(frozen=True)
class EnergyMeter:
    """A counter to read around each timed window; ``method`` None: nothing to read
    (``reason`` says why)."""

    method: Method | None
    reason: str | None = None
    read: Callable[[], Counters] = tuple
    max_ranges: tuple[int | None, ...] = ()
    unit_j: float = 1.0
    source: str | None = None

    def sample(self) -> Counters | None:
        """One read; None when it fails (a counter that vanished or an NVML error must not
        end the measurement)."""
        try:
            return self.read()
        except Exception:
            return None

    def window(
        self, before: Counters | None, after: Counters | None, seconds: float, samples: int
    ) -> WindowEnergy:
        """The energy of a window whose counters were ``before`` and ``after``."""
        if self.method is None:
            return not_measured(self.reason or NOT_MEASURED, seconds, samples)
        if before is None or after is None:
            reason = f"not measured: the {self.method} counter could not be read"
            return not_measured(reason, seconds, samples)
        joules = counter_joules(before, after, self.max_ranges, self.unit_j)
        return window_energy(self.method, joules, seconds, samples, source=self.source)


@dataclass(frozen=True)
class MeterReads:
    """A meter's counters right before and right after a span of work (None: not read), and
    the span's seconds between the two reads."""

    before: Counters | None
    after: Counters | None
    seconds: float


def metered(
    meter: EnergyMeter,
    work: Callable[[], object],
    clock: Callable[[], int] = time.perf_counter_ns,
) -> MeterReads:
    """Run ``work`` between two reads of ``meter`` (no reads when it has no counter); the
    seconds are timed on ``clock`` (nanoseconds) inside the reads."""
    reading = meter.method is not None
    before = meter.sample() if reading else None
    start = clock()
    work()
    seconds = (clock() - start) / 1e9
    after = meter.sample() if reading else None
    return MeterReads(before, after, seconds)


@dataclass(frozen=True)
class RaplDomain:
    """One CPU package's RAPL counter."""

    name: str
    energy_path: Path
    max_range_uj: int | None


def rapl_domains(root: Path) -> tuple[list[RaplDomain], str | None]:
    """The readable package domains under ``root`` (a powercap folder), and why there are
    none when there are none."""
    if not root.is_dir():
        return [], f"{root} does not exist"
    found: list[RaplDomain] = []
    problems: list[str] = []
    for folder in sorted(root.iterdir()):
        if not PACKAGE_DOMAIN.match(folder.name):
            continue
        energy = folder / "energy_uj"
        try:
            int(energy.read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"{energy}: {getattr(exc, 'strerror', None) or exc}")
            continue
        try:
            top: int | None = int((folder / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            top = None
        try:
            name = (folder / "name").read_text().strip() or folder.name
        except OSError:
            name = folder.name
        found.append(RaplDomain(name, energy, top))
    if found:
        return found, None
    return [], "; ".join(problems) or f"no intel-rapl package domain in {root}"


def rapl_meter(domains: Sequence[RaplDomain]) -> EnergyMeter:
    """Reads every package's ``energy_uj`` (microjoules)."""
    paths = [d.energy_path for d in domains]

    def read() -> Counters:
        return tuple(int(path.read_text()) for path in paths)

    return EnergyMeter(
        "rapl",
        read=read,
        max_ranges=tuple(d.max_range_uj for d in domains),
        unit_j=1e-6,
        source=", ".join(d.name for d in domains),
    )


def nvml_meter(device: str, environ: Mapping[str, str]) -> tuple[EnergyMeter | None, str | None]:
    """NVML's energy counter of the GPU ``device`` names (millijoules, 64 bits: no wrap), or
    why it cannot be read."""
    index = gpu_index(device)
    if index is None:
        return None, "no GPU in use"
    target = nvml_target(index, environ.get("CUDA_VISIBLE_DEVICES"))
    if target is None:
        return None, f"CUDA_VISIBLE_DEVICES names no device {index}"
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
        if isinstance(target, int):
            handle = pynvml.nvmlDeviceGetHandleByIndex(target)
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(target)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)  # unsupported boards raise here
    except Exception as exc:
        return None, f"NVML: {exc}"

    def read() -> Counters:
        return (int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)),)

    meter = EnergyMeter("nvml", read=read, max_ranges=(None,), unit_j=1e-3, source=f"GPU {target}")
    return meter, None


def open_meter(
    device: str,
    *,
    powercap: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> EnergyMeter:
    """The meter for a run on ``device`` (the backend's, e.g. ``cpu`` or ``cuda:0``);
    ``powercap`` defaults to :data:`POWERCAP_ROOT`."""
    env = os.environ if environ is None else environ
    if gpu_index(device) is not None:
        nvml, nvml_problem = nvml_meter(device, env)
        _, reason = choose_method(device, nvml_problem, None)
        return nvml if nvml is not None else EnergyMeter(None, reason)
    domains, rapl_problem = rapl_domains(POWERCAP_ROOT if powercap is None else powercap)
    method, reason = choose_method(device, None, rapl_problem)
    return rapl_meter(domains) if method == "rapl" else EnergyMeter(None, reason)
