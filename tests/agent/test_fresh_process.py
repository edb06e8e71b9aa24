"""A function run in a fresh process: its progress and result come back; its exception, its
crash or its silent exit come back as an error that says which, never as a result. And the
run's error for a failed repetition, which names the repetition and keeps a spec field."""

from __future__ import annotations

import os
from pathlib import Path

import fresh_work
import numpy as np
import pytest

from mlmodelscope.agent.fresh_process import (
    ChildFailure,
    FreshProcessError,
    describe_failure,
    run_in_fresh_process,
)
from mlmodelscope.agent.fresh_repetitions import (
    RepetitionError,
    RepetitionJob,
    repetition_error,
)
from mlmodelscope.agent.scenarios import BatchRing
from mlmodelscope.spec.base import SpecError
from mlmodelscope.spec.evaluation import EvaluationSpec


def test_progress_and_result_come_back_from_another_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fresh_work, "mark", "changed in the test's process")
    seen: list[tuple[int, int]] = []
    pid, job, mark = run_in_fresh_process(
        fresh_work.report_and_answer, 3, progress=lambda done, n: seen.append((done, n))
    )
    assert pid != os.getpid() and job == 3
    assert mark == "as imported"  # a new interpreter: nothing of this process's state
    assert seen == [(1, 3), (2, 3), (3, 3)]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # it has ended (and been reaped) by the time its result is here


def test_each_call_is_a_new_process() -> None:
    pids = {run_in_fresh_process(fresh_work.report_and_answer, 0)[0] for _ in range(2)}
    assert len(pids) == 2 and os.getpid() not in pids


def test_an_exception_comes_back_with_its_type_and_field() -> None:
    with pytest.raises(FreshProcessError) as caught:
        run_in_fresh_process(fresh_work.raise_spec_error, "cannot load it")
    assert caught.value.failure == ChildFailure(
        "SpecError", "spec.model.uri: cannot load it", "spec.model.uri"
    )
    assert caught.value.exitcode == 1
    assert str(caught.value) == (
        f"fresh process {caught.value.pid}: SpecError: spec.model.uri: cannot load it"
    )


def test_an_exit_without_a_result_is_an_error() -> None:
    with pytest.raises(FreshProcessError) as caught:
        run_in_fresh_process(fresh_work.exit_without_answer, 3)
    assert caught.value.exitcode == 3 and caught.value.failure is None
    assert str(caught.value) == (
        f"fresh process {caught.value.pid}: exited with code 3 before sending its result"
    )


def test_a_killed_process_is_an_error() -> None:
    with pytest.raises(FreshProcessError) as caught:
        run_in_fresh_process(fresh_work.kill_itself, None)
    assert str(caught.value).endswith(": killed by signal 9 before sending its result")


def test_a_result_that_cannot_cross_is_an_error() -> None:
    with pytest.raises(FreshProcessError) as caught:
        run_in_fresh_process(fresh_work.answer_unpicklable, None)
    assert caught.value.failure is not None
    assert "pickle" in caught.value.failure.message.lower()


def test_describe_failure() -> None:
    assert describe_failure(1, ChildFailure("OSError", "disk")) == "OSError: disk"
    assert describe_failure(-15, None) == "killed by signal 15 before sending its result"
    assert describe_failure(0, None) == "exited with code 0 before sending its result"


def _job(repetition: int) -> RepetitionJob:
    spec = EvaluationSpec.model_validate(
        {
            "model": {
                "name": "m",
                "uri": "/m.onnx",
                "format": "onnx",
                "inputs": [{"name": "x", "shape": [-1, 4]}],
            },
            "framework": {"name": "onnxruntime"},
            "dataset": {"type": "synthetic", "shape": [4]},
            "scenario": {"repetitions": 3, "repetitionProcess": "fresh"},
        }
    )
    ring = BatchRing([np.zeros((16, 4), dtype=np.float32)], 8)
    return RepetitionJob(spec, Path("/m.onnx"), None, ring, 0.0, repetition)


def test_the_runs_error_names_the_repetition_and_keeps_the_field() -> None:
    failed = FreshProcessError(41, 1, ChildFailure("UnloadableModelError", "bad", "spec.model.uri"))
    error = repetition_error(_job(1), failed)
    assert isinstance(error, SpecError) and error.field == "spec.model.uri"
    assert "repetition 2 of 3 (batch size 8) failed in its fresh process 41" in str(error)
    assert str(error).endswith("UnloadableModelError: bad")


def test_the_runs_error_without_a_field_is_not_a_spec_error() -> None:
    error = repetition_error(_job(0), FreshProcessError(41, -9, None))
    assert isinstance(error, RepetitionError) and not isinstance(error, SpecError)
    assert str(error) == (
        "repetition 1 of 3 (batch size 8) failed in its fresh process 41: "
        "killed by signal 9 before sending its result"
    )
