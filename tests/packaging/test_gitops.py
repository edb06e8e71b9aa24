"""The Argo CD health check (examples/gitops), run in Lua 5.1 as Argo CD's gopher-lua runs it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GITOPS = ROOT / "examples" / "gitops"
SCRIPT = (GITOPS / "health.lua").read_text()
KINDS = ("ModelEvaluation", "EvaluationSweep", "Model")

lupa = pytest.importorskip("lupa.lua51", reason="pip install lupa (the dev extra has it)")

BASE: dict[str, Any] = {
    "apiVersion": "mlmodelscope.io/v1alpha1",
    "kind": "ModelEvaluation",
    "metadata": {"name": "digits-onnxruntime", "namespace": "ml", "generation": 2},
    "spec": {"model": {"name": "digits-cnn"}},
}


def health(obj: dict[str, Any], script: str = SCRIPT) -> dict[str, Any]:
    """Run the script the way Argo CD does: `obj` global, the returned table is the health."""
    runtime = lupa.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(script)
    return {str(k): v for k, v in result.items()}


def with_status(status: dict[str, Any] | None, **meta: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj["metadata"].update(meta)
    if status is not None:
        obj["status"] = status
    return obj


def condition(kind: str, reason: str = "", message: str = "", status: str = "True") -> Any:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def test_argocd_cm_holds_the_script_for_every_kind() -> None:
    cm = yaml.safe_load((GITOPS / "argocd-cm.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    for kind in KINDS:
        key = f"resource.customizations.health.mlmodelscope.io_{kind}"
        assert cm["data"][key] == SCRIPT, f"{key} differs from health.lua"


def test_succeeded_is_healthy_with_the_headline_numbers() -> None:
    status = {
        "phase": "Succeeded",
        "observedGeneration": 2,
        "conditions": [condition("Succeeded", "Completed", "evaluation finished")],
        "summary": {"batchSize": 1, "p50Ms": 0.123456, "throughput": 8123.4, "top1": 0.9833},
    }
    result = health(with_status(status))
    assert result["status"] == "Healthy"
    assert result["message"] == "Succeeded: p50 0.123 ms, 8123 samples/s, top-1 0.9833"


def test_succeeded_without_summary_uses_the_condition() -> None:
    status = {"phase": "Succeeded", "conditions": [condition("Succeeded", "Completed", "done")]}
    assert health(with_status(status)) == {"status": "Healthy", "message": "Completed: done"}


@pytest.mark.parametrize("phase", ["Pending", "Queued", "Running"])
def test_unfinished_phases_are_progressing(phase: str) -> None:
    result = health(with_status({"phase": phase, "observedGeneration": 2}))
    assert result == {"status": "Progressing", "message": phase}


def test_queued_shows_the_limit() -> None:
    status = {
        "phase": "Queued",
        "conditions": [condition("Queued", "ConcurrencyLimit", "3 of 3 evaluations running")],
    }
    result = health(with_status(status))
    assert result == {
        "status": "Progressing",
        "message": "ConcurrencyLimit: 3 of 3 evaluations running",
    }


def test_pending_shows_why() -> None:
    status = {
        "phase": "Pending",
        "conditions": [
            condition("Valid", "SpecValid", "ok"),
            condition("Scheduled", "Unschedulable", "0/5 nodes are available", status="False"),
        ],
    }
    result = health(with_status(status))
    assert result["status"] == "Progressing"
    assert result["message"] == "Unschedulable: 0/5 nodes are available"


def test_failed_is_degraded_with_the_reason() -> None:
    status = {
        "phase": "Failed",
        "observedGeneration": 2,
        "message": "the agent failed",
        "conditions": [
            condition("Succeeded", "", "", status="False"),
            condition("Failed", "InvalidSpec", "spec.model.uri: no such file"),
        ],
    }
    result = health(with_status(status))
    assert result == {"status": "Degraded", "message": "InvalidSpec: spec.model.uri: no such file"}


def test_failed_without_conditions_falls_back_to_the_message() -> None:
    result = health(with_status({"phase": "Failed", "message": "DeadlineExceeded after 1h"}))
    assert result == {"status": "Degraded", "message": "DeadlineExceeded after 1h"}


def test_no_status_yet_is_progressing() -> None:
    assert health(with_status(None))["status"] == "Progressing"
    assert health(with_status({}))["status"] == "Progressing"


def test_status_of_an_older_generation_is_progressing() -> None:
    """A spec change re-runs the evaluation: the old Succeeded must not read as Healthy."""
    status = {"phase": "Succeeded", "observedGeneration": 1}
    result = health(with_status(status, generation=2))
    assert result["status"] == "Progressing"
    assert "generation 2" in result["message"]


def test_unknown_phase_is_unknown() -> None:
    assert health(with_status({"phase": "Exploded"}))["status"] == "Unknown"


def sweep(status: dict[str, Any] | None, **meta: Any) -> dict[str, Any]:
    obj = with_status(status, **meta)
    obj["kind"] = "EvaluationSweep"
    obj["spec"] = {"parallelism": 2}
    return obj


SWEEP_HEALTH = [
    pytest.param(
        {"phase": "Succeeded", "progress": "12/12 Succeeded", "succeeded": 12, "failed": 0},
        {"status": "Healthy", "message": "12/12 Succeeded"},
        id="succeeded",
    ),
    pytest.param(
        {"phase": "Running", "progress": "7/12 Succeeded", "failed": 0, "active": 2},
        {"status": "Progressing", "message": "7/12 Succeeded"},
        id="running",
    ),
    pytest.param(
        {"phase": "Running", "progress": "7/12 Succeeded", "failed": 1, "active": 2},
        {"status": "Progressing", "message": "7/12 Succeeded, 1 failed"},
        id="running with a failure under Continue",
    ),
    pytest.param(
        {"phase": "Pending", "progress": "0/12 Succeeded"},
        {"status": "Progressing", "message": "0/12 Succeeded"},
        id="pending",
    ),
    pytest.param(
        {"phase": "Suspended", "progress": "3/12 Succeeded",
         "conditions": [condition("Suspended", "SuspendedBySpec", "spec.suspend is true")]},
        {"status": "Suspended",
         "message": "Suspended at 3/12 Succeeded; SuspendedBySpec: spec.suspend is true"},
        id="suspended",
    ),
    pytest.param(
        {"phase": "Failed", "progress": "10/12 Succeeded", "failed": 2,
         "conditions": [condition("Failed", "ChildrenFailed", "2 of 12 children failed")]},
        {"status": "Degraded",
         "message": "Failed: 10/12 Succeeded, 2 failed; ChildrenFailed: 2 of 12 children failed"},
        id="failed",
    ),
    pytest.param(
        {"phase": "Stopped", "progress": "4/12 Succeeded", "failed": 1,
         "message": "s-digits-pytorch-b8 failed; failurePolicy is Stop"},
        {"status": "Degraded",
         "message": "Stopped: 4/12 Succeeded, 1 failed; s-digits-pytorch-b8 failed; "
         "failurePolicy is Stop"},
        id="stopped",
    ),
    pytest.param(
        {"phase": "Failed", "conditions": [condition("Failed", "InvalidSpec", "spec.matrix")]},
        {"status": "Degraded", "message": "Failed; InvalidSpec: spec.matrix"},
        id="invalid, before any progress",
    ),
    pytest.param(
        {"phase": "Exploded"},
        {"status": "Unknown", "message": "Unknown phase Exploded"},
        id="unknown phase",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("status", "expected"), SWEEP_HEALTH)
def test_sweep_health(status: dict[str, Any], expected: dict[str, Any]) -> None:
    assert health(sweep(status)) == expected


def test_sweep_phases_are_all_covered() -> None:
    """Every phase the sweep status defines has a health other than Unknown."""
    from mlmodelscope.spec import SweepPhase

    for phase in SweepPhase:
        assert health(sweep({"phase": phase.value}))["status"] != "Unknown", phase


def test_sweep_without_status_or_of_an_older_generation_is_progressing() -> None:
    assert health(sweep(None))["status"] == "Progressing"
    older = health(sweep({"phase": "Succeeded", "observedGeneration": 1}, generation=2))
    assert older["status"] == "Progressing"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"model": {"name": "digits-cnn", "format": "onnx"}},
            "Model manifest: digits-cnn (onnx)",
            id="model",
        ),
        pytest.param(
            {"basedOn": {"name": "digits-cnn"}},
            "Model manifest based on digits-cnn",
            id="variant",
        ),
    ],
)
def test_a_model_manifest_is_healthy(spec: dict[str, Any], message: str) -> None:
    """A Model has no status (nothing reconciles it): stored is healthy."""
    obj = {"apiVersion": BASE["apiVersion"], "kind": "Model",
           "metadata": {"name": "m", "generation": 1}, "spec": spec}  # fmt: skip
    assert health(obj) == {"status": "Healthy", "message": message}


def test_applications_point_at_the_chart_and_an_evaluations_folder() -> None:
    operator = yaml.safe_load((GITOPS / "application-operator.yaml").read_text())
    assert operator["kind"] == "Application"
    assert operator["apiVersion"] == "argoproj.io/v1alpha1"
    assert operator["spec"]["source"]["path"] == "helm/mlmodelscope"
    assert (ROOT / operator["spec"]["source"]["path"] / "Chart.yaml").is_file()
    assert "ServerSideApply=true" in operator["spec"]["syncPolicy"]["syncOptions"]
    evaluations = yaml.safe_load((GITOPS / "application-evaluations.yaml").read_text())
    assert evaluations["kind"] == "Application"
    waves = [
        int(app["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
        for app in (operator, evaluations)
    ]
    assert waves[0] < waves[1], "the operator must sync before the evaluations"
