"""The start-up timeline: consecutive phases from the process's start to the first timed query,
with UTC anchors, in the result document (issue 16)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mlmodelscope
from mlmodelscope.agent import startup
from mlmodelscope.agent.backends import NullBackend
from mlmodelscope.agent.digits import digits_evaluation
from mlmodelscope.agent.scenarios import BackendSUT, BatchRing, run_scenario
from mlmodelscope.cli import app
from mlmodelscope.contract.result import StartupInfo
from mlmodelscope.spec.evaluation import Scenario


def _utc(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_process_start_is_before_the_package_import_and_now() -> None:
    found = startup.process_start_ns()
    if found is None:
        pytest.skip("no /proc/self/stat here")
    start, resolution = found
    assert 0 < resolution <= 0.1
    assert start <= mlmodelscope._IMPORT_NS + resolution * 1e9
    assert start < time.perf_counter_ns()


def test_phases_are_consecutive_and_add_up() -> None:
    timeline = startup.Timeline()
    for name in ("agent_imports", "fetch_model", "dataset"):
        timeline.mark(name)
    setup = time.perf_counter_ns()
    first = setup + 2_000_000
    doc = timeline.document(
        warmup_ns=setup, first_query_ns=first, first_latency_ns=1234, warmup_queries=3
    )
    info = StartupInfo.model_validate(doc)
    names = list(info.phases_s)
    assert names[-5:] == ["agent_imports", "fetch_model", "dataset", "measurement_setup", "warmup"]
    assert info.phases_s["warmup"] == pytest.approx(0.002)
    assert sum(info.phases_s.values()) == pytest.approx(info.to_first_timed_query_s, abs=1e-6)
    assert info.first_timed_query_s == pytest.approx(1.234e-6)
    assert info.warmup_queries == 3
    if info.process_started_at is not None:
        assert names[0] == "interpreter"
        elapsed = _utc(info.first_timed_query_at) - _utc(info.process_started_at)
        assert elapsed == pytest.approx(info.to_first_timed_query_s, abs=0.02)
    assert info.earlier_evaluations >= 0
    assert startup.Timeline().earlier_evaluations == info.earlier_evaluations + 1


def test_run_scenario_reports_the_first_timed_window_after_warm_up() -> None:
    scenario = Scenario.model_validate(
        {"type": "SingleStream", "warmup": 5, "minQueryCount": 10, "minDuration": "0s"}
    )
    ring = BatchRing([np.zeros((4, 3), dtype=np.float32)], 1)
    before = time.perf_counter_ns()
    m = run_scenario(scenario, BackendSUT(NullBackend()), ring)
    assert m.first_window_start_ns is not None and m.first_window_start_ns > before
    assert m.first_query_latency_ns is not None and m.first_query_latency_ns > 0
    assert m.warmup_queries == 5


@pytest.mark.frameworks
def test_mlms_run_records_the_startup_phases(tmp_path: Path, digits_models: Path) -> None:
    quick = {"batchSizes": [1], "warmup": 3, "minQueryCount": 10, "minDuration": "0s"}
    doc = digits_evaluation(digits_models, "onnxruntime", "startup", scenario=quick)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["run", str(spec), "-o", str(tmp_path), "--no-store"])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "startup.json").read_text())
    info = StartupInfo.model_validate(document["startup"])
    phases = list(info.phases_s)
    expected = ["cli", "command", "agent_imports", "fetch_model", "dataset", "framework_import"]
    assert [p for p in phases if p in expected] == expected
    assert phases[-4:] == ["provenance", "accuracy_pass", "measurement_setup", "warmup"]
    assert info.warmup_queries == 3
    assert sum(info.phases_s.values()) == pytest.approx(info.to_first_timed_query_s, abs=1e-6)
    assert _utc(document["started_at"]) <= _utc(info.first_timed_query_at) + 0.002
    assert _utc(info.first_timed_query_at) <= _utc(document["finished_at"]) + 0.002
    assert document["stage_durations_s"]["import framework"] >= 0
