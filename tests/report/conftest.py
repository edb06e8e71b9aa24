"""The real result documents of tests/report/compare_runs.py (the digits CNN run by `mlms run`
in ONNX Runtime, PyTorch, and ONNX Runtime with a wrong preprocessing scale), for every test
module here."""

from __future__ import annotations

from compare_runs import results  # noqa: F401  (the fixture, one real run per module)
