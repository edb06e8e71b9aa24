"""A model zoo for timing: well-known architectures built in code with random weights and
exported to ONNX, TorchScript, torch.export and (via keras.applications) SavedModel, cached.

No downloads; accuracy is not the point, the layers, shapes and FLOPs are.
"""

from mlmodelscope.zoo.build import FORMATS, ZooArtifact, ensure_zoo_model
from mlmodelscope.zoo.registry import ENTRIES, ZooEntry, entry

__all__ = ["ENTRIES", "FORMATS", "ZooArtifact", "ZooEntry", "ensure_zoo_model", "entry"]
