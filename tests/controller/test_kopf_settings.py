"""Kopf's settings as the operator's startup chooses them (handlers/handle_startup.py)."""

from __future__ import annotations

import kopf

from mlmodelscope import API_GROUP, API_VERSION
from mlmodelscope.controller.handlers.handle_startup import configure
from mlmodelscope.spec.document import PLURAL
from mlmodelscope.spec.sweep import LABEL_SWEEP, SWEEP_PLURAL


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


def test_kopf_watches_only_the_evaluations_of_a_sweep() -> None:
    """Every evaluation has the operator's own watch (controller/object_watches.py); Kopf
    needs a sweep's only, and the API server filters them (a server-side label selector)."""
    settings = kopf.OperatorSettings()
    configure(settings)
    evaluations = kopf.Resource(API_GROUP, API_VERSION, PLURAL)
    sweeps = kopf.Resource(API_GROUP, API_VERSION, SWEEP_PLURAL)
    assert settings.watching.label_selectors.collect(evaluations) == [LABEL_SWEEP]
    assert settings.watching.label_selectors.collect(sweeps) == []
