"""mlmodelscope: reproducible evaluation and benchmarking of deep-learning models on Kubernetes."""

import time

_IMPORT_NS = time.perf_counter_ns()
"""When ``import mlmodelscope`` started (the agent's start-up timeline, agent/startup.py)."""

from importlib.metadata import PackageNotFoundError, version  # noqa: E402

try:
    __version__ = version("mlmodelscope")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+local"

API_GROUP = "mlmodelscope.io"
API_VERSION = "v1alpha1"
"""The Kubernetes API group and version of every mlmodelscope resource."""
