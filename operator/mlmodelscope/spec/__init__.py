"""The evaluation spec: pydantic models that are the single source of truth for the CRD, the
CLI and the agent."""

from mlmodelscope.spec.base import Rule, SpecError, parse_duration
from mlmodelscope.spec.document import (
    LoadedEvaluation,
    ModelEvaluation,
    Problem,
    SpecValidationError,
    load_evaluations,
    parse_evaluation,
    semantic_problems,
)
from mlmodelscope.spec.evaluation import (
    Device,
    EvaluationSpec,
    FrameworkName,
    ModelFormat,
    ScenarioType,
    TraceLevel,
)
from mlmodelscope.spec.status import EvaluationStatus, Phase

__all__ = [
    "Device",
    "EvaluationSpec",
    "EvaluationStatus",
    "FrameworkName",
    "LoadedEvaluation",
    "ModelEvaluation",
    "ModelFormat",
    "Phase",
    "Problem",
    "Rule",
    "ScenarioType",
    "SpecError",
    "SpecValidationError",
    "TraceLevel",
    "load_evaluations",
    "parse_duration",
    "parse_evaluation",
    "semantic_problems",
]
