"""`mlms gate` and the verdicts of `mlms compare`: the decision logic on fixed data, then the
command on real runs of the digits CNN by `mlms run` in ONNX Runtime — the same spec twice,
a genuinely slower candidate (graph optimizations off: the same model bytes run unfused,
about 1.4x slower at batch 1 and 3x at batch 8), fewer samples, another dataset of as many
samples (the train split), and a re-serialized copy of the model (other bytes, same network),
gated from their files and from the store they were recorded in, alone and as sweeps whose
cells hold runs of two datasets; and the command against several baseline runs, on
copies of the base run with fixed latencies scaled like consecutive runs of a shared machine
(the prediction interval itself is tested in test_noise.py)."""

from __future__ import annotations

import inspect
import json
import re
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mlmodelscope import cli
from mlmodelscope.cli import app
from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.compare import load_result
from mlmodelscope.report.gate import (
    Check,
    CheckStatus,
    GateResult,
    GateStatus,
    Thresholds,
    check,
    gate,
    gate_pooled,
    gate_runs,
    junit_xml,
    markdown,
    mismatches,
)
from mlmodelscope.report.gate import summary as summary_line
from mlmodelscope.report.noise import METHOD
from mlmodelscope.report.sweep_gate import LabelledRun, gate_sweep
from mlmodelscope.report.verdicts import (
    Metric,
    MetricVerdict,
    Outcome,
    accuracy_bounded,
    thinned,
    verdicts,
)
from mlmodelscope.spec.sweep import (
    LABEL_BATCH_SIZE,
    LABEL_CELL,
    LABEL_FRAMEWORK,
    LABEL_MODEL,
    LABEL_REPEAT,
    LABEL_SWEEP,
)
from mlmodelscope.store.store import open_store

SCENARIO = {
    "warmup": 3,
    "minQueryCount": 20,
    "minDuration": "40ms",
    "stability": {"maxWindows": 2},
}
GENEROUS = [
    "--max-latency-increase",
    "10000",
    "--max-throughput-decrease",
    "95",
    "--max-accuracy-drop",
    "5",
]
"""Thresholds two runs of the same spec stay within on a busy shared 2-core machine: there a
40 ms window's p99 is a few preempted queries, and measured 23x apart between two identical
runs (significantly so: the machine really was slower), while p50 moved 7 %."""
DOCS = Path(__file__).resolve().parents[2] / "docs" / "results.md"
WHOLE = "digits/test (360 samples)"
FEWER = "digits/test (100 samples)"
TRAIN = "digits/train (360 samples)"
"""The datasets of the real runs: the whole test split, its first 100 samples, and as many
samples as the test split from the train split."""


# ------------------------------------------------------------------------------ fixed data


def verdict(
    metric: Metric,
    baseline: float,
    candidate: float,
    outcome: Outcome,
    *,
    why: str | None = None,
) -> MetricVerdict:
    top1 = metric is Metric.TOP1
    return MetricVerdict(
        "cand",
        metric,
        None if top1 else "SingleStream",
        None if top1 else 1,
        baseline,
        candidate,
        outcome,
        "-" if why else "a method",
        ratio=None if metric is Metric.TOP1 else candidate / baseline,
        low=0.0,
        high=2.0,
        level=0.95,
        p_value=0.01 if metric is Metric.TOP1 else None,
        why=why,
    )


@pytest.mark.parametrize(
    ("metric", "baseline", "candidate", "outcome", "status"),
    [
        # a regression needs the threshold exceeded and a significant verdict
        (Metric.P50, 1.0, 1.5, Outcome.SLOWER, CheckStatus.REGRESSION),
        (Metric.P50, 1.0, 1.5, Outcome.SAME, CheckStatus.PASS),  # noise
        (Metric.P50, 1.0, 1.08, Outcome.SLOWER, CheckStatus.PASS),  # certain but small
        (Metric.P99, 1.0, 1.2, Outcome.SLOWER, CheckStatus.REGRESSION),
        (Metric.P99, 1.0, 0.5, Outcome.FASTER, CheckStatus.PASS),
        (Metric.THROUGHPUT, 100.0, 85.0, Outcome.SLOWER, CheckStatus.REGRESSION),
        (Metric.THROUGHPUT, 100.0, 85.0, Outcome.SAME, CheckStatus.PASS),
        (Metric.THROUGHPUT, 100.0, 95.0, Outcome.SLOWER, CheckStatus.PASS),
        (Metric.THROUGHPUT, 100.0, 150.0, Outcome.FASTER, CheckStatus.PASS),
        (Metric.TOP1, 0.98, 0.96, Outcome.WORSE, CheckStatus.REGRESSION),  # -2 pp
        (Metric.TOP1, 0.98, 0.975, Outcome.WORSE, CheckStatus.PASS),  # -0.5 pp
        (Metric.TOP1, 0.98, 0.96, Outcome.SAME, CheckStatus.PASS),
    ],
)
def test_a_regression_needs_the_threshold_and_significance(
    metric: Metric, baseline: float, candidate: float, outcome: Outcome, status: CheckStatus
) -> None:
    found = check(verdict(metric, baseline, candidate, outcome), Thresholds(10, 10, 1))
    assert found.status is status, found.reason
    if metric is Metric.TOP1:
        assert found.change == pytest.approx(100 * (candidate - baseline))  # percentage points
    else:
        assert found.change == pytest.approx(100 * (candidate / baseline - 1))


def test_not_testable_is_reported_never_failed() -> None:
    why = "baseline: no raw latencies (run with --raw)"
    found = check(verdict(Metric.P50, 1.0, 3.0, Outcome.NOT_TESTABLE, why=why), Thresholds())
    assert found.status is CheckStatus.NOT_TESTABLE and found.exceeded
    assert f"not testable: {why}" in found.reason


def test_the_gate_status_is_the_worst_check() -> None:
    def result(*statuses: CheckStatus) -> GateResult:
        checks = [
            Check(verdict(Metric.P50, 1, 1, Outcome.SAME), 0.0, 10.0, False, s, "")
            for s in statuses
        ]
        return GateResult("cand", "base", Thresholds(), [], checks)

    assert result(CheckStatus.PASS, CheckStatus.NOT_TESTABLE).status is GateStatus.PASS
    assert result(CheckStatus.PASS, CheckStatus.REGRESSION).status is GateStatus.REGRESSION
    assert (GateStatus.PASS, GateStatus.REGRESSION, GateStatus.NOT_COMPARABLE) == (0, 1, 2)


def test_bounded_mcnemar_is_exact_when_the_split_is_forced() -> None:
    from scipy.stats import binomtest

    # nothing differs: the runs score every sample alike
    same = accuracy_bounded(360, 0, 0)
    assert (same.p_value, same.verdict) == (1.0, Outcome.SAME)
    # 12 samples differ and the candidate has 12 fewer right: it lost all 12
    lost = accuracy_bounded(360, 12, -12)
    assert lost.p_value == pytest.approx(binomtest(0, 12, 0.5).pvalue)
    assert lost.verdict is Outcome.WORSE
    assert accuracy_bounded(360, 12, 12).verdict is Outcome.BETTER


def test_bounded_mcnemar_takes_the_least_significant_split() -> None:
    from scipy.stats import binomtest

    # 100 differ, the candidate 10 fewer right: 10 to 100 discordant pairs are possible
    found = accuracy_bounded(1000, 100, -10)
    splits = [binomtest((d - 10) // 2, d, 0.5).pvalue for d in range(10, 101, 2)]
    assert found.p_value == pytest.approx(max(splits))
    assert min(splits) < 0.05 < found.p_value  # significant for some labelling, not all
    assert found.verdict is Outcome.SAME
    with pytest.raises(ValueError, match="only 3 samples differ"):
        accuracy_bounded(100, 3, -5)


def test_thinning_keeps_both_ends_and_the_order() -> None:
    values = np.arange(10_000.0)
    kept = thinned(values, 2000)
    assert kept.size == 2000 and kept[0] == 0 and kept[-1] == 9999
    assert np.all(np.diff(kept) > 0)
    assert thinned(values[:50], 2000).size == 50


def test_junit_and_markdown_of_fixed_checks() -> None:
    thresholds = Thresholds(10, 10, 1)
    checks = [
        check(verdict(Metric.P50, 1.0, 1.5, Outcome.SLOWER), thresholds),
        check(verdict(Metric.THROUGHPUT, 100.0, 99.0, Outcome.SAME), thresholds),
        check(verdict(Metric.TOP1, 0.9, 0.9, Outcome.NOT_TESTABLE, why="x"), thresholds),
    ]
    result = GateResult("cand", "base", thresholds, [], checks)
    suite = ET.fromstring(junit_xml(result))
    counts = {k: suite.get(k) for k in ("tests", "failures", "skipped", "errors")}
    assert counts == {"tests": "3", "failures": "1", "skipped": "1", "errors": "0"}
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "latency p50 SingleStream batch 1",
        "throughput SingleStream batch 1",
        "top-1 accuracy",
    ]
    assert cases[0].find("failure") is not None and cases[1].find("failure") is None
    assert cases[2].find("skipped") is not None
    text = markdown(result)
    assert text.startswith("## mlms gate: REGRESSION")
    assert "| latency p50 SingleStream batch 1 | 1.000 ms | 1.500 ms | +50.00% |" in text


# ------------------------------------------------------------------------------ real runs


@pytest.fixture(scope="module")
def runs(digits_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six real result documents by `mlms run` (recorded in the folder's own store):
    ``base`` and ``again`` (the same spec), ``slow`` (graph optimizations off), ``fewer``
    (the first 100 samples of the test split), ``train`` (the first 360 of the train split: as
    many samples as the test split, another dataset) and ``copy`` (the model re-serialized:
    other bytes)."""
    import onnx

    from mlmodelscope.agent.digits import MODEL_FILES, digits_evaluation

    folder = tmp_path_factory.mktemp("gate")
    model = onnx.load(str(digits_models / MODEL_FILES["onnx"]))
    model.doc_string = "the digits CNN, re-serialized"
    copy = folder / "digits-copy.onnx"
    onnx.save(model, str(copy))
    threads = {"intraOpThreads": 1}

    def spec(name: str, **sections: Any) -> dict[str, Any]:
        sections = {"scenario": SCENARIO, "framework": threads, **sections}
        return digits_evaluation(digits_models, "onnxruntime", name, **sections)

    specs = [
        spec("base"),
        spec("again"),
        spec("slow", framework={**threads, "graphOptimizationLevel": "disable"}),
        spec("fewer", dataset={"limit": 100}),
        spec("train", dataset={"split": "train", "limit": 360}),
        spec("copy"),
    ]
    specs[-1]["spec"]["model"]["uri"] = str(copy)
    (folder / "spec.yaml").write_text(yaml.safe_dump_all(specs))
    out = folder / "results"
    result = CliRunner().invoke(
        app, ["run", str(folder / "spec.yaml"), "-o", str(out)], env=store_env(out)
    )
    assert result.exit_code == 0, result.output
    return out


def store_env(results: Path) -> dict[str, str]:
    return {"MLMS_STORE_URL": f"sqlite:///{results.parent / 'store.db'}"}


def document(runs: Path, name: str) -> ResultDocument:
    return load_result(runs / f"{name}.json").document


def mlms_gate(runs: Path, candidate: str, baseline: str, *extra: str) -> Any:
    return CliRunner().invoke(
        app,
        ["gate", str(runs / f"{candidate}.json"), str(runs / f"{baseline}.json"), *extra],
        env={**store_env(runs), "COLUMNS": "200"},
    )


def test_the_same_spec_twice_passes(runs: Path, tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    result = mlms_gate(runs, "again", "base", *GENEROUS, "--junit", str(junit))
    assert result.exit_code == 0, result.output
    assert "PASS: again against base: 0 regressions, 7 passed, 0 not testable" in result.output
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("7", "0", "0")


def test_run_ids_from_the_store(runs: Path) -> None:
    ids = [json.loads((runs / f"{n}.json").read_text())["run_id"] for n in ("again", "base")]
    result = CliRunner().invoke(app, ["gate", *ids, *GENEROUS], env=store_env(runs))
    assert result.exit_code == 0, result.output
    assert "PASS: again against base" in result.output


def test_a_slower_candidate_is_a_regression(runs: Path, tmp_path: Path) -> None:
    junit, summary = tmp_path / "gate.xml", tmp_path / "gate.md"
    result = mlms_gate(runs, "slow", "base", "--junit", str(junit), "--markdown", str(summary))
    assert result.exit_code == GateStatus.REGRESSION, result.output
    suite = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert list(cases) == [
        f"{metric} SingleStream batch {batch}"
        for batch in (1, 8)
        for metric in ("latency p50", "latency p99", "throughput")
    ] + ["top-1 accuracy"]
    failed = {name for name, case in cases.items() if case.find("failure") is not None}
    assert "latency p50 SingleStream batch 8" in failed  # 2x to 3.5x slower, measured
    assert "top-1 accuracy" not in failed  # the same weights: every top-1 class agrees
    assert suite.get("failures") == str(len(failed))
    text = summary.read_text()
    assert text.startswith("## mlms gate: REGRESSION")
    assert "| latency p50 SingleStream batch 8 |" in text and "**regression**" in text


def with_latencies(doc: ResultDocument, factor: float, seed: int = 0) -> ResultDocument:
    """``doc`` with fixed raw latencies (800 lognormal ones around 50 µs, seeded) times
    ``factor``, and its headline latencies and throughput scaled to match: the noise of a busy
    machine left out."""
    fixed = np.random.default_rng(seed).lognormal(np.log(50_000), 0.1, 800)
    measurements = [
        m.model_copy(
            update={
                "raw": m.raw.model_copy(update={"latencies_ns": [round(factor * t) for t in fixed]})
            }
        )
        for m in doc.measurements or []
        if m.raw is not None
    ]
    rows = [
        r.model_copy(
            update={
                "latency_ms": r.latency_ms.model_copy(
                    update={
                        "p50": factor * (r.latency_ms.p50 or 0),
                        "p99": factor * (r.latency_ms.p99 or 0),
                    }
                ),
                "throughput": (r.throughput or 0) / factor,
            }
        )
        for r in doc.results or []
    ]
    return doc.model_copy(update={"measurements": measurements, "results": rows})


def test_a_slower_document_is_a_regression(runs: Path) -> None:
    """Beside the real slower run: a document made 1.5x slower against itself."""
    base = with_latencies(document(runs, "base"), 1.0)
    slower = with_latencies(document(runs, "base"), 1.5, seed=1)
    result = gate(slower, base, Thresholds(), labels=("slower", "base"))
    assert result.status is GateStatus.REGRESSION
    by_name = {c.name: c for c in result.checks}
    for batch in (1, 8):
        p50 = by_name[f"latency p50 SingleStream batch {batch}"]
        assert p50.status is CheckStatus.REGRESSION
        assert p50.change == pytest.approx(50.0)
        assert 1.4 < (p50.verdict.low or 0) < 1.5 < (p50.verdict.high or 0) < 1.6
        throughput = by_name[f"throughput SingleStream batch {batch}"]
        assert throughput.status is CheckStatus.REGRESSION
        assert throughput.change == pytest.approx(100 * (1 / 1.5 - 1))
    assert by_name["top-1 accuracy"].status is CheckStatus.PASS
    # the same document against itself (another draw of the same noise) passes
    again = gate(with_latencies(document(runs, "base"), 1.0, seed=2), base, Thresholds())
    assert again.status is GateStatus.PASS


# ------------------------------------------------------------------------------ several baselines

SPREAD = {"base-1": 1.0, "base-2": 1.3, "base-3": 1.15, "within": 1.3, "slower": 5.0}
"""Scale factors of the base run's latencies: three baseline runs as far apart as consecutive
runs on a shared machine, a candidate inside their spread (30 % slower than base-1) and one
well outside."""


@pytest.fixture
def spread_runs(runs: Path, tmp_path: Path) -> Path:
    """:data:`SPREAD`'s documents (:func:`with_latencies` of the base run, each its own draw),
    beside a copy of ``fewer`` (100 samples: not comparable)."""
    base = document(runs, "base")
    for seed, (name, factor) in enumerate(SPREAD.items()):
        scaled = with_latencies(base, factor, seed=seed)
        (tmp_path / f"{name}.json").write_text(json.dumps(scaled.to_json_dict()))
    (tmp_path / "fewer.json").write_text((runs / "fewer.json").read_text())
    return tmp_path


def gate_many(folder: Path, candidate: str, *baselines: str, extra: tuple[str, ...] = ()) -> Any:
    return CliRunner().invoke(
        app,
        ["gate", *(str(folder / f"{name}.json") for name in (candidate, *baselines)), *extra],
        env={"COLUMNS": "250"},
    )


def test_inside_the_baselines_spread_passes_what_one_baseline_fails(spread_runs: Path) -> None:
    one = gate_many(spread_runs, "within", "base-1")
    assert one.exit_code == GateStatus.REGRESSION, one.output  # 30 % slower, significantly
    junit, summary = spread_runs / "gate.xml", spread_runs / "gate.md"
    reports = ("--junit", str(junit), "--markdown", str(summary))
    three = gate_many(spread_runs, "within", "base-1", "base-2", "base-3", extra=reports)
    assert three.exit_code == GateStatus.PASS, three.output
    assert "against 3 baseline runs (" in three.output
    assert "0 regressions, 7 passed, 0 not testable" in three.output
    suite = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    p50 = cases["latency p50 SingleStream batch 1"].findtext("system-out") or ""
    assert f"method: {METHOD} (k = 3)" in p50 and "one-sided prediction interval at" in p50
    assert "McNemar" in (cases["top-1 accuracy"].findtext("system-out") or "")
    assert "first baseline run" in (suite.findtext("system-out") or "")
    text = summary.read_text()
    assert text.startswith("## mlms gate: PASS") and "| baseline (geometric mean) |" in text
    assert f"- latency p50, latency p99, throughput: {METHOD} (k = 3)" in text


def test_outside_the_baselines_spread_is_a_regression(spread_runs: Path) -> None:
    junit = spread_runs / "gate.xml"
    result = gate_many(
        spread_runs, "slower", "base-1", "base-2", "base-3", extra=("--junit", str(junit))
    )
    assert result.exit_code == GateStatus.REGRESSION, result.output
    suite = ET.parse(junit).getroot()
    failed = [c for c in suite.findall("testcase") if c.find("failure") is not None]
    assert len(failed) == 6  # p50, p99 and throughput at both batch sizes; top-1 passes
    assert all(METHOD in (c.findtext("failure") or "") for c in failed)


def test_two_baselines_fall_back_to_the_first_with_a_note(spread_runs: Path) -> None:
    summary = spread_runs / "gate.md"
    two = gate_many(spread_runs, "within", "base-1", "base-2", extra=("--markdown", str(summary)))
    assert two.exit_code == gate_many(spread_runs, "within", "base-1").exit_code
    assert f"note: 2 baseline runs: a {METHOD} needs at least 3" in two.output
    assert "Notes:" in summary.read_text() and METHOD not in summary.read_text().split("Notes:")[0]


def test_every_baseline_must_be_comparable(spread_runs: Path, tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    result = gate_many(
        spread_runs, "within", "base-1", "fewer", "base-3", extra=("--junit", str(junit))
    )
    assert result.exit_code == GateStatus.NOT_COMPARABLE, result.output
    assert f"dataset differs: baseline fewer {FEWER!r}, candidate {WHOLE!r}" in result.output
    (case,) = ET.parse(junit).getroot().findall("testcase")
    assert case.get("name") == "comparable"


def test_the_gate_of_several_baselines_is_the_pure_functions(spread_runs: Path) -> None:
    docs = {n: load_result(spread_runs / f"{n}.json").document for n in SPREAD}
    labels = ["within", "base-1", "base-2", "base-3"]
    result = gate_runs(docs["within"], [docs[n] for n in labels[1:]], Thresholds(), labels=labels)
    assert result.status is GateStatus.PASS and result.between_runs
    assert result.baselines == ("base-1", "base-2", "base-3")
    one = gate_runs(docs["within"], [docs["base-1"]], Thresholds(), labels=labels[:2])
    assert one == gate(docs["within"], docs["base-1"], Thresholds(), labels=("within", "base-1"))
    with pytest.raises(ValueError, match="labels"):
        gate_runs(docs["within"], [docs["base-1"]], Thresholds(), labels=labels)


def test_no_raw_latencies_is_not_testable(runs: Path) -> None:
    base = document(runs, "base")
    bare = base.model_copy(
        update={
            "measurements": [m.model_copy(update={"raw": None}) for m in base.measurements or []]
        }
    )
    found = verdicts("bare", bare, base)
    latency = [v for v in found if v.metric is not Metric.TOP1]
    assert latency and all(v.outcome is Outcome.NOT_TESTABLE for v in latency)
    assert latency[0].evidence == "not testable: baseline: no raw latencies (run with --raw)"
    assert gate(base, bare, Thresholds()).status is GateStatus.PASS  # reported, never failed


@pytest.mark.parametrize(
    ("candidate", "field"),
    [("copy", "model.sha256"), ("fewer", "dataset"), ("train", "dataset")],
)
def test_other_model_or_dataset_is_not_comparable(
    runs: Path, tmp_path: Path, candidate: str, field: str
) -> None:
    junit = tmp_path / "gate.xml"
    result = mlms_gate(runs, candidate, "base", "--junit", str(junit))
    assert result.exit_code == GateStatus.NOT_COMPARABLE, result.output
    assert f"not comparable: {field} differs: baseline " in result.output
    found = mismatches(document(runs, "base"), document(runs, candidate))
    assert [m.field for m in found] == [field]
    suite = ET.parse(junit).getroot()
    (case,) = suite.findall("testcase")
    error = case.find("error")
    assert case.get("name") == "comparable" and error is not None
    assert field in (error.get("message") or "")


def test_another_dataset_is_refused_from_files_and_from_the_store_alike(runs: Path) -> None:
    """A baseline of another dataset, or of another sample count of the same one, is not
    comparable whether the runs are read from their files, from the store they were recorded
    in, or one from each; the message names both datasets as the store's ``runs.dataset``
    holds them (what `mlms runs --dataset` takes)."""
    ids = {n: json.loads((runs / f"{n}.json").read_text())["run_id"] for n in ("base", "fewer")}
    ids["train"] = json.loads((runs / "train.json").read_text())["run_id"]
    with open_store(store_env(runs)["MLMS_STORE_URL"]) as store:
        stored = {name: store.list_runs(evaluation=name)[0].dataset for name in ids}
    assert stored == {"base": WHOLE, "fewer": FEWER, "train": TRAIN}
    env = {**store_env(runs), "COLUMNS": "200"}
    for candidate in ("fewer", "train"):
        expected = (
            f"NOT COMPARABLE: {candidate} against base: not comparable: dataset differs: "
            f"baseline {stored['base']!r}, candidate {stored[candidate]!r}"
        )
        file = str(runs / f"{candidate}.json")
        for sources in (
            [file, str(runs / "base.json")],
            [ids[candidate], ids["base"]],
            [file, ids["base"]],
        ):
            result = CliRunner().invoke(app, ["gate", *sources], env=env)
            assert result.exit_code == GateStatus.NOT_COMPARABLE, (sources, result.output)
            assert expected in result.output, sources
    # the same dataset from the store and from a file: comparable
    same = CliRunner().invoke(
        app, ["gate", ids["base"], str(runs / "again.json"), *GENEROUS], env=env
    )
    assert same.exit_code == GateStatus.PASS, same.output


def test_a_folder_or_a_missing_file_cannot_be_gated(runs: Path) -> None:
    folder = CliRunner().invoke(app, ["gate", str(runs), str(runs / "base.json")])
    assert folder.exit_code == GateStatus.NOT_COMPARABLE
    assert "the gate takes one run each" in folder.output
    missing = CliRunner().invoke(app, ["gate", "nope.json", str(runs / "base.json")])
    assert missing.exit_code == GateStatus.NOT_COMPARABLE


def test_compare_shows_the_verdicts(runs: Path) -> None:
    paths = [str(runs / f"{n}.json") for n in ("base", "slow")]
    shown = CliRunner().invoke(app, ["compare", *paths], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert "significance (against base)" in shown.output
    assert "slower" in shown.output and "McNemar exact test" in shown.output
    as_json = CliRunner().invoke(app, ["compare", *paths, "--json"])
    data = json.loads(as_json.output)
    found = {(v["metric"], v["batch_size"]): v for v in data["verdicts"]}
    assert len(found) == 7 and {v["run"] for v in data["verdicts"]} == {"slow"}
    p50 = found["latency p50", 8]
    assert (
        p50["outcome"] == "slower" and p50["low"] > 1.05 and p50["method"].startswith("bootstrap")
    )
    top1 = found["top-1 accuracy", None]
    assert (top1["outcome"], top1["p_value"]) == ("no significant difference", 1.0)


def test_compare_says_what_is_not_testable_and_when_it_does_not_judge(
    runs: Path, tmp_path: Path
) -> None:
    from mlmodelscope.report.compare import SIGNIFICANCE_RUNS
    from mlmodelscope.report.render import NO_SIGNIFICANCE

    base = document(runs, "base")
    bare = base.model_copy(
        update={
            "measurements": [m.model_copy(update={"raw": None}) for m in base.measurements or []]
        }
    )
    (tmp_path / "bare.json").write_text(json.dumps(bare.to_json_dict()))
    shown = CliRunner().invoke(
        app,
        ["compare", str(runs / "base.json"), str(tmp_path / "bare.json")],
        env={"COLUMNS": "250"},
    )
    assert shown.exit_code == 0, shown.output
    assert "not testable: candidate: no raw latencies (run with --raw)" in shown.output

    many = [str(runs / "base.json")] * (SIGNIFICANCE_RUNS + 1)
    table = CliRunner().invoke(app, ["compare", *many], env={"COLUMNS": "250"})
    assert table.exit_code == 0 and NO_SIGNIFICANCE in table.output
    as_json = CliRunner().invoke(app, ["compare", *many, "--json"])
    assert json.loads(as_json.output)["verdicts"] is None


# ------------------------------------------------------------------------------ the docs


def gate_docs() -> str:
    text = DOCS.read_text()
    return text[text.index("## `mlms gate`") : text.index("## `mlms report`")]


def test_the_documented_exit_statuses_and_options_are_the_commands(
    runs: Path, spread_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the documented command writes gate.xml and gate.md here
    section = gate_docs()
    statuses = dict(re.findall(r"^\| (\d) \| ([a-z ]+):", section, re.MULTILINE))
    assert statuses == {"0": "pass", "1": "regression", "2": "not comparable"}
    assert {int(k): v for k, v in statuses.items()} == {
        s.value: s.name.lower().replace("_", " ") for s in GateStatus
    }
    help_text = CliRunner().invoke(app, ["gate", "--help"], env={"COLUMNS": "200"}).output
    documented = set(re.findall(r"`(--[a-z-]+)", section))
    assert documented >= {"--max-latency-increase", "--junit", "--markdown", "--store"}
    assert all(option in help_text for option in documented), documented
    defaults = dict(re.findall(r"^\| `(--[a-z-]+)` \| ([\d.]+) \|", section, re.MULTILINE))
    t = Thresholds()
    assert {k: float(v) for k, v in defaults.items()} == {
        "--max-latency-increase": t.max_latency_increase,
        "--max-throughput-decrease": t.max_throughput_decrease,
        "--max-accuracy-drop": t.max_accuracy_drop,
    }
    parameters = inspect.signature(cli.gate).parameters  # the command's own defaults
    for option, value in defaults.items():
        assert parameters[option[2:].replace("-", "_")].default == float(value), option
    # the documented command, on real runs: each documented status
    (command, several, of_sweeps) = re.findall(r"```bash\n(mlms gate .*?)\n```", section, re.DOTALL)
    assert {"--sweep", "--baseline-sweep"} <= set(of_sweeps.split()) & documented
    args = command.replace("\\\n", " ").split()[2:]
    assert args[:2] == [
        "results/new/digits-onnxruntime.json",
        "results/main/digits-onnxruntime.json",
    ]
    for candidate, status in (("again", 0), ("slow", 1), ("fewer", 2)):
        options = args[2:] + (GENEROUS if status == 0 else [])
        assert mlms_gate(runs, candidate, "base", *options).exit_code == status, candidate
    example = re.search(r"`(NOT COMPARABLE: fewer against base: .*?)`", section)
    assert example is not None
    assert example.group(1) in mlms_gate(runs, "fewer", "base").output
    # against several baselines: the documented command on the spread documents
    args = several.replace("\\\n", " ").split()[2:]
    assert args[:4] == [
        f"results/{folder}/digits-onnxruntime.json"
        for folder in ("new", "main-1", "main-2", "main-3")
    ]
    bases = ("base-1", "base-2", "base-3")
    for candidate, status in (("slower", 1), ("within", 0)):
        found = gate_many(spread_runs, candidate, *bases, extra=tuple(args[4:]))
        assert found.exit_code == status, (candidate, found.output)
    evidence = re.search(r"e\.g\. `(ratio .*?)`", section.replace("\n  ", " "))
    assert evidence is not None
    assert evidence.group(1) in (tmp_path / "gate.md").read_text()  # the documented p50 check
    named = re.search(r"`(dataset differs: baseline fewer .*?)`", section)
    assert named is not None
    assert named.group(1) in gate_many(spread_runs, "within", "fewer", *bases).output


# ------------------------------------------------------------------------------ sweeps


def sweep_run(runs: Path, name: str, sweep: str, batch: str) -> dict[str, Any]:
    """The real run ``name`` as a child of ``sweep`` in the cell of batch size ``batch``."""
    doc = json.loads((runs / f"{name}.json").read_text())
    doc["run_id"] = str(uuid.uuid4())
    doc["evaluation"]["name"] = f"{sweep}-{name}-b{batch}"
    doc["evaluation"]["labels"] = {
        LABEL_SWEEP: sweep,
        LABEL_MODEL: "digits",
        LABEL_FRAMEWORK: "onnxruntime",
        LABEL_BATCH_SIZE: batch,
    }
    return doc


@pytest.fixture
def sweeps(runs: Path, tmp_path: Path) -> dict[str, str]:
    """A store with sweeps: ``old`` (base in cells 1 and 8), ``new`` (base again in cell 1,
    slow in cell 8, and copy in cell 16, which ``old`` lacks) and ``same`` (again and base);
    the environment to open it."""
    url = f"sqlite:///{tmp_path / 'sweeps.db'}"
    with open_store(url) as store:
        for doc in (
            sweep_run(runs, "base", "old", "1"),
            sweep_run(runs, "base", "old", "8"),
            sweep_run(runs, "base", "new", "1"),
            sweep_run(runs, "slow", "new", "8"),
            sweep_run(runs, "copy", "new", "16"),
            sweep_run(runs, "again", "same", "1"),
            sweep_run(runs, "base", "same", "8"),
        ):
            store.record(doc)
    return {"MLMS_STORE_URL": url, "COLUMNS": "200"}


def test_a_sweep_is_gated_cell_by_cell(sweeps: dict[str, str], tmp_path: Path) -> None:
    junit, summary = tmp_path / "gate.xml", tmp_path / "gate.md"
    args = ["--sweep", "new", "--baseline-sweep", "old", "--max-latency-increase", "50"]
    files = ["--junit", str(junit), "--markdown", str(summary)]
    result = CliRunner().invoke(app, ["gate", *args, *files], env=sweeps)
    assert result.exit_code == GateStatus.REGRESSION, result.output
    assert "model=digits framework=onnxruntime batch-size=1: PASS" in result.output
    assert "model=digits framework=onnxruntime batch-size=8: REGRESSION" in result.output
    assert "batch-size=16: NOT COMPARABLE" in result.output and "has no run of this cell" in (
        result.output
    )
    assert "REGRESSION: sweep new against sweep old: 3 cells, 1 regressed, 1 passed, 1 not" in (
        result.output
    )
    root = ET.parse(junit).getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert len(suites) == 3
    cell_8 = suites["mlms gate model=digits framework=onnxruntime batch-size=8"]
    assert int(cell_8.get("failures") or 0) >= 1
    assert suites["mlms gate model=digits framework=onnxruntime batch-size=16"].get("errors") == "1"
    text = summary.read_text()
    assert text.startswith("# mlms gate: REGRESSION") and "### model=digits" in text


def test_a_sweep_without_regressions_passes_and_a_missing_cell_is_not_comparable(
    sweeps: dict[str, str],
) -> None:
    same = CliRunner().invoke(
        app, ["gate", "--sweep", "same", "--baseline-sweep", "old", *GENEROUS], env=sweeps
    )
    assert same.exit_code == GateStatus.PASS, same.output
    missing = CliRunner().invoke(
        app, ["gate", "--sweep", "old", "--baseline-sweep", "same-but-gone"], env=sweeps
    )
    assert missing.exit_code == GateStatus.NOT_COMPARABLE
    assert "same-but-gone" in missing.output
    both = CliRunner().invoke(app, ["gate", "--sweep", "new"], env=sweeps)
    assert both.exit_code == GateStatus.NOT_COMPARABLE
    assert "--sweep and --baseline-sweep go together" in both.output


@pytest.fixture
def dataset_sweeps(runs: Path, tmp_path: Path) -> dict[str, str]:
    """A store with sweeps whose runs span two datasets: ``old`` (base and fewer in cell 1,
    base in cell 8) and ``new`` (again in cell 1, fewer in cell 8: only the baseline sweep's
    run on the whole test split is there); the environment to open it."""
    url = f"sqlite:///{tmp_path / 'datasets.db'}"
    with open_store(url) as store:
        for doc in (
            sweep_run(runs, "base", "old", "1"),
            sweep_run(runs, "fewer", "old", "1"),
            sweep_run(runs, "base", "old", "8"),
            sweep_run(runs, "again", "new", "1"),
            sweep_run(runs, "fewer", "new", "8"),
        ):
            store.record(doc)
    return {"MLMS_STORE_URL": url, "COLUMNS": "250"}


def test_a_sweep_cell_is_gated_against_the_baseline_runs_of_its_dataset(
    dataset_sweeps: dict[str, str], tmp_path: Path
) -> None:
    junit = tmp_path / "gate.xml"
    result = CliRunner().invoke(
        app,
        ["gate", "--sweep", "new", "--baseline-sweep", "old", *GENEROUS, "--junit", str(junit)],
        env=dataset_sweeps,
    )
    assert result.exit_code == GateStatus.NOT_COMPARABLE, result.output
    # cell 1: against base alone, the run on 100 samples left out and named
    assert "batch-size=1: PASS: new-again-b1 against old-base-b1: 0 regressions" in result.output
    assert (
        f"note: left out the baseline runs of this cell on another dataset than {WHOLE}: "
        f"old-fewer-b1 ({FEWER})"
    ) in result.output
    # cell 8: its only baseline run is of another sample count: not comparable, both named
    assert (
        "batch-size=8: NOT COMPARABLE: new-fewer-b8 against old-base-b8: not comparable: "
        f"dataset differs: baseline {WHOLE!r}, candidate {FEWER!r}"
    ) in result.output
    assert "2 cells, 0 regressed, 1 passed, 1 not comparable" in result.output
    root = ET.parse(junit).getroot()
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    cell_1 = suites["mlms gate model=digits framework=onnxruntime batch-size=1"]
    assert "old-fewer-b1" in (cell_1.findtext("system-out") or "")
    cell_8 = suites["mlms gate model=digits framework=onnxruntime batch-size=8"]
    error = cell_8.find("testcase/error")
    assert error is not None and FEWER in (error.get("message") or "")


def test_cells_pair_by_their_axis_labels_not_their_names(runs: Path) -> None:
    """The pure pairing: a cell with two baseline runs gates against both (k = 2)."""
    old = [
        LabelledRun("b1", ResultDocument.model_validate(sweep_run(runs, "base", "old", "1"))),
        LabelledRun("b2", ResultDocument.model_validate(sweep_run(runs, "again", "old", "1"))),
    ]
    new = [LabelledRun("n1", ResultDocument.model_validate(sweep_run(runs, "again", "new", "1")))]
    result = gate_sweep("new", "old", new, old, Thresholds())
    [(cell, gated)] = result.cells
    assert dict(cell)[LABEL_BATCH_SIZE] == "1" and gated.baselines == ("b1", "b2")
    assert result.unmatched == []
    with pytest.raises(ValueError, match="sweep old has no runs"):
        gate_sweep("new", "old", new, [], Thresholds())
    # a baseline run of the cell on another dataset is left out, with a note
    fewer = ResultDocument.model_validate(sweep_run(runs, "fewer", "old", "1"))
    mixed = gate_sweep("new", "old", new, [*old, LabelledRun("f1", fewer)], Thresholds())
    [(_, gated)] = mixed.cells
    assert gated.baselines == ("b1", "b2") and not gated.mismatches
    assert gated.notes[-1].endswith(f"than {WHOLE}: f1 ({FEWER})")


# ------------------------------------------------------------------------------ repeats

REPEATS = {
    "old": (1.0, 1.06, 0.96),
    "same": (1.03, 0.98, 1.08),
    "slower": (1.53, 1.455, 1.575),
}
"""Scale factors of the base run's headline figures, one per repeat: a baseline sweep's three
repeats of a cell, a candidate of the same spec within their spread, and one 1.5x slower."""


def repeat_run(runs: Path, sweep: str, batch: str, repeat: int) -> dict[str, Any]:
    """Repeat ``repeat`` of the cell of batch size ``batch`` in ``sweep``: the base run
    scaled by :data:`REPEATS` (:func:`with_latencies`), labelled as a sweep's repeats are."""
    factor = REPEATS[sweep][repeat - 1]
    scaled = with_latencies(document(runs, "base"), factor, seed=repeat).to_json_dict()
    cell = f"{sweep}-digits-onnxruntime-b{batch}"
    scaled["run_id"] = str(uuid.uuid4())
    scaled["evaluation"]["name"] = f"{cell}-r{repeat}"
    scaled["evaluation"]["labels"] = {
        LABEL_SWEEP: sweep,
        LABEL_MODEL: "digits",
        LABEL_FRAMEWORK: "onnxruntime",
        LABEL_BATCH_SIZE: batch,
        LABEL_CELL: cell,
        LABEL_REPEAT: str(repeat),
    }
    return scaled


def repeats_of(runs: Path, sweep: str, batch: str = "1", count: int = 3) -> list[LabelledRun]:
    return [
        LabelledRun(
            f"{sweep}-r{r}", ResultDocument.model_validate(repeat_run(runs, sweep, batch, r))
        )
        for r in range(1, count + 1)
    ]


def test_a_cells_repeats_are_gated_once_pooled(runs: Path) -> None:
    old = repeats_of(runs, "old")
    same = gate_sweep("same", "old", repeats_of(runs, "same"), old, Thresholds())
    [(cell, gated)] = same.cells  # one cell, however many repeats
    assert dict(cell)[LABEL_BATCH_SIZE] == "1"
    assert gated.status is GateStatus.PASS, summary_line(gated)
    assert gated.candidates == ("same-r1", "same-r2", "same-r3")
    assert gated.baselines == ("old-r1", "old-r2", "old-r3") and not gated.between_runs
    assert summary_line(gated).startswith(
        "PASS: 3 candidate runs (same-r1, same-r2, same-r3) pooled against 3 baseline runs "
        "(old-r1, old-r2, old-r3): 0 regressions, 7 passed"
    )
    assert gated.notes[0].startswith("pooled 3 candidate runs against 3 baseline runs")

    slower = gate_sweep("slower", "old", repeats_of(runs, "slower"), old, Thresholds())
    [(_, gated)] = slower.cells
    assert slower.status is gated.status is GateStatus.REGRESSION
    by_name = {c.name: c for c in gated.checks}
    for batch in (1, 8):
        p50 = by_name[f"latency p50 SingleStream batch {batch}"]
        assert p50.status is CheckStatus.REGRESSION, p50.reason
        assert p50.change == pytest.approx(100 * (1.53 / 1.0 - 1))  # median over median
        assert p50.verdict.ratio == pytest.approx(1.53)
        assert (p50.verdict.low or 0) > 1.05 and "3 candidate runs, 3 baseline runs" in (
            p50.verdict.method
        )
        throughput = by_name[f"throughput SingleStream batch {batch}"]
        assert throughput.status is CheckStatus.REGRESSION, throughput.reason
    assert by_name["top-1 accuracy"].status is CheckStatus.PASS


def test_repeats_against_a_sweep_of_one_run_per_cell(runs: Path) -> None:
    """A baseline sweep from before repeats: its one run's figures held fixed."""
    [first] = repeats_of(runs, "old", count=1)
    same = gate_sweep("same", "old", repeats_of(runs, "same"), [first], Thresholds())
    [(_, gated)] = same.cells
    assert gated.status is GateStatus.PASS and gated.baselines == () and gated.baseline_runs == 1
    assert gated.notes[0].startswith("pooled 3 candidate runs against 1 baseline run: ")
    assert "the candidate runs resampled against the one baseline run" in (
        gated.checks[0].verdict.method
    )
    slower = gate_sweep("slower", "old", repeats_of(runs, "slower"), [first], Thresholds())
    assert slower.status is GateStatus.REGRESSION


def test_a_single_candidate_run_is_not_pooled(runs: Path) -> None:
    old = repeats_of(runs, "old")
    [one] = repeats_of(runs, "slower", count=1)
    docs = [b.document for b in old]
    labels = [b.label for b in old]
    pooled = gate_pooled(
        [one.document], docs, Thresholds(), candidate_labels=[one.label], baseline_labels=labels
    )
    assert pooled == gate_runs(one.document, docs, Thresholds(), labels=[one.label, *labels])
    assert not pooled.pooled and pooled.between_runs


def test_pooled_runs_must_all_be_comparable(runs: Path) -> None:
    old, same = repeats_of(runs, "old"), repeats_of(runs, "same")
    fewer = load_result(runs / "fewer.json").document
    result = gate_pooled(
        [same[0].document, fewer],
        [b.document for b in old],
        Thresholds(),
        candidate_labels=["same-r1", "fewer"],
        baseline_labels=[b.label for b in old],
    )
    assert result.status is GateStatus.NOT_COMPARABLE and not result.checks
    assert str(result.mismatches[0]) == (
        f"dataset differs: candidate same-r1 {WHOLE!r}, candidate fewer {FEWER!r}"
    )
    with pytest.raises(ValueError, match="labels"):
        gate_pooled([same[0].document], [], Thresholds(), candidate_labels=[], baseline_labels=[])


@pytest.fixture
def repeat_sweeps(runs: Path, tmp_path: Path) -> dict[str, str]:
    """A store with sweeps of three repeats per cell: ``old`` (cells 1 and 8), ``same`` and
    ``slower`` (cells 1 and 8, and 16, which ``old`` lacks); the environment to open it."""
    url = f"sqlite:///{tmp_path / 'repeats.db'}"
    with open_store(url) as store:
        for sweep, batches in (("old", "1 8"), ("same", "1 8 16"), ("slower", "1 8")):
            for batch in batches.split():
                for repeat in (1, 2, 3):
                    store.record(repeat_run(runs, sweep, batch, repeat))
    return {"MLMS_STORE_URL": url, "COLUMNS": "250"}


def test_a_sweep_of_repeats_reports_one_result_per_cell(
    repeat_sweeps: dict[str, str], tmp_path: Path
) -> None:
    junit, summary_md = tmp_path / "gate.xml", tmp_path / "gate.md"
    reports = ["--junit", str(junit), "--markdown", str(summary_md)]
    slower = CliRunner().invoke(
        app, ["gate", "--sweep", "slower", "--baseline-sweep", "old", *reports], env=repeat_sweeps
    )
    assert slower.exit_code == GateStatus.REGRESSION, slower.output
    assert "REGRESSION: sweep slower against sweep old: 2 cells, 2 regressed" in slower.output
    assert "batch-size=1: REGRESSION: 3 candidate runs (" in slower.output
    assert ") pooled against 3 baseline runs (" in slower.output
    root = ET.parse(junit).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 2  # one per cell, not one per repeat
    for suite in suites:
        properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert properties == {"candidate-runs": "3", "baseline-runs": "3"}
        assert int(suite.get("failures") or 0) >= 6
        assert "note: pooled 3 candidate runs against 3 baseline runs" in (
            suite.findtext("system-out") or ""
        )
    text = summary_md.read_text()
    row = "| model=digits framework=onnxruntime batch-size=8 | REGRESSION (3 candidate runs pooled "
    assert row + "against 3 baseline runs) |" in text
    assert "| metric | baseline (median) | candidate (median) |" in text
    runs_in_order = ", ".join(f"**slower-digits-onnxruntime-b1-r{r}**" for r in (1, 2, 3))
    assert f"3 candidate runs {runs_in_order}, pooled, against 3 baseline runs **old-" in text

    same = CliRunner().invoke(
        app, ["gate", "--sweep", "same", "--baseline-sweep", "old", *reports], env=repeat_sweeps
    )
    assert same.exit_code == GateStatus.NOT_COMPARABLE, same.output  # cell 16: no baseline
    assert "3 cells, 0 regressed, 2 passed, 1 not comparable" in same.output
    assert "batch-size=16: NOT COMPARABLE: same-digits-onnxruntime-b16-r1, " in same.output
    assert "-b16-r3 have no run of this cell in sweep old" in same.output
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert len(suites) == 3
    docs = gate_docs()
    assert "`candidate-runs`" in docs and "`baseline-runs`" in docs
