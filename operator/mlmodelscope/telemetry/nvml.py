"""GPU metrics sampled through NVML while the measurement runs, summarized as mean and max.

A background thread reads every visible GPU at ``interval_s`` (10 Hz by default): utilization,
memory used, power, SM clock and temperature. NVML calls go through ctypes, which releases the
GIL, and one sample costs a few tens of microseconds every 100 ms, so the sampler does not
disturb the measured loop in any way a latency percentile can see. No GPU, no driver or no
``nvidia-ml-py``: :func:`nvml_source` returns None and the result simply has no
``gpu_metrics``. The summarizer is pure and takes samples from any :class:`SampleSource`, so
it is unit-tested with a fake one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.1
FIELDS: tuple[str, ...] = (
    "utilization_ratio",
    "memory_used_bytes",
    "power_watts",
    "sm_clock_hertz",
    "temperature_celsius",
)
"""What is sampled per GPU, in base units (ratio 0..1, bytes, watts, hertz, degrees C)."""


@dataclass(frozen=True)
class GpuDevice:
    """A GPU as NVML names it."""

    index: int
    name: str
    uuid: str
    memory_total_bytes: int | None = None


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU; a field NVML does not support on this GPU is None."""

    index: int
    timestamp_s: float
    values: dict[str, float | None] = field(default_factory=dict)


class SampleSource(Protocol):
    """Where samples come from: NVML in production, a fake in tests."""

    def devices(self) -> Sequence[GpuDevice]:
        """The GPUs this process can see."""

    def sample(self) -> list[GpuSample]:
        """One reading of every device."""

    def close(self) -> None:
        """Release the library."""


class NvmlSource:
    """Reads GPUs through pynvml (``nvidia-ml-py``), honouring ``CUDA_VISIBLE_DEVICES``."""

    def __init__(self, pynvml: Any, handles: list[tuple[GpuDevice, Any]]) -> None:
        self._nvml = pynvml
        self._handles = handles

    def devices(self) -> Sequence[GpuDevice]:
        return [d for d, _ in self._handles]

    def sample(self) -> list[GpuSample]:
        nv = self._nvml
        now = time.time()
        out = []
        for device, handle in self._handles:
            values: dict[str, float | None] = {
                "utilization_ratio": _read(nv.nvmlDeviceGetUtilizationRates, handle, "gpu", 0.01),
                "memory_used_bytes": _read(nv.nvmlDeviceGetMemoryInfo, handle, "used"),
                "power_watts": _read(nv.nvmlDeviceGetPowerUsage, handle, scale=1e-3),
                "sm_clock_hertz": _read(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM, 1e6),
                "temperature_celsius": _read(
                    nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU
                ),
            }
            out.append(GpuSample(device.index, now, values))
        return out

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception as exc:  # shutting down is best effort
            log.debug("nvmlShutdown failed: %s", exc)


def _read(
    fn: Callable[..., Any], handle: Any, arg: str | int | None = None, scale: float = 1.0
) -> float | None:
    """One NVML field: ``fn(handle)`` (attribute ``arg`` of the result) or ``fn(handle, arg)``
    when ``arg`` is an int, times ``scale``. NotSupported (or any NVML error) reads as None."""
    try:
        if isinstance(arg, int):
            value = fn(handle, arg)
        else:
            value = fn(handle)
            if arg is not None:
                value = getattr(value, arg)
        return float(value) * scale
    except Exception:
        return None


def _visible(count: int, environ: dict[str, str] | os._Environ[str]) -> list[int | str]:
    """Which NVML devices CUDA_VISIBLE_DEVICES exposes: indices or UUID prefixes."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(range(count))
    picked: list[int | str] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        if item.isdigit():
            if int(item) < count:
                picked.append(int(item))
        elif item.startswith(("GPU-", "MIG-")):
            picked.append(item)
        else:
            break  # CUDA stops at the first invalid entry
    return picked


def nvml_source(environ: dict[str, str] | os._Environ[str] | None = None) -> NvmlSource | None:
    """An NVML source for the visible GPUs, or None when there is no GPU, driver or pynvml."""
    env = os.environ if environ is None else environ
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles: list[tuple[GpuDevice, Any]] = []
        for want in _visible(count, env):
            if isinstance(want, int):
                handle = pynvml.nvmlDeviceGetHandleByIndex(want)
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(want)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            total = _read(pynvml.nvmlDeviceGetMemoryInfo, handle, "total")
            handles.append(
                (
                    GpuDevice(
                        index=len(handles),
                        name=name.decode() if isinstance(name, bytes) else str(name),
                        uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                        memory_total_bytes=None if total is None else int(total),
                    ),
                    handle,
                )
            )
    except Exception as exc:
        log.debug("NVML device query failed: %s", exc)
        pynvml.nvmlShutdown()
        return None
    if not handles:
        pynvml.nvmlShutdown()
        return None
    return NvmlSource(pynvml, handles)


class GpuSampler:
    """Samples a source in a daemon thread between ``start`` and ``stop`` (or as a context)."""

    def __init__(self, source: SampleSource, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.source = source
        self.interval_s = interval_s
        self.samples: list[GpuSample] = []
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._stopped = 0.0

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="mlms-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            if not self._running.is_set():
                self._stop.wait(self.interval_s)
                next_at = time.monotonic()
                continue
            try:
                self.samples.extend(self.source.sample())
            except Exception as exc:  # a flaky driver must not end the evaluation
                log.debug("GPU sample failed: %s", exc)
            next_at += self.interval_s
            self._stop.wait(max(next_at - time.monotonic(), 0.0))

    def pause(self) -> None:
        """Stop taking samples until :meth:`resume` (e.g. while traced passes run)."""
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> dict[str, Any]:
        """Stop sampling and return the summary (see :func:`summarize`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._stopped = time.monotonic()
        return summarize(
            self.source.devices(), self.samples, self.interval_s, self._stopped - self._started
        )

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def summarize(
    devices: Sequence[GpuDevice],
    samples: Sequence[GpuSample],
    interval_s: float,
    duration_s: float,
) -> dict[str, Any]:
    """Mean and max of every field per device (fields never read on a device are omitted)."""
    per_device: list[dict[str, Any]] = []
    for device in devices:
        mine = [s for s in samples if s.index == device.index]
        entry: dict[str, Any] = {
            "index": device.index,
            "name": device.name,
            "uuid": device.uuid,
            "samples": len(mine),
        }
        if device.memory_total_bytes is not None:
            entry["memory_total_bytes"] = device.memory_total_bytes
        for name in FIELDS:
            values = [v for s in mine if (v := s.values.get(name)) is not None]
            if values:
                entry[name] = {"mean": sum(values) / len(values), "max": max(values)}
        per_device.append(entry)
    return {
        "source": "nvml",
        "interval_s": interval_s,
        "duration_s": duration_s,
        "devices": per_device,
    }
