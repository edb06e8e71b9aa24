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
from mlmodelscope.spec.sweep import (
    LABEL_SWEEP,
    MAX_CHILDREN,
    SWEEP_KIND,
    SWEEP_PLURAL,
    EvaluationSweep,
    FailurePolicy,
    SweepChild,
    SweepChildStatus,
    SweepPhase,
    SweepSpec,
    SweepStatus,
    expand,
    parse_sweep,
    sweep_problems,
)

__all__ = [
    "LABEL_SWEEP",
    "MAX_CHILDREN",
    "SWEEP_KIND",
    "SWEEP_PLURAL",
    "Device",
    "EvaluationSpec",
    "EvaluationStatus",
    "EvaluationSweep",
    "FailurePolicy",
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
    "SweepChild",
    "SweepChildStatus",
    "SweepPhase",
    "SweepSpec",
    "SweepStatus",
    "TraceLevel",
    "expand",
    "load_evaluations",
    "parse_duration",
    "parse_evaluation",
    "parse_sweep",
    "semantic_problems",
    "sweep_problems",
]
