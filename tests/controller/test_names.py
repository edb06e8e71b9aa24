"""Deterministic child names and labels."""

from __future__ import annotations

from mlmodelscope.controller import names


def test_short_names_are_plain() -> None:
    assert names.job_name("digits-cpu", 3) == "digits-cpu-g3"
    assert names.spec_configmap_name("digits-cpu") == "digits-cpu-spec"
    assert names.results_configmap_name("digits-cpu") == "digits-cpu-results"


def test_long_names_are_truncated_with_a_hash_and_stay_distinct() -> None:
    a = "a" * 60 + "-one"
    b = "a" * 60 + "-two"
    job_a, job_b = names.job_name(a, 12), names.job_name(b, 12)
    assert len(job_a) <= 63 and len(job_b) <= 63
    assert job_a != job_b
    assert job_a.endswith("-g12")
    assert names.job_name(a, 12) == job_a  # deterministic
    cm = names.results_configmap_name(a)
    assert len(cm) <= 63 and cm.endswith("-results")
    assert not cm[: -len("-results")].endswith("-" * 2)


def test_truncation_never_leaves_a_dangling_separator() -> None:
    base = "x" * 45 + "-" + "y" * 17
    name = names.child_name(base, "-results")
    assert "--" not in name and len(name) <= 63


def test_labels() -> None:
    assert names.labels("digits", 2) == {
        "app.kubernetes.io/name": "mlmodelscope",
        "app.kubernetes.io/component": "evaluation",
        "app.kubernetes.io/managed-by": "mlmodelscope-operator",
        "app.kubernetes.io/instance": "digits",
        "mlmodelscope.io/evaluation": "digits",
        "mlmodelscope.io/generation": "2",
    }
