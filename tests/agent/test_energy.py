"""Energy per inference and cost per 1,000: the pure arithmetic, RAPL against a fake powercap
tree, NVML against a fake pynvml, and the load generator reading a meter around its timed
windows only (on a virtual clock)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from powercap import domain

from mlmodelscope.agent.backends.base import NullBackend
from mlmodelscope.agent.cost import (
    NO_PRICE,
    NodePrice,
    cost_per_1000,
    cost_section,
    price_from_environment,
)
from mlmodelscope.agent.energy import (
    NOT_MEASURED,
    EnergyMeter,
    choose_method,
    counter_delta,
    counter_joules,
    gpu_index,
    nvml_target,
    open_meter,
    window_energy,
)
from mlmodelscope.agent.runner import headline
from mlmodelscope.agent.scenarios import BackendSUT, BatchRing, run_scenario
from mlmodelscope.contract.metric import NOT_MEASURED as SHOWN
from mlmodelscope.contract.metric import format_cost, format_energy
from mlmodelscope.contract.result import EnergyResult, EvaluationSummary, _rounded
from mlmodelscope.spec.evaluation import Scenario
from mlmodelscope.spec.status import BatchResult, IntervalMs

# ------------------------------------------------------------------------------ pure parts


def test_counter_delta_undoes_one_wrap() -> None:
    assert counter_delta(100, 250, 1000) == 150
    assert counter_delta(900, 50, 1000) == 150  # wrapped past 1000
    assert counter_delta(900, 50, None) is None  # went back, cannot wrap: a reset
    assert counter_delta(5, 5, None) == 0


def test_counter_joules_sums_domains_in_the_meters_unit() -> None:
    # two packages in microjoules, the second one wrapping
    joules = counter_joules(
        (1_000_000, 9_000_000), (3_000_000, 1_000_000), (None, 10_000_000), 1e-6
    )
    assert joules == pytest.approx(2.0 + 2.0)
    assert counter_joules((1,), (2, 3), (None,), 1.0) is None  # a domain came or went
    assert counter_joules((5,), (4,), (None,), 1.0) is None


def test_joules_per_inference_is_energy_over_samples() -> None:
    got = window_energy("rapl", 12.0, 2.0, 400, source="package-0")
    assert got.joules_per_inference == pytest.approx(0.03)
    assert got.mean_power_w == pytest.approx(6.0)
    assert got.reason is None
    assert got.to_dict()["method"] == "rapl" and got.to_dict()["source"] == "package-0"


@pytest.mark.parametrize(
    ("method", "joules", "seconds", "samples", "why"),
    [
        ("nvml", 5.0, 0.5, 100, "too short for the nvml counter"),
        ("rapl", 5.0, 0.005, 100, "too short for the rapl counter"),
        ("rapl", 0.0, 1.0, 100, "did not advance"),
        ("rapl", 5.0, 1.0, 0, "no samples"),
        ("nvml", None, 2.0, 100, "went back"),
    ],
)
def test_refused_windows_say_why(
    method: Any, joules: float | None, seconds: float, samples: int, why: str
) -> None:
    got = window_energy(method, joules, seconds, samples)
    assert got.joules_per_inference is None
    assert got.reason is not None and got.reason.startswith("not measured: ")
    assert why in got.reason


def test_the_method_follows_the_device() -> None:
    assert choose_method("cuda:0", None, "unreadable") == ("nvml", None)
    method, reason = choose_method("cuda:1", "nvidia-ml-py is not installed", None)
    assert method is None and reason is not None
    assert "cuda:1" in reason and "nvidia-ml-py is not installed" in reason
    assert choose_method("cpu", "no GPU", None) == ("rapl", None)
    assert choose_method("cpu", "no GPU", "no powercap") == (None, NOT_MEASURED)
    assert NOT_MEASURED == "not measured: no NVML GPU and no readable RAPL powercap"


def test_gpu_index_and_the_nvml_device_behind_it() -> None:
    assert [gpu_index(d) for d in ("cuda:0", "cuda:2", "cuda", "cpu", "CUDAExecutionProvider")] == [
        0,
        2,
        0,
        None,
        None,
    ]
    assert nvml_target(1, None) == 1
    assert nvml_target(1, "3,5") == 5
    assert nvml_target(0, "GPU-abc, 1") == "GPU-abc"
    assert nvml_target(2, "0,1") is None


# ------------------------------------------------------------------------------ RAPL on a fake tree


def test_rapl_reads_package_domains_and_handles_wraparound(tmp_path: Path) -> None:
    top = 262_143_328_850
    zero = domain(tmp_path, "intel-rapl:0", "package-0", top - 1_000_000, top)
    one = domain(tmp_path, "intel-rapl:1", "package-1", 5_000_000, top)
    domain(tmp_path, "intel-rapl:0:0", "core", 1, top)  # inside package-0: never added again
    (tmp_path / "intel-rapl-mmio:0").mkdir()
    meter = open_meter("cpu", powercap=tmp_path)
    assert (meter.method, meter.source, meter.unit_j) == ("rapl", "package-0, package-1", 1e-6)
    before = meter.read()
    assert before == (top - 1_000_000, 5_000_000)
    (zero / "energy_uj").write_text("2000000\n")  # wrapped: 1 J to the top, 2 J after
    (one / "energy_uj").write_text("9000000\n")  # 4 J
    after = meter.read()
    got = meter.window(before, after, seconds=0.5, samples=700)
    assert got.joules == pytest.approx(7.0)
    assert got.joules_per_inference == pytest.approx(0.01)
    assert got.method == "rapl"
    zero.joinpath("energy_uj").unlink()  # gone mid-run: that window is not measured
    assert meter.sample() is None
    lost = meter.window(after, None, seconds=0.5, samples=700)
    assert lost.reason == "not measured: the rapl counter could not be read"


def test_unreadable_or_missing_rapl_is_not_measured(tmp_path: Path) -> None:
    domain(tmp_path, "intel-rapl:0", "package-0", None, 100)  # energy_uj not there
    meter = open_meter("cpu", powercap=tmp_path)
    assert (meter.method, meter.reason) == (None, NOT_MEASURED)
    got = meter.window(None, None, seconds=1.0, samples=10)
    assert got.reason == NOT_MEASURED and got.joules is None and got.samples == 10
    assert open_meter("cpu", powercap=tmp_path / "absent").reason == NOT_MEASURED


# ------------------------------------------------------------------------------ NVML, faked


def fake_pynvml(millijoules: list[int]) -> SimpleNamespace:
    opened: list[Any] = []

    def handle_by_index(index: int) -> str:
        opened.append(index)
        return f"gpu{index}"

    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=handle_by_index,
        nvmlDeviceGetHandleByUUID=lambda uuid: opened.append(uuid) or uuid,
        nvmlDeviceGetTotalEnergyConsumption=lambda handle: millijoules[0],
        opened=opened,
    )


def test_nvml_reads_the_gpu_the_backend_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = [10_000]
    nvml = fake_pynvml(counter)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = open_meter("cuda:1", environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert (meter.method, meter.source, nvml.opened) == ("nvml", "GPU 3", [3])
    before = meter.read()
    counter[0] = 310_000  # 300 J
    got = meter.window(before, meter.read(), seconds=3.0, samples=1000)
    assert got.joules == pytest.approx(300.0)
    assert got.joules_per_inference == pytest.approx(0.3)
    assert got.mean_power_w == pytest.approx(100.0)


def test_a_gpu_without_nvml_is_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    meter = open_meter("cuda:0", environ={})
    assert meter.method is None and meter.reason is not None
    assert "nvidia-ml-py is not installed" in meter.reason and "cuda:0" in meter.reason


# ------------------------------------------------------------------------------ the load generator


class VirtualClock:
    """Simulated nanoseconds: every read costs 100 ns; the backend moves it forward."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 100
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


class Busy(NullBackend):
    def __init__(self, clock: VirtualClock, service_ns: int) -> None:
        super().__init__()
        self.clock = clock
        self.service_ns = service_ns

    def predict(self, inputs: Any) -> Any:
        self.clock.advance(self.service_ns)
        return super().predict(inputs)


def test_the_meter_is_read_around_timed_windows_only() -> None:
    """A 50 W package on the virtual clock: each window's joules per inference is the power
    times its time over its samples; warm-up queries are not metered."""
    import numpy as np

    clock = VirtualClock()
    reads: list[int] = []

    def read() -> tuple[int, ...]:
        reads.append(clock.now)
        return (clock.now * 50 // 1000,)  # 50 W in microjoules per nanosecond tick

    meter = EnergyMeter("rapl", read=read, max_ranges=(None,), unit_j=1e-6, source="package-0")
    sc = Scenario.model_validate(
        {
            "type": "SingleStream",
            "warmup": 5,
            "minQueryCount": 10,
            "minDuration": "20ms",
            "stability": {"maxWindows": 3},
        }
    )
    ring = BatchRing.for_scenario(sc, [np.zeros((8, 2), dtype=np.float32)], 2)
    sut = BackendSUT(Busy(clock, 1_000_000), clock=clock)
    m = run_scenario(sc, sut, ring, clock=clock, sleep=lambda s: None, meter=meter)
    assert len(reads) == 2 * len(m.windows)  # before and after each window, warm-up left out
    assert m.energy is not None and m.energy.method == "rapl"
    assert m.energy.samples == m.samples
    assert m.energy.joules_per_inference == pytest.approx(50 * m.duration_s / m.samples, rel=1e-3)
    document = m.to_dict()
    EnergyResult.model_validate(document["energy"])
    assert all(r["energy"]["method"] == "rapl" for r in document["repetitions"])


def test_without_a_counter_each_window_says_not_measured() -> None:
    import numpy as np

    sc = Scenario.model_validate({"type": "Offline", "warmup": 0, "minQueryCount": 3})
    ring = BatchRing.for_scenario(sc, [np.zeros((4, 2), dtype=np.float32)], 2)
    m = run_scenario(sc, BackendSUT(NullBackend()), ring, meter=EnergyMeter(None, NOT_MEASURED))
    assert m.energy is not None
    assert (m.energy.method, m.energy.reason, m.energy.samples) == (None, NOT_MEASURED, m.samples)
    bare = run_scenario(sc, BackendSUT(NullBackend()), ring)
    assert bare.energy is None and "energy" not in bare.to_dict()


# ------------------------------------------------------------------------------ cost


def test_cost_per_1000_is_the_price_over_the_throughput() -> None:
    price = NodePrice(3.20, "mlms run --price-per-node-hour")
    # 3.20 USD an hour at 2,000 samples/s: 3.20 / 3600 / 2000 * 1000
    assert cost_per_1000(price, 2000.0) == pytest.approx(3.20 / 3600 / 2)
    assert cost_per_1000(None, 2000.0) is None
    assert cost_per_1000(price, 0.0) is None
    assert cost_per_1000(price, None) is None
    with pytest.raises(ValueError, match=">= 0"):
        NodePrice(-1.0, "x")


def test_cost_section_names_the_price_or_says_why_not() -> None:
    section = cost_section(NodePrice(3.2, "mlms run --price-per-node-hour"))
    assert section == {
        "price_per_node_hour": 3.2,
        "currency": "USD",
        "source": "mlms run --price-per-node-hour",
        "reason": None,
    }
    assert cost_section(None)["reason"] == NO_PRICE
    assert NO_PRICE.startswith("not measured: ")


def test_price_from_the_environment() -> None:
    assert price_from_environment({}) is None
    assert price_from_environment({"MLMS_PRICE_PER_NODE_HOUR": " "}) is None
    got = price_from_environment({"MLMS_PRICE_PER_NODE_HOUR": "2.5"})
    assert got == NodePrice(2.5, "$MLMS_PRICE_PER_NODE_HOUR")
    annotated = price_from_environment(
        {
            "MLMS_PRICE_PER_NODE_HOUR": "4",
            "MLMS_PRICE_SOURCE": "node annotation mlmodelscope.org/price-per-node-hour",
        }
    )
    assert annotated is not None and annotated.source.startswith("node annotation")
    with pytest.raises(ValueError, match="not a number"):
        price_from_environment({"MLMS_PRICE_PER_NODE_HOUR": "cheap"})


# ------------------------------------------------------------------------------ the row


def measurement(energy: dict[str, Any] | None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "batch_size": 4,
        "scenario": "Offline",
        "latency": {"percentiles_s": {"p50": 0.001}, "mean_s": 0.001},
        "throughput_samples_per_s": 4000.0,
        "qps": 1000.0,
        "verdict": {"valid": True, "reasons": []},
    }
    if energy is not None:
        found["energy"] = energy
    return found


def test_the_row_carries_energy_and_cost() -> None:
    energy = window_energy("nvml", 40.0, 2.0, 8000, source="GPU 0").to_dict()
    row = headline(measurement(energy), None, price=NodePrice(3.6, "test"))
    assert row.joules_per_inference == pytest.approx(0.005)
    assert row.energy_method == "nvml"
    assert row.cost_per_1000 == pytest.approx(3.6 / 3600 / 4000 * 1000)
    status = row.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert {"joulesPerInference", "energyMethod", "costPer1000"} <= set(status)

    refused = window_energy("nvml", 1.0, 0.2, 8000).to_dict()  # too short: no method shown
    assert headline(measurement(refused), None).energy_method is None
    bare = headline(measurement(None), None)
    assert (bare.joules_per_inference, bare.energy_method, bare.cost_per_1000) == (None,) * 3


def test_rows_without_the_fields_still_load_and_summaries_round_them() -> None:
    old = BatchResult.model_validate({"batchSize": 1, "scenario": "SingleStream"})
    assert (old.joules_per_inference, old.cost_per_1000) == (None, None)
    row = BatchResult(
        batch_size=1,
        scenario="Offline",
        joules_per_inference=0.0123456789,
        cost_per_1000=1 / 3,
        p50_interval_ms=IntervalMs(estimate=2 / 3, low=0.61234567, high=None, repetitions=2),
    )
    summary = EvaluationSummary(status="Succeeded", results=[row])
    rounded = _rounded(summary.results[0])
    assert (rounded.joules_per_inference, rounded.cost_per_1000) == (0.0123457, 0.333333)
    interval = rounded.p50_interval_ms
    assert interval is not None and (interval.estimate, interval.low) == (0.666667, 0.612346)
    assert (interval.high, interval.repetitions) == (None, 2)


def test_reports_format_efficiency_or_say_not_measured() -> None:
    assert SHOWN == "not measured"
    assert format_energy(None) == format_cost(None) == "not measured"
    assert format_energy(0.0123) == "12.3 mJ"
    assert format_energy(2.5) == "2.5 J"
    assert format_energy(4.2e-6) == "4.2 µJ"
    assert format_energy(3e-10) == "0.3 nJ"
    assert format_cost(0.000178) == "$0.000178"
    assert format_cost(1.5) == "$1.5"
