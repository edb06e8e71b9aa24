"""Model sources and the cache's files, for the tests of fetching models
(test_sources.py, test_sources_s3.py)."""

from __future__ import annotations

from pathlib import Path

from mlmodelscope.spec.evaluation import ModelSource


def model(uri: str, sha256: str | None = None, fmt: str = "onnx") -> ModelSource:
    return ModelSource.model_validate(
        {
            "name": "m",
            "uri": uri,
            "format": fmt,
            "sha256": sha256,
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
        }
    )


def cached_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.is_file())
