"""Fixtures for the operator tests: ModelEvaluation documents and validated objects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from meval_docs import evaluation_doc

from mlmodelscope.spec import ModelEvaluation, parse_evaluation

DocFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def make_doc() -> DocFactory:
    return evaluation_doc


@pytest.fixture
def make_evaluation() -> Callable[..., ModelEvaluation]:
    def build(**kwargs: Any) -> ModelEvaluation:
        return parse_evaluation(evaluation_doc(**kwargs))

    return build
