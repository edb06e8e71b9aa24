"""Fixtures for the telemetry tests: a quick ModelEvaluation builder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

QUICK = {"warmup": 3, "minQueryCount": 20, "minDuration": "20ms", "stability": {"maxWindows": 2}}


@pytest.fixture(scope="session")
def make_evaluation() -> Any:
    """``make_evaluation(tmp_path, models, framework, name, **sections)`` -> YAML path."""
    return evaluation_file


def evaluation_file(
    tmp_path: Path, models: Path, framework: str, name: str, **sections: Any
) -> Path:
    """A quick digits ModelEvaluation YAML for ``framework``; ``sections`` merge into spec."""
    from mlmodelscope.agent.digits import digits_evaluation

    scenario = {"batchSizes": [1, 8], **QUICK, **sections.pop("scenario", {})}
    doc = digits_evaluation(models, framework, name, scenario=scenario, **sections)
    doc["metadata"]["namespace"] = "telemetry-test"
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
