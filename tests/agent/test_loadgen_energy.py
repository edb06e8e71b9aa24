"""`driver: loadgen` metered: real MLPerf LoadGen tests of a backend that advances a RAPL
counter (a powercap tree in a temporary folder) by a fixed amount per batch it computes, so the
test's joules and joules per inference are known exactly and the warm-up, outside the metered
window, is seen to be left out; and whole runs through `evaluate`, where a missing or idle
counter is recorded as not measured with the reason."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from powercap import domain

from mlmodelscope.agent import energy
from mlmodelscope.agent.backends.base import NullBackend
from mlmodelscope.agent.digits import digits_evaluation
from mlmodelscope.agent.energy import NOT_MEASURED, open_meter
from mlmodelscope.agent.loadgen_driver import run_loadgen
from mlmodelscope.agent.runner import evaluate
from mlmodelscope.agent.scenarios import BackendSUT, BatchRing
from mlmodelscope.contract.result import EnergyResult, ResultDocument
from mlmodelscope.spec import load_evaluations
from mlmodelscope.spec.evaluation import Scenario

pytest.importorskip("mlperf_loadgen")  # the dev virtualenv has it (extra `loadgen`)

UJ_PER_BATCH = 5_000
"""What the fake package's counter advances per batch computed: 5 mJ."""
START_UJ = 1_000_000
WARMUP = 3
QUICK = {"driver": "loadgen", "warmup": WARMUP, "minQueryCount": 20, "minDuration": "20ms"}
SCENARIOS: dict[str, tuple[dict[str, Any], int]] = {
    "SingleStream": ({"type": "SingleStream"}, 4),
    "MultiStream": ({"type": "MultiStream", "samplesPerQuery": 8}, 2),
    "Server": ({"type": "Server", "targetQPS": 200, "latencyBound": "1s"}, 1),
    "Offline": ({"type": "Offline"}, 4),
}
"""Scenario fields and the batch size each is run at."""


class PoweredBackend(NullBackend):
    """A null backend on a package that draws energy only while it computes: each batch
    advances the package's ``energy_uj`` by :data:`UJ_PER_BATCH`, and is counted."""

    def __init__(self, counter: Path) -> None:
        super().__init__()
        self.counter = counter
        self.batches = 0

    def predict(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.counter.write_text(f"{int(self.counter.read_text()) + UJ_PER_BATCH}\n")
        self.batches += 1
        return super().predict(inputs)


def ring_for(scenario: Scenario, batch_size: int) -> BatchRing:
    return BatchRing.for_scenario(scenario, [np.zeros((16, 2), dtype=np.float32)], batch_size)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_loadgen_test_is_metered_and_the_warmup_is_not(tmp_path: Path, name: str) -> None:
    fields, batch_size = SCENARIOS[name]
    scenario = Scenario.model_validate({**QUICK, **fields})
    package = domain(tmp_path / "powercap", "intel-rapl:0", "package-0", START_UJ, 1 << 40)
    backend = PoweredBackend(package / "energy_uj")
    meter = open_meter("cpu", powercap=tmp_path / "powercap")
    ring = ring_for(scenario, batch_size)

    entry = run_loadgen(scenario, BackendSUT(backend), ring, tmp_path / "logs", meter=meter)

    got = entry["energy"]
    EnergyResult.model_validate(got)
    warmup_batches = WARMUP * ring.batches_per_query
    test_batches = entry["samples"] // batch_size  # the samples LoadGen completed, in batches
    assert entry["samples"] == test_batches * batch_size
    assert backend.batches == warmup_batches + test_batches  # every batch run is counted
    assert int(package.joinpath("energy_uj").read_text()) == START_UJ + (
        UJ_PER_BATCH * backend.batches
    )
    assert (got["method"], got["source"], got["reason"]) == ("rapl", "package-0", None)
    assert got["samples"] == entry["samples"]
    assert got["joules"] == pytest.approx(test_batches * UJ_PER_BATCH * 1e-6)
    assert got["joules_per_inference"] == pytest.approx(UJ_PER_BATCH * 1e-6 / batch_size)
    # the metered window is LoadGen's whole test: at least its SUT span
    assert got["seconds"] >= entry["loadgen"]["sut_span_s"] > 0
    assert got["mean_power_w"] == pytest.approx(got["joules"] / got["seconds"])


def test_without_a_counter_the_loadgen_test_says_not_measured(tmp_path: Path) -> None:
    fields, batch_size = SCENARIOS["SingleStream"]
    scenario = Scenario.model_validate({**QUICK, **fields})
    meter = open_meter("cpu", powercap=tmp_path / "no-powercap")
    ring = ring_for(scenario, batch_size)
    sut = BackendSUT(NullBackend())

    entry = run_loadgen(scenario, sut, ring, tmp_path / "logs", meter=meter)

    got = entry["energy"]
    assert (got["method"], got["joules"], got["joules_per_inference"]) == (None, None, None)
    assert got["reason"] == NOT_MEASURED
    assert got["samples"] == entry["samples"] and got["seconds"] >= 0.02
    assert "energy" not in run_loadgen(scenario, sut, ring, tmp_path / "bare")  # no meter given


def run_digits(tmp_path: Path, digits_models: Path, name: str) -> dict[str, Any]:
    """The digits CNN in ONNX Runtime, SingleStream batch 1 under LoadGen, through `evaluate`
    (the agent's own meter, opened on the backend's device)."""
    scenario = {**QUICK, "type": "SingleStream", "batchSizes": [1], "accuracy": False}
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(
        yaml.safe_dump(digits_evaluation(digits_models, "onnxruntime", name, scenario=scenario))
    )
    [loaded] = load_evaluations(spec)
    evaluate(loaded, output=tmp_path / "out" / f"{name}.json")
    doc: dict[str, Any] = json.loads((tmp_path / "out" / f"{name}.json").read_text())
    ResultDocument.model_validate(doc)
    assert doc["status"] == "Succeeded" and "contract_error" not in doc
    return doc


@pytest.mark.frameworks
def test_a_loadgen_run_records_its_energy_or_why_not(
    tmp_path: Path, digits_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No powercap: not measured, with the reason. A package counter that never moves (the
    agent reads it around the test, but it does not advance): its joules, and why there is
    no figure per inference."""
    monkeypatch.setattr(energy, "POWERCAP_ROOT", tmp_path / "no-powercap")
    doc = run_digits(tmp_path, digits_models, "none")
    [m], [row] = doc["measurements"], doc["results"]
    assert m["driver"] == "loadgen"
    assert (m["energy"]["method"], m["energy"]["reason"]) == (None, NOT_MEASURED)
    assert m["energy"]["samples"] == m["samples"]
    assert (row["joules_per_inference"], row["energy_method"]) == (None, None)

    idle = tmp_path / "idle-powercap"
    domain(idle, "intel-rapl:0", "package-0", START_UJ, 1 << 40)
    monkeypatch.setattr(energy, "POWERCAP_ROOT", idle)
    doc = run_digits(tmp_path, digits_models, "idle")
    [m], [row] = doc["measurements"], doc["results"]
    assert (m["energy"]["method"], m["energy"]["joules"]) == ("rapl", 0.0)
    assert m["energy"]["reason"].startswith("not measured: the rapl counter did not advance in")
    assert row["joules_per_inference"] is None
