"""Whether a candidate run differs from a baseline run, metric by metric, and how sure that is:
latency p50 and p99 and throughput per scenario and batch size, and top-1 accuracy, each with
a verdict (:class:`Outcome`), its interval or p-value and the method that gave it.

Latency and throughput come from the raw per-query latencies of the measurement
(``measurements[i].raw.latencies_ns``); a document without them (``mlms run --no-raw``, or
LoadGen's driver, which keeps its latencies to itself) gives "not testable" with the reason.

Accuracy: a result document records each sample's top-1 class
(``accuracy.predictions``) but not its label, so per-sample correctness, which McNemar's test
needs, is not in it. What is: the samples whose top-1 class differs between the runs (the only
ones whose correctness can differ, when both apply the same postprocessing) and each run's
top-1 count, which fix the difference of the discordant counts but bound only their sum. The
test takes the largest McNemar p-value over every split the documents allow, so it never calls
a difference significant that some possible labelling would not (:func:`accuracy_bounded`).

Pure functions of validated documents; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import numpy as np

from mlmodelscope.contract.result import Measurement, ResultDocument
from mlmodelscope.report.significance import (
    DEFAULT_LEVEL,
    DEFAULT_MIN_EFFECT,
    DEFAULT_RESAMPLES,
    LatencyComparison,
    Verdict,
    latency_ratio,
)

MAX_LATENCIES: Final = 2000
"""Latencies per run the bootstraps resample: more are thinned to this many, evenly spaced in
issue order. BCa's jackknife costs n² in time, and a thinned sample
only widens the interval, so it never makes a difference look more certain."""
ALPHA: Final = 1 - DEFAULT_LEVEL


class Metric(StrEnum):
    P50 = "latency p50"
    P99 = "latency p99"
    THROUGHPUT = "throughput"
    TOP1 = "top-1 accuracy"


class Outcome(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    BETTER = "better"
    WORSE = "worse"
    SAME = "no significant difference"
    NOT_TESTABLE = "not testable"


_OUTCOME = {
    Verdict.FASTER: Outcome.FASTER,
    Verdict.SLOWER: Outcome.SLOWER,
    Verdict.BETTER: Outcome.BETTER,
    Verdict.WORSE: Outcome.WORSE,
    Verdict.SAME: Outcome.SAME,
}


@dataclass(frozen=True)
class MetricVerdict:
    """One metric of a candidate run against the baseline.

    ``baseline`` and ``candidate`` are the documents' headline values (ms, samples/s, or the
    top-1 fraction); ``low``/``high`` the interval of the candidate/baseline ratio at
    ``level`` (latency, throughput), ``p_value`` the test's (accuracy); ``why`` says why a
    metric is not testable. Judged against several baseline runs
    (:mod:`~mlmodelscope.report.noise`), ``baseline`` is their geometric mean, ``ratio`` the
    candidate's to it, and ``bound`` the one-sided prediction bound on the worse side at
    ``level``, from ``baseline_runs`` runs."""

    run: str
    """The candidate's label."""
    metric: Metric
    scenario: str | None
    """``None`` for top-1 accuracy: one accuracy pass per run, whatever the batch sizes."""
    batch_size: int | None
    baseline: float | None
    candidate: float | None
    outcome: Outcome
    method: str
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    level: float | None = None
    p_value: float | None = None
    why: str | None = None
    bound: float | None = None
    baseline_runs: int | None = None

    @property
    def where(self) -> str:
        """``SingleStream batch 8``, or ``accuracy pass``."""
        if self.scenario is None:
            return "accuracy pass"
        return f"{self.scenario} batch {self.batch_size}"

    @property
    def evidence(self) -> str:
        """The interval or p-value as text (``ratio 1.43 [1.38, 1.47] at 95%``)."""
        if self.outcome is Outcome.NOT_TESTABLE:
            return f"not testable: {self.why}"
        if self.p_value is not None:
            return f"p = {self.p_value:.3g}"
        if self.bound is not None and self.ratio is not None and self.level is not None:
            return (
                f"ratio {self.ratio:.3f} to the geometric mean of {self.baseline_runs} runs, bound "
                f"{self.bound:.3f} (one-sided prediction interval at {self.level:.2%})"
            )
        if self.ratio is None or self.low is None or self.high is None or self.level is None:
            return "-"
        return f"ratio {self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] at {self.level:.0%}"


# ------------------------------------------------------------------------------ latency


def thinned(values: np.ndarray, limit: int = MAX_LATENCIES) -> np.ndarray:
    """At most ``limit`` of ``values``, evenly spaced in their order (all of them when fewer)."""
    if values.size <= limit:
        return values
    return values[np.linspace(0, values.size - 1, limit).round().astype(np.int64)]


def raw_latencies(measurement: Measurement | None) -> np.ndarray | str:
    """The measurement's per-query latencies (seconds), or why there are none."""
    if measurement is None:
        return "no measurement of this batch size in the document"
    if measurement.raw is None:
        return "no raw latencies (run with --raw)"
    if not measurement.raw.latencies_ns:
        if measurement.driver == "loadgen":
            return "no raw latencies (LoadGen's driver keeps them to itself)"
        return "no raw latencies"
    if len(measurement.raw.latencies_ns) < 2:
        return "fewer than 2 raw latencies"
    return np.asarray(measurement.raw.latencies_ns, dtype=np.float64) / 1e9


NEEDS_SCIPY = "needs scipy, which is not installed (pip install scipy)"


def scipy_missing() -> bool:
    """The tests need scipy, which mlmodelscope's core does not install."""
    import importlib.util

    return importlib.util.find_spec("scipy") is None


def _sampled_from(*measurements: Measurement | None) -> list[int]:
    """The query counts a published document's latency samples were taken from."""
    return [
        m.raw.sample_of
        for m in measurements
        if m is not None and m.raw is not None and m.raw.sample_of is not None
    ]


def _thinning_note(*sizes: int) -> str:
    if max(sizes) <= MAX_LATENCIES:
        return ""
    return f"; at most {MAX_LATENCIES} latencies per run, evenly spaced"


def ratio_interval(
    baseline: np.ndarray,
    candidate: np.ndarray,
    statistic: Callable[[np.ndarray, int], np.ndarray],
    *,
    method: str,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(statistic(candidate) / statistic(baseline), its bootstrap interval's low and high) at
    :data:`~mlmodelscope.report.significance.DEFAULT_LEVEL`; independent samples, seeded."""
    from scipy.stats import bootstrap

    def ratio(c: np.ndarray, base: np.ndarray, axis: int = -1) -> np.ndarray:
        result: np.ndarray = statistic(c, axis) / statistic(base, axis)
        return result

    found = bootstrap(
        (candidate, baseline),
        ratio,
        n_resamples=resamples,
        confidence_level=DEFAULT_LEVEL,
        method=method,
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    interval = found.confidence_interval
    return float(ratio(candidate, baseline)), float(interval.low), float(interval.high)


def _by_ratio(low: float, high: float, higher_is_faster: bool) -> Outcome:
    """Faster or slower only when the whole interval clears the minimum effect."""
    if low > 1 + DEFAULT_MIN_EFFECT:
        return Outcome.FASTER if higher_is_faster else Outcome.SLOWER
    if high < 1 - DEFAULT_MIN_EFFECT:
        return Outcome.SLOWER if higher_is_faster else Outcome.FASTER
    return Outcome.SAME


def _p99(values: np.ndarray, axis: int) -> np.ndarray:
    result: np.ndarray = np.percentile(values, 99, axis=axis)
    return result


def _mean(values: np.ndarray, axis: int) -> np.ndarray:
    result: np.ndarray = np.mean(values, axis=axis)
    return result


MIN_EFFECT_NOTE = f"verdict when the interval clears ±{DEFAULT_MIN_EFFECT:.0%}"


def latency_verdicts(
    label: str,
    scenario: str,
    batch_size: int,
    baseline: Measurement | None,
    candidate: Measurement | None,
    values: dict[Metric, tuple[float | None, float | None]],
) -> list[MetricVerdict]:
    """p50, p99 and throughput of one scenario and batch size. ``values`` holds each metric's
    headline (baseline, candidate) numbers as the documents state them."""

    def verdict(
        metric: Metric,
        outcome: Outcome,
        method: str,
        *,
        ratio: float | None = None,
        low: float | None = None,
        high: float | None = None,
        level: float | None = None,
        why: str | None = None,
    ) -> MetricVerdict:
        base_value, cand_value = values[metric]
        return MetricVerdict(
            label,
            metric,
            scenario,
            batch_size,
            base_value,
            cand_value,
            outcome,
            method,
            ratio=ratio,
            low=low,
            high=high,
            level=level,
            why=why,
        )

    base, cand = raw_latencies(baseline), raw_latencies(candidate)
    if isinstance(base, str) or isinstance(cand, str) or scipy_missing():
        if isinstance(base, str):
            why = f"baseline: {base}"
        else:
            why = f"candidate: {cand}" if isinstance(cand, str) else NEEDS_SCIPY
        return [verdict(m, Outcome.NOT_TESTABLE, "-", why=why) for m in values]
    note = _thinning_note(base.size, cand.size, *_sampled_from(baseline, candidate))
    base, cand = thinned(base), thinned(cand)
    found: list[MetricVerdict] = []
    p50: LatencyComparison = latency_ratio(base, cand)
    found.append(
        verdict(
            Metric.P50,
            _OUTCOME[p50.verdict],
            f"{p50.method}: median ratio{note}; {MIN_EFFECT_NOTE}",
            ratio=p50.ratio,
            low=p50.low,
            high=p50.high,
            level=p50.level,
        )
    )
    ratio, low, high = ratio_interval(base, cand, _p99, method="percentile")
    found.append(
        verdict(
            Metric.P99,
            _by_ratio(low, high, higher_is_faster=False),
            f"bootstrap percentile, {DEFAULT_RESAMPLES} resamples, seed 0: p99 ratio{note}; "
            f"{MIN_EFFECT_NOTE}",
            ratio=ratio,
            low=low,
            high=high,
            level=DEFAULT_LEVEL,
        )
    )
    if scenario == "Server":
        found.append(
            verdict(
                Metric.THROUGHPUT,
                Outcome.NOT_TESTABLE,
                "-",
                why="Server throughput follows the arrival rate, not the system under test",
            )
        )
        return found
    # queries run back to back: throughput is samples per query over the mean latency
    ratio, low, high = ratio_interval(base, cand, _mean, method="BCa")
    found.append(
        verdict(
            Metric.THROUGHPUT,
            _by_ratio(1 / high, 1 / low, higher_is_faster=True),
            f"bootstrap BCa, {DEFAULT_RESAMPLES} resamples, seed 0: inverse mean-latency ratio "
            f"(queries back to back){note}; {MIN_EFFECT_NOTE}",
            ratio=1 / ratio,
            low=1 / high,
            high=1 / low,
            level=DEFAULT_LEVEL,
        )
    )
    return found


# ------------------------------------------------------------------------------ accuracy


@dataclass(frozen=True)
class BoundedMcNemar:
    """McNemar's exact test where only the difference of the discordant counts is known."""

    samples: int
    differing: int
    """Samples whose top-1 class differs: an upper bound of the discordant pairs."""
    net: int
    """Candidate-only right minus baseline-only right (from the two top-1 counts)."""
    p_value: float
    """The largest p-value over every discordant count the documents allow."""
    verdict: Outcome


def accuracy_bounded(
    samples: int, differing: int, net: int, *, alpha: float = ALPHA
) -> BoundedMcNemar:
    """McNemar's exact test (two-sided binomial, p = 1/2, on the discordant pairs) with the
    discordant count D unknown but for ``|net| <= D <= differing`` and D ≡ net (mod 2): its
    largest p-value over those D. Significant only if significant for every D."""
    from scipy.stats import binomtest

    if abs(net) > differing:
        raise ValueError(
            f"a top-1 difference of {net} samples, but only {differing} samples differ"
        )
    p_value = 0.0
    for discordant in range(abs(net), differing + 1, 2):
        if discordant == 0:
            p_value = 1.0
            break
        only_candidate = (discordant + net) // 2
        p_value = max(p_value, float(binomtest(only_candidate, discordant, 0.5).pvalue))
        if p_value >= 1.0:
            break
    verdict = Outcome.SAME
    if p_value < alpha:
        verdict = Outcome.BETTER if net > 0 else Outcome.WORSE
    return BoundedMcNemar(samples, differing, net, p_value, verdict)


def _dataset_key(doc: ResultDocument) -> tuple[str, object, int] | None:
    if doc.dataset is None:
        return None
    return doc.dataset.name, (doc.spec.get("dataset") or {}).get("split"), doc.dataset.samples


def _accuracy_not_testable(baseline: ResultDocument, candidate: ResultDocument) -> str | None:
    """Why the documents cannot tell which samples' correctness differs (None: they can)."""
    for role, doc in (("baseline", baseline), ("candidate", candidate)):
        acc = doc.accuracy
        if acc is None or acc.top1 is None:
            return f"{role}: no top-1 accuracy (no accuracy pass, or an unlabelled dataset)"
        if acc.predictions is None:
            return f"{role}: per-sample predictions not recorded by this agent version"
        if acc.predictions.count < acc.samples:
            return (
                f"{role}: per-sample predictions of only the first {acc.predictions.count} of "
                f"{acc.samples} samples recorded"
            )
    if _dataset_key(baseline) != _dataset_key(candidate):
        return "the runs evaluated different datasets"
    if baseline.spec.get("postprocessing") != candidate.spec.get("postprocessing"):
        return "different postprocessing: equal top-1 classes need not score the same"
    return None


def accuracy_verdict(
    label: str, baseline: ResultDocument, candidate: ResultDocument
) -> MetricVerdict | None:
    """Top-1 accuracy of the candidate against the baseline; ``None`` when neither run has
    one (nothing to compare)."""
    base_top1 = baseline.accuracy.top1 if baseline.accuracy is not None else None
    cand_top1 = candidate.accuracy.top1 if candidate.accuracy is not None else None
    if base_top1 is None and cand_top1 is None:
        return None
    why = NEEDS_SCIPY if scipy_missing() else _accuracy_not_testable(baseline, candidate)
    if why is None:
        assert baseline.accuracy is not None and baseline.accuracy.predictions is not None
        assert candidate.accuracy is not None and candidate.accuracy.predictions is not None
        assert base_top1 is not None and cand_top1 is not None
        samples = baseline.accuracy.samples
        base_classes = baseline.accuracy.predictions.classes_list()[:samples]
        cand_classes = candidate.accuracy.predictions.classes_list()[:samples]
        differing = sum(b != c for b, c in zip(base_classes, cand_classes, strict=True))
        net = round(samples * (cand_top1 - base_top1))
        if abs(net) <= differing:
            test = accuracy_bounded(samples, differing, net)
            return MetricVerdict(
                label,
                Metric.TOP1,
                None,
                None,
                base_top1,
                cand_top1,
                test.verdict,
                f"McNemar exact test, discordant pairs bounded by the {differing} of {samples} "
                "samples whose top-1 class differs (the largest p-value over the splits the "
                f"documents allow); significant at p < {ALPHA:.2g}",
                p_value=test.p_value,
            )
        why = (
            f"the top-1 counts differ by {abs(net)} samples but only {differing} samples' "
            "top-1 classes differ: the recorded classes are not what was scored"
        )
    return MetricVerdict(
        label, Metric.TOP1, None, None, base_top1, cand_top1, Outcome.NOT_TESTABLE, "-", why=why
    )


# ------------------------------------------------------------------------------ both


def _measurements(doc: ResultDocument) -> dict[tuple[str, int], Measurement]:
    found: dict[tuple[str, int], Measurement] = {}
    for measurement in doc.measurements or []:
        found.setdefault((measurement.scenario, measurement.batch_size), measurement)
    return found


def verdicts(
    label: str, baseline: ResultDocument, candidate: ResultDocument
) -> list[MetricVerdict]:
    """Every metric of ``candidate`` (labelled ``label``) against ``baseline``: p50, p99 and
    throughput for each scenario and batch size both have a row of, then top-1 accuracy."""
    base_rows = {(row.scenario, row.batch_size): row for row in baseline.results or []}
    base_measured, cand_measured = _measurements(baseline), _measurements(candidate)
    found: list[MetricVerdict] = []
    for row in candidate.results or []:
        key = (row.scenario, row.batch_size)
        base = base_rows.get(key)
        if base is None:
            continue
        values = {
            Metric.P50: (base.latency_ms.p50, row.latency_ms.p50),
            Metric.P99: (base.latency_ms.p99, row.latency_ms.p99),
            Metric.THROUGHPUT: (base.throughput, row.throughput),
        }
        found.extend(
            latency_verdicts(
                label,
                row.scenario,
                row.batch_size,
                base_measured.get(key),
                cand_measured.get(key),
                values,
            )
        )
    accuracy = accuracy_verdict(label, baseline, candidate)
    if accuracy is not None:
        found.append(accuracy)
    return found


def all_verdicts(documents: Sequence[ResultDocument], labels: Sequence[str]) -> list[MetricVerdict]:
    """Every document after the first against the first (the reference), in order."""
    return [
        verdict
        for doc, label in zip(documents[1:], labels[1:], strict=True)
        for verdict in verdicts(label, documents[0], doc)
    ]
