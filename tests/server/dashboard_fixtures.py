"""Real result documents for the dashboard tests: the digits CNN evaluated by the agent in
ONNX Runtime, PyTorch and TensorFlow (quick scenario settings, batch sizes 1 and 8), and one
run that failed (a wrong model sha256). Made once per session, however many modules ask."""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlmodelscope.store import open_store

QUICK = {
    "batchSizes": [1, 8],
    "warmup": 3,
    "minQueryCount": 20,
    "minDuration": "20ms",
    "stability": {"maxWindows": 2},
}
FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
FAILED = "digits-bad-hash"
FIRST_100 = "digits-first-100"
"""The ONNX Runtime run on the first 100 samples of the digits test split (``limit: 100``)."""
WHOLE_DATASET = "digits/test (360 samples)"
FIRST_100_DATASET = "digits/test (100 samples)"
"""The two runs' datasets as the store names them."""

_made: dict[str, dict[str, Any]] = {}
_limited: dict[str, dict[str, Any]] = {}


def evaluation_name(framework: str) -> str:
    return f"digits-{framework}"


def _run(folder: Path, framework: str, name: str, **sections: Any) -> dict[str, Any]:
    """Evaluate one digits spec with the agent; the document it wrote, read back."""
    from mlmodelscope.agent.digits import digits_evaluation, ensure_digits_models
    from mlmodelscope.agent.runner import EvaluationError, evaluate
    from mlmodelscope.spec import load_evaluations

    spec = folder / f"{name}.yaml"
    doc = digits_evaluation(ensure_digits_models(), framework, name, scenario=QUICK, **sections)
    spec.write_text(yaml.safe_dump(doc))
    [loaded] = load_evaluations(spec)
    output = folder / f"{name}.json"
    with contextlib.suppress(EvaluationError):  # the failed run writes its document too
        evaluate(loaded, output=output)
    data: dict[str, Any] = json.loads(output.read_text())
    return data


def real_documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """{evaluation name: document}, the three frameworks' runs first, then the failed one
    (copies: tests may edit them)."""
    if not _made:
        folder = tmp_path_factory.mktemp("dashboard-runs")
        for framework in FRAMEWORKS:
            name = evaluation_name(framework)
            _made[name] = _run(folder, framework, name)
        _made[FAILED] = _run(folder, "onnxruntime", FAILED, model={"sha256": "1" * 64})
    return copy.deepcopy(_made)


def limited_document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The digits CNN in ONNX Runtime on the first 100 samples of the test split, evaluated
    by the agent once per session (a copy)."""
    if not _limited:
        folder = tmp_path_factory.mktemp("dashboard-limited")
        _limited[FIRST_100] = _run(
            folder, "onnxruntime", FIRST_100, dataset={"type": "digits", "limit": 100}
        )
    return copy.deepcopy(_limited[FIRST_100])


def record(store_url: str, documents: list[dict[str, Any]]) -> None:
    """Record ``documents`` in the store at ``store_url`` (created when new)."""
    with open_store(store_url) as store:
        for document in documents:
            assert store.record(document)


def timed(document: dict[str, Any], name: str, factor: float, seed: int = 0) -> dict[str, Any]:
    """``document`` as another run named ``name`` (its own run id), whose every measurement
    kept 800 fixed raw latencies (lognormal around 50 µs, seeded) times ``factor``, and whose
    results' p50, p99, mean and throughput are computed from them: runs that differ by exactly
    ``factor``, without a busy machine's noise."""
    made = copy.deepcopy(document)
    made["run_id"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mlmodelscope-tests/{name}"))
    made["evaluation"]["name"] = name
    latencies = np.round(factor * np.random.default_rng(seed).lognormal(np.log(50_000), 0.1, 800))
    for measurement in made["measurements"]:
        measurement["raw"]["latencies_ns"] = latencies.astype(int).tolist()
    ms = latencies / 1e6
    for row in made["results"]:
        row["latency_ms"].update(
            p50=float(np.percentile(ms, 50)),
            p99=float(np.percentile(ms, 99)),
            mean=float(ms.mean()),
        )
        row["throughput"] = row["batch_size"] / float(ms.mean() / 1e3)
    return made
