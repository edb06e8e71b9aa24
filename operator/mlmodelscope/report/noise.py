"""A candidate run against the run-to-run spread of several baseline runs of the same spec.

The bootstrap intervals of :mod:`~mlmodelscope.report.verdicts` hold the variation within
two runs; on a shared machine the variation between runs (another process, another moment's
load) is far larger and invisible to them, so two runs of one spec differ "significantly".
With k >= :data:`MIN_RUNS` baseline runs the spread between runs can be estimated: each
latency and throughput figure (the documents' headline p50, p99 and throughput per scenario
and batch size) is taken in log space, x_i = log(baseline run i's value), and the candidate's
y = log(value) is judged against a one-sided prediction interval for one more run of the
same spec, ``mean(x) + t(1 - a, k - 1) * s * sqrt(1 + 1/k)`` (latency; throughput: the lower
bound, ``-``). ``a`` is :data:`FAMILY_ALPHA` over the number of figures judged (Bonferroni),
so that a gate of unchanged runs fails at most that often as a whole. Log space because run
to run the figures scale (a busier machine multiplies latency) and a ratio reads the same up
and down.

The verdict is "slower" beyond the bound on the worse side, "faster" beyond the mirrored
bound; :func:`mlmodelscope.report.gate.check` adds the threshold, against the baselines'
geometric mean. Top-1 accuracy keeps McNemar's test against the first baseline run: it needs
one run's per-sample classes, and for one spec the classes are the same in every run.

Pure functions of validated documents; scipy for ``scipy.stats.t``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.significance import DEFAULT_LEVEL
from mlmodelscope.report.verdicts import (
    NEEDS_SCIPY,
    Metric,
    MetricVerdict,
    Outcome,
    accuracy_verdict,
    scipy_missing,
)

MIN_RUNS: Final = 3
"""Baseline runs a prediction interval needs: two give one degree of freedom, whose t
quantile at 1 - 0.05/6 (the digits spec's six checks) is 38: a bound out of reach."""
FAMILY_ALPHA: Final = 1 - DEFAULT_LEVEL
"""The false-alarm rate the whole gate targets, split evenly over its figures."""
METHOD: Final = "prediction interval over k baseline runs"

_HIGHER_IS_WORSE = {Metric.P50: True, Metric.P99: True, Metric.THROUGHPUT: False}


@dataclass(frozen=True)
class Spread:
    """One figure of k baseline runs, in log space."""

    values: tuple[float, ...]
    """The runs' figures as the documents state them (ms, samples/s); all positive."""

    @property
    def k(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        """The mean of the logs: log of the geometric mean."""
        return math.fsum(math.log(v) for v in self.values) / self.k

    @property
    def sd(self) -> float:
        """The sample standard deviation of the logs (k - 1 in the denominator)."""
        mean = self.mean
        return math.sqrt(math.fsum((math.log(v) - mean) ** 2 for v in self.values) / (self.k - 1))

    @property
    def geometric_mean(self) -> float:
        return math.exp(self.mean)

    def margin(self, alpha: float) -> float:
        """``t(1 - alpha, k - 1) * s * sqrt(1 + 1/k)``: how far above the mean (log space) one
        more run lands with probability ``1 - alpha``, the runs' logs normal and independent."""
        from scipy.stats import t

        return float(t.ppf(1 - alpha, self.k - 1)) * self.sd * math.sqrt(1 + 1 / self.k)


def spread(values: Sequence[float]) -> Spread:
    """The :class:`Spread` of ``values``; ValueError for fewer than 2 or one not positive."""
    if len(values) < 2:
        raise ValueError(f"a spread needs at least 2 runs; got {len(values)}")
    if any(not v > 0 for v in values):
        raise ValueError(f"figures must be positive to take their log; got {list(values)}")
    return Spread(tuple(float(v) for v in values))


@dataclass(frozen=True)
class Judged:
    """One figure of the candidate against the baselines' spread, at one-sided ``alpha``."""

    metric: Metric
    spread: Spread
    candidate: float
    alpha: float

    @property
    def ratio(self) -> float:
        """Candidate over the baselines' geometric mean."""
        return self.candidate / self.spread.geometric_mean

    @property
    def bound(self) -> float:
        """The prediction bound on the worse side, as a ratio to the geometric mean: above 1
        for latency, below 1 for throughput."""
        margin = self.spread.margin(self.alpha)
        return math.exp(margin if _HIGHER_IS_WORSE[self.metric] else -margin)

    @property
    def outcome(self) -> Outcome:
        """Slower beyond the bound, faster beyond the mirrored one, else no difference."""
        margin = self.spread.margin(self.alpha)
        shift = math.log(self.candidate) - self.spread.mean
        worse = shift if _HIGHER_IS_WORSE[self.metric] else -shift
        if worse > margin:
            return Outcome.SLOWER
        if -worse > margin:
            return Outcome.FASTER
        return Outcome.SAME


def method_text(k: int, figures: int) -> str:
    return (
        f"{METHOD} (k = {k}): log of each run's headline figure, bound mean ± "
        f"t(1 - a, k - 1) · s · √(1 + 1/k), one-sided, a = {FAMILY_ALPHA:g} / {figures} "
        "checks (Bonferroni); a verdict when the candidate lies beyond it"
    )


def headline_figures(
    doc: ResultDocument,
) -> dict[tuple[str, int], dict[Metric, float | None]]:
    return {
        (row.scenario, row.batch_size): {
            Metric.P50: row.latency_ms.p50,
            Metric.P99: row.latency_ms.p99,
            Metric.THROUGHPUT: row.throughput,
        }
        for row in doc.results or []
    }


@dataclass(frozen=True)
class Figure:
    """One latency or throughput figure of the candidate and of every baseline run."""

    scenario: str
    batch_size: int
    metric: Metric
    candidate: float | None
    baselines: tuple[float | None, ...]

    @property
    def why_not(self) -> str | None:
        """Why it cannot be judged; ``None`` when it can."""
        if self.metric is Metric.THROUGHPUT and self.scenario == "Server":
            return "Server throughput follows the arrival rate, not the system under test"
        if self.candidate is None or not self.candidate > 0:
            return f"candidate: no positive {self.metric}"
        for index, value in enumerate(self.baselines, 1):
            if value is None or not value > 0:
                return f"baseline run {index} of {len(self.baselines)}: no positive {self.metric}"
        return None


def figures(baselines: Sequence[ResultDocument], candidate: ResultDocument) -> list[Figure]:
    """p50, p99 and throughput of each scenario and batch size that every run has a row of, in
    the candidate's order."""
    base = [headline_figures(doc) for doc in baselines]
    return [
        Figure(key[0], key[1], metric, value, tuple(mine[key][metric] for mine in base))
        for key, row in headline_figures(candidate).items()
        if all(key in mine for mine in base)
        for metric, value in row.items()
    ]


def figure_verdict(label: str, figure: Figure, checks: int, why: str | None) -> MetricVerdict:
    """``figure`` judged as one of ``checks`` figures: one-sided at :data:`FAMILY_ALPHA` /
    ``checks`` (or not testable, ``why``)."""
    common = (label, figure.metric, figure.scenario, figure.batch_size)
    positive = [v for v in figure.baselines if v is not None and v > 0]
    if why is not None:
        geometric = spread(positive).geometric_mean if len(positive) >= 2 else None
        return MetricVerdict(
            *common, geometric, figure.candidate, Outcome.NOT_TESTABLE, "-", why=why
        )
    assert figure.candidate is not None
    alpha = FAMILY_ALPHA / checks
    judged = Judged(figure.metric, spread(positive), figure.candidate, alpha)
    k = len(figure.baselines)
    return MetricVerdict(
        *common,
        judged.spread.geometric_mean,
        figure.candidate,
        judged.outcome,
        method_text(k, checks),
        ratio=judged.ratio,
        level=1 - alpha,
        bound=judged.bound,
        baseline_runs=k,
    )


def run_verdicts(
    label: str, baselines: Sequence[ResultDocument], candidate: ResultDocument
) -> list[MetricVerdict]:
    """Every metric of ``candidate`` (labelled ``label``) against ``baselines`` (at least
    :data:`MIN_RUNS` comparable runs): each :func:`figures` judged by the prediction interval
    at :data:`FAMILY_ALPHA` over the number judged; then top-1 accuracy against the first
    baseline run."""
    if len(baselines) < MIN_RUNS:
        raise ValueError(f"{METHOD} needs at least {MIN_RUNS} baseline runs; got {len(baselines)}")
    found = figures(baselines, candidate)
    missing = NEEDS_SCIPY if scipy_missing() else None
    why_not = [missing or f.why_not for f in found]
    checks = sum(why is None for why in why_not)
    verdicts = [
        figure_verdict(label, figure, checks, why)
        for figure, why in zip(found, why_not, strict=True)
    ]
    accuracy = accuracy_verdict(label, baselines[0], candidate)
    if accuracy is not None:
        verdicts.append(accuracy)
    return verdicts
