"""How fast does the results store list runs once it holds many? ``Store.list_runs`` timed on
100,000 runs (target: p99 under 200 ms).

1. One real result document: the agent runs the digits CNN on ONNX Runtime (batch sizes 1 and
   8, 1,024 timed queries each, as an MLPerf SingleStream run), or ``--document FILE``.
2. ``--runs`` synthetic runs derived from it: each its own run_id and trace id, one of 24
   models (a skewed mix), framework, device (a third on one of three GPU products), evaluation
   name, started_at spread over a year, 4 % Failed (error, no results), a third labelled with
   a sweep, latencies and throughput scaled per run. The document keeps the real run's raw
   latencies, so rows are as large as real ones.
3. They are written as revision 0001 wrote them (SQLAlchemy Core, 1,000 rows per INSERT, not
   100,000 ``Store.record`` calls); the store is then opened, which upgrades it to head (the
   0002 backfill of trace_id and labels over every document is timed too).
4. Each listing runs ``--warmup`` times untimed, then ``--repeat`` times timed
   (``time.perf_counter`` around the call): p50 and p99 in ms, with the rows that match the
   filter and the rows returned.

    .venv/bin/python benchmarks/store_listing.py --out store-listing.json
    .venv/bin/python benchmarks/store_listing.py --postgres local   # + a throwaway PostgreSQL
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.store import Store, open_store
from mlmodelscope.store.schema import run_results, runs
from mlmodelscope.store.store import _result_row, _run_row, migrate

TARGET_MS = 200.0
MODELS = [
    "resnet50-v1.5", "resnet18", "resnet101", "mobilenet-v2", "mobilenet-v3-large",
    "efficientnet-b0", "efficientnet-b4", "vit-b16", "vit-l16", "convnext-tiny", "densenet121",
    "inception-v3", "squeezenet1.1", "shufflenet-v2", "regnet-y-800mf", "bert-base-uncased",
    "bert-large-uncased", "distilbert-base", "gpt2", "t5-small", "yolov5s", "ssd-mobilenet",
    "unet", "digits-cnn",
]  # fmt: skip
"""Model names; the first are run far more often than the last (weights 1/(rank+1))."""
FRAMEWORKS = [("onnxruntime", "1.31.1"), ("pytorch", "2.13.0"), ("tensorflow", "2.21.0")]
GPUS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4"]
END = datetime(2026, 11, 1, tzinfo=UTC)
BATCH = 1000


def real_document(folder: Path, queries: int) -> dict[str, Any]:
    """What the agent writes for the digits CNN on ONNX Runtime, read back from disk."""
    import yaml

    from mlmodelscope.agent.digits import digits_evaluation, ensure_digits_models
    from mlmodelscope.agent.runner import evaluate
    from mlmodelscope.spec import load_evaluations

    scenario = {"batchSizes": [1, 8], "minQueryCount": queries, "minDuration": "100ms"}
    spec = digits_evaluation(ensure_digits_models(), "onnxruntime", "digits", scenario=scenario)
    (folder / "digits.yaml").write_text(yaml.safe_dump(spec))
    [evaluation] = load_evaluations(folder / "digits.yaml")
    evaluate(evaluation, output=folder / "result.json")
    document: dict[str, Any] = json.loads((folder / "result.json").read_text())
    return document


def synthetic_runs(base: dict[str, Any], count: int, seed: int) -> Iterator[dict[str, Any]]:
    """``count`` documents derived from ``base`` (shallow copies: the large sections, such as
    the raw latencies, are shared, which is all the INSERT needs)."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(MODELS))]
    evaluation, model, backend = base["evaluation"], base["model"], base["backend"]
    error = {"type": "FetchError", "message": "model sha256 mismatch", "field": "model.sha256"}
    for i in range(count):
        doc = dict(base)
        started = END - timedelta(seconds=rng.uniform(0, 365 * 86400))
        duration = rng.uniform(20, 600)
        framework, version = rng.choice(FRAMEWORKS)
        gpu = rng.choice(GPUS) if rng.random() < 1 / 3 else None
        name = rng.choices(MODELS, weights)[0]
        doc["run_id"] = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        doc["trace_id"] = f"{rng.getrandbits(128):032x}"
        doc["evaluation"] = {**evaluation, "name": f"{name}-{framework}"}
        doc["evaluation"]["namespace"] = f"team-{i % 7}"
        if rng.random() < 1 / 3:
            doc["evaluation"]["labels"] = {"sweep": f"sweep-{rng.randrange(40)}"}
        doc["model"] = {**model, "name": name, "sha256": f"{rng.getrandbits(256):064x}"}
        doc["backend"] = {
            **backend,
            "framework": framework,
            "framework_version": version,
            "device": "cuda" if gpu else "cpu",
        }
        doc["spec"] = {**base["spec"], "framework": {"name": framework}}
        if gpu:
            doc["stack"] = {**base["stack"], "gpu": {"count": 1, "devices": [{"name": gpu}]}}
        doc["started_at"] = started.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        finished = started + timedelta(seconds=duration)
        doc["finished_at"] = finished.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        doc["duration_s"] = duration
        if rng.random() < 0.04:
            doc["status"] = "Failed"
            doc["error"] = error
            for key in ("results", "measurements", "accuracy"):
                doc.pop(key, None)
        else:
            scale = rng.lognormvariate(0, 1.5)
            doc["results"] = [_scaled(row, scale) for row in base["results"]]
            if base.get("accuracy"):
                doc["accuracy"] = {**base["accuracy"], "top1": rng.uniform(0.6, 0.95)}
        yield doc


def _scaled(row: dict[str, Any], scale: float) -> dict[str, Any]:
    out = copy.deepcopy(row)
    out["latency_ms"] = {k: v * scale for k, v in row["latency_ms"].items()}
    for key in ("throughput", "qps"):
        if out.get(key) is not None:
            out[key] = row[key] / scale
    return out


def fill(url: str, base: dict[str, Any], count: int, seed: int) -> dict[str, float]:
    """Write ``count`` runs as revision 0001 did, then open the store (upgrade to head).
    Returns the seconds each step took."""
    engine = sa.create_engine(url)
    migrate(engine, "0001")
    parsed = ResultDocument.model_validate(base)
    assert parsed.run_id is not None
    template = _run_row(parsed, parsed.run_id, base)
    for key in ("trace_id", "labels", "metric", "metric_value", "dataset"):  # not in 0001
        template.pop(key, None)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []
    with engine.begin() as conn:
        for doc in synthetic_runs(base, count, seed):
            rows.append(_row(template, doc))
            for result in doc.get("results") or []:
                batch = _result_row(doc["run_id"], _batch(result))
                for key in ("joules_per_inference", "energy_method", "cost_per_1000"):  # 0008
                    del batch[key]
                batches.append(batch)
            if len(rows) >= BATCH:
                conn.execute(runs.insert(), rows)
                conn.execute(run_results.insert(), batches)
                rows, batches = [], []
        if rows:
            conn.execute(runs.insert(), rows)
            conn.execute(run_results.insert(), batches)
    inserted = time.perf_counter() - started
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
    engine.dispose()
    started = time.perf_counter()
    open_store(url).close()
    upgraded = time.perf_counter() - started
    return {"insert_s": inserted, "upgrade_to_head_s": upgraded}


def _row(template: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """The 0001 row of a synthetic document: the template with what varies replaced (the same
    values ``_run_row`` reads, without validating 100,000 documents)."""
    from mlmodelscope.store.store import _timestamp

    results = doc.get("results") or []
    gpu = (doc["stack"].get("gpu") or {}).get("devices") or [{}]
    return {
        **template,
        "run_id": doc["run_id"],
        "evaluation": doc["evaluation"]["name"],
        "namespace": doc["evaluation"]["namespace"],
        "model_name": doc["model"]["name"],
        "model_sha256": doc["model"]["sha256"],
        "framework": doc["backend"]["framework"],
        "framework_version": doc["backend"]["framework_version"],
        "device": doc["backend"]["device"],
        "gpu_product": gpu[0].get("name"),
        "status": doc["status"],
        "valid": all(r.get("valid") is not False for r in results) if results else None,
        "top1": (doc.get("accuracy") or {}).get("top1") if results else None,
        "top5": template["top5"] if results else None,
        "error_type": doc["error"]["type"] if doc["status"] == "Failed" else None,
        "started_at": _timestamp(doc["started_at"]),
        "finished_at": _timestamp(doc["finished_at"]),
        "document": doc,
    }


def _batch(row: dict[str, Any]) -> Any:
    from mlmodelscope.spec.status import BatchResult

    return BatchResult.model_validate(row)


def listings() -> dict[str, dict[str, Any]]:
    """The filters timed: {label: list_runs keyword arguments}."""
    return {
        "model": {"model": "resnet50-v1.5"},
        "model (rare)": {"model": "digits-cnn"},
        "framework + device": {"framework": "pytorch", "device": "cuda"},
        "gpu": {"gpu": "NVIDIA L4"},
        "status": {"status": "Failed"},
        "evaluation + namespace": {"evaluation": "resnet18-onnxruntime", "namespace": "team-1"},
        "no filter": {},
    }


def matching(store: Store, filters: dict[str, Any]) -> int:
    names = {
        "model": "model_name",
        "framework": "framework",
        "device": "device",
        "gpu": "gpu_product",
        "evaluation": "evaluation",
        "namespace": "namespace",
        "status": "status",
    }
    query = sa.select(sa.func.count()).select_from(runs)
    for key, value in filters.items():
        query = query.where(runs.c[names[key]] == value)
    with store.engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


def time_calls(call: Callable[[], object], warmup: int, repeat: int) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def percentile(values: list[float], q: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def measure(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    with open_store(url) as store:
        for label, filters in listings().items():
            returned = len(store.list_runs(**filters, limit=args.limit))
            times = time_calls(
                functools.partial(store.list_runs, **filters, limit=args.limit),
                args.warmup,
                args.repeat,
            )
            out.append(
                {
                    "listing": label,
                    "filters": filters,
                    "matching_rows": matching(store, filters),
                    "returned": returned,
                    "p50_ms": percentile(times, 0.50),
                    "p99_ms": percentile(times, 0.99),
                    "mean_ms": statistics.fmean(times),
                    "max_ms": max(times),
                }
            )
    return out


@contextmanager
def local_postgres() -> Iterator[str]:
    """A throwaway PostgreSQL (Debian's binaries, as the tests use: fsync off)."""
    from mlmodelscope.devtools.postgres import APT_HINT, PostgreSQL, find_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir is None:
        raise SystemExit(f"--postgres local: PostgreSQL is not installed ({APT_HINT})")
    workdir = Path(tempfile.mkdtemp(prefix="mlms-bench-postgres-"))
    server = PostgreSQL(workdir, bin_dir)
    try:
        yield server.create_database("store_listing")
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def table(dialect: str, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{dialect}:",
        f"{'listing':<24} {'matching':>9} {'returned':>8} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}",
    ]
    for r in rows:
        lines.append(
            f"{r['listing']:<24} {r['matching_rows']:>9} {r['returned']:>8} "
            f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['max_ms']:>8.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=200, help="timed calls per listing")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls per listing first")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--queries", type=int, default=1024, help="timed queries per batch size")
    parser.add_argument("--document", type=Path, help="a result document to derive runs from")
    parser.add_argument("--sqlite", type=Path, help="SQLite file to fill (default: a temp dir)")
    parser.add_argument(
        "--postgres", help="an empty PostgreSQL database URL, or 'local' to start one"
    )
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="mlms-store-listing-"))
    try:
        if args.document:
            base = json.loads(args.document.read_text())
        else:
            base = real_document(folder, args.queries)
        assert base["status"] == "Succeeded", "derive the runs from a succeeded document"
        size = len(json.dumps(base))
        report: dict[str, Any] = {
            "runs": args.runs,
            "document_bytes": size,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "limit": args.limit,
            "machine": {
                "platform": platform.platform(),
                "processor": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "sqlite": sqlite3.sqlite_version,
                "sqlalchemy": sa.__version__,
            },
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "dialects": {},
        }
        print(f"{args.runs} runs from a {size / 1024:.0f} KiB document", file=sys.stderr)
        targets: list[tuple[str, Callable[[], Any]]] = []
        sqlite_path = args.sqlite or folder / "runs.db"
        targets.append(("sqlite", lambda: _nullcontext(f"sqlite:///{sqlite_path}")))
        if args.postgres == "local":
            targets.append(("postgresql", local_postgres))
        elif args.postgres:
            targets.append(("postgresql", lambda: _nullcontext(args.postgres)))
        failed = False
        for dialect, context in targets:
            with context() as url:
                steps = fill(url, base, args.runs, args.seed)
                print(
                    f"{dialect}: inserted in {steps['insert_s']:.1f} s, "
                    f"upgraded to head in {steps['upgrade_to_head_s']:.1f} s",
                    file=sys.stderr,
                )
                rows = measure(url, args)
                report["dialects"][dialect] = {**steps, "listings": rows}
                print(table(dialect, rows))
                failed |= any(r["p99_ms"] > TARGET_MS for r in rows)
        print(f"target: p99 < {TARGET_MS:.0f} ms: {'MISSED' if failed else 'met'}")
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
        return 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _nullcontext(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    sys.exit(main())
