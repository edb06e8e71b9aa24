"""Text (and any) classification from class scores: accuracy and macro-F1, by scikit-learn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from mlmodelscope.agent.tasks.record import TaskMetrics


@dataclass(frozen=True)
class ClassificationMetrics(TaskMetrics):
    """Accuracy, and F1 averaged over the classes with equal weight (macro)."""

    accuracy: float
    macro_f1: float
    samples: int
    primary: ClassVar[str] = "accuracy"


def classification_metrics(
    scores: np.ndarray, labels: np.ndarray, num_classes: int | None = None
) -> ClassificationMetrics:
    """From ``scores`` (N, classes) or predicted class ids (N,), and the true ``labels`` (N,).
    Macro-F1 averages over ``range(num_classes)`` when given (a class never seen counts as 0),
    else over the classes in labels or predictions, as scikit-learn does."""
    from sklearn.metrics import accuracy_score, f1_score

    predicted = np.asarray(scores)
    if predicted.ndim == 2:
        predicted = predicted.argmax(axis=1)
    truth = np.asarray(labels).ravel()
    if predicted.shape != truth.shape:
        raise ValueError(f"{predicted.shape[0]} predictions for {truth.shape[0]} labels")
    classes = None if num_classes is None else list(range(num_classes))
    return ClassificationMetrics(
        accuracy=float(accuracy_score(truth, predicted)),
        macro_f1=float(
            f1_score(truth, predicted, labels=classes, average="macro", zero_division=0)
        ),
        samples=int(truth.size),
    )
