"""Kopf's settings as the operator's startup chooses them (handlers/handle_startup.py)."""

from __future__ import annotations

import kopf

from mlmodelscope.controller.handlers.handle_startup import configure


def body(kind: str) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "mlmodelscope.org/v1alpha1",
            "kind": kind,
            "metadata": {"name": "x", "namespace": "ns", "annotations": {}},
            "spec": {"models": ["digits"]},
            "status": {"phase": "Running"},
        }
    )


def test_kopf_keeps_a_last_handled_spec_only_for_sweeps() -> None:
    """Only EvaluationSweeps have create/update handlers; for every other kind Kopf's
    per-event copy of the object would be built and never read."""
    settings = kopf.OperatorSettings()
    configure(settings)
    storage = settings.persistence.diffbase_storage
    assert storage.build(body=body("EvaluationSweep")) == {"spec": {"models": ["digits"]}}
    assert storage.build(body=body("ModelEvaluation")) == {}
    assert storage.build(body=body("Job")) == {}
