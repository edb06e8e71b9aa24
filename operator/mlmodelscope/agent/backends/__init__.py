"""Framework adapters, imported lazily: ``import torch`` alone costs seconds."""

from __future__ import annotations

from mlmodelscope.agent.backends.base import (
    Backend,
    BackendInfo,
    MissingExtraError,
    ModelLoadError,
    NullBackend,
)
from mlmodelscope.spec.evaluation import FrameworkName

__all__ = [
    "Backend",
    "BackendInfo",
    "MissingExtraError",
    "ModelLoadError",
    "NullBackend",
    "create_backend",
]


def create_backend(framework: FrameworkName) -> Backend:
    """The adapter for ``framework``; importing its module does not import the framework yet."""
    if framework == FrameworkName.PYTORCH:
        from mlmodelscope.agent.backends.pytorch import PyTorchBackend

        return PyTorchBackend()
    if framework == FrameworkName.TENSORFLOW:
        from mlmodelscope.agent.backends.tensorflow import TensorFlowBackend

        return TensorFlowBackend()
    if framework == FrameworkName.ONNXRUNTIME:
        from mlmodelscope.agent.backends.onnxruntime import OnnxRuntimeBackend

        return OnnxRuntimeBackend()
    raise ValueError(f"unknown framework {framework!r}")
