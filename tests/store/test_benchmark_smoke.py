"""benchmarks/store_listing.py runs end to end on a small store (the real 100,000-run figures
are in docs/benchmarks.md; this only keeps the script working)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.frameworks

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "store_listing.py"


def test_store_listing_benchmark_runs(
    tmp_path: Path, real_documents: dict[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("store_listing", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    document = tmp_path / "succeeded.json"
    document.write_text(json.dumps(real_documents["succeeded"]))
    out = tmp_path / "out.json"
    args = ["--runs", "1000", "--repeat", "3", "--warmup", "1", "--document", str(document)]
    assert module.main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    listings = {r["listing"]: r for r in report["dialects"]["sqlite"]["listings"]}
    assert listings["no filter"]["matching_rows"] == 1000
    assert listings["no filter"]["returned"] == 100
    assert 0 < listings["model"]["matching_rows"] < 1000
    assert all(r["p99_ms"] > 0 for r in listings.values())
    assert "p50 ms" in capsys.readouterr().out
