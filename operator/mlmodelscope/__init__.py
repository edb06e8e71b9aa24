"""mlmodelscope: reproducible evaluation and benchmarking of deep-learning models on Kubernetes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mlmodelscope")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+local"

API_GROUP = "mlmodelscope.io"
API_VERSION = "v1alpha1"
"""The Kubernetes API group and version of every mlmodelscope resource."""
