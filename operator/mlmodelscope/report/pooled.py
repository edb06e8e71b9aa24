"""Several candidate runs of one spec pooled against several baseline runs: each latency and
throughput figure judged once, by the ratio of the two groups' medians over runs.

A sweep's cell with repeats has several candidate runs. Gated one by one, the cell regresses
when any run does, so the false alarms grow with the repeats; pooled, more runs narrow the
interval instead. Each figure (the documents' headline p50, p99 and throughput per scenario
and batch size) is taken from every run, and ``median(candidate runs) / median(baseline
runs)`` gets a bootstrap interval over runs (``scipy.stats.bootstrap``: the two groups as
independent samples, percentile method, seeded; against a single baseline run only the
candidate runs are resampled, its figure held fixed). The level is ``1 - a`` with ``a`` =
:data:`~mlmodelscope.report.noise.FAMILY_ALPHA` over the figures judged (Bonferroni, as the
prediction interval over k baseline runs splits it). A verdict when the whole interval clears
the minimum effect (±5 %), as for the bootstrap within two runs;
:func:`mlmodelscope.report.gate.check` adds the threshold on the ratio of the medians. Top-1
accuracy: McNemar's test of the first candidate run against the first baseline run (for one
spec the classes are the same in every run).

Pure functions of validated documents; scipy for ``scipy.stats.bootstrap``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from mlmodelscope.contract.result import ResultDocument
from mlmodelscope.report.noise import FAMILY_ALPHA, headline_figures
from mlmodelscope.report.significance import DEFAULT_MIN_EFFECT, DEFAULT_RESAMPLES
from mlmodelscope.report.verdicts import (
    NEEDS_SCIPY,
    Metric,
    MetricVerdict,
    Outcome,
    accuracy_verdict,
    scipy_missing,
)

METHOD: Final = "bootstrap over runs of the ratio of the medians"
SEED: Final = 0

_HIGHER_IS_WORSE = {Metric.P50: True, Metric.P99: True, Metric.THROUGHPUT: False}


@dataclass(frozen=True)
class MedianRatio:
    """``median(candidate) / median(baseline)`` and its bootstrap interval at ``level``."""

    ratio: float
    low: float
    high: float
    level: float


def median_ratio(
    baseline: Sequence[float],
    candidate: Sequence[float],
    level: float,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = SEED,
) -> MedianRatio:
    """The ratio of the medians with its percentile bootstrap interval: both groups resampled
    as independent samples, or, for a single baseline value, the candidate values alone.
    ValueError for fewer than 2 candidate values or no baseline value."""
    from scipy.stats import bootstrap

    cand = np.asarray(candidate, dtype=np.float64)
    base = np.asarray(baseline, dtype=np.float64)
    if cand.size < 2 or base.size < 1:
        raise ValueError(
            f"pooling needs 2 candidate values and 1 baseline value; got {cand.size} and "
            f"{base.size}"
        )

    def two(c: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        result: np.ndarray = np.median(c, axis=axis) / np.median(b, axis=axis)
        return result

    def one(c: np.ndarray, axis: int = -1) -> np.ndarray:
        result: np.ndarray = np.median(c, axis=axis) / base[0]
        return result

    rng = np.random.default_rng(seed)
    if base.size == 1:
        found = bootstrap(
            (cand,),
            one,
            n_resamples=resamples,
            confidence_level=level,
            method="percentile",
            vectorized=True,
            rng=rng,
        )
    else:
        found = bootstrap(
            (cand, base),
            two,
            paired=False,
            n_resamples=resamples,
            confidence_level=level,
            method="percentile",
            vectorized=True,
            rng=rng,
        )
    interval = found.confidence_interval
    return MedianRatio(float(two(cand, base)), float(interval.low), float(interval.high), level)


def outcome(metric: Metric, found: MedianRatio) -> Outcome:
    """Slower or faster only when the whole interval clears ±5 % on one side."""
    if found.low > 1 + DEFAULT_MIN_EFFECT:
        return Outcome.SLOWER if _HIGHER_IS_WORSE[metric] else Outcome.FASTER
    if found.high < 1 - DEFAULT_MIN_EFFECT:
        return Outcome.FASTER if _HIGHER_IS_WORSE[metric] else Outcome.SLOWER
    return Outcome.SAME


@dataclass(frozen=True)
class PooledFigure:
    """One latency or throughput figure of every candidate and every baseline run."""

    scenario: str
    batch_size: int
    metric: Metric
    candidates: tuple[float | None, ...]
    baselines: tuple[float | None, ...]

    @property
    def why_not(self) -> str | None:
        """Why it cannot be judged; ``None`` when it can."""
        if self.metric is Metric.THROUGHPUT and self.scenario == "Server":
            return "Server throughput follows the arrival rate, not the system under test"
        for role, values in (("candidate", self.candidates), ("baseline", self.baselines)):
            for index, value in enumerate(values, 1):
                if value is None or not value > 0:
                    return f"{role} run {index} of {len(values)}: no positive {self.metric}"
        return None


def pooled_figures(
    candidates: Sequence[ResultDocument], baselines: Sequence[ResultDocument]
) -> list[PooledFigure]:
    """p50, p99 and throughput of each scenario and batch size that every run has a row of, in
    the first candidate's order."""
    cand = [headline_figures(doc) for doc in candidates]
    base = [headline_figures(doc) for doc in baselines]
    everyone = [*cand, *base]
    return [
        PooledFigure(
            key[0],
            key[1],
            metric,
            tuple(mine[key][metric] for mine in cand),
            tuple(mine[key][metric] for mine in base),
        )
        for key, row in cand[0].items()
        if all(key in mine for mine in everyone)
        for metric in row
    ]


def method_text(candidates: int, baselines: int, checks: int) -> str:
    resampled = (
        "the candidate runs resampled against the one baseline run"
        if baselines == 1
        else "both groups resampled, independent"
    )
    return (
        f"{METHOD} ({candidates} candidate runs, {baselines} baseline runs): each run's "
        f"headline figure; percentile, {DEFAULT_RESAMPLES} resamples, seed {SEED}, {resampled}; "
        f"level 1 - {FAMILY_ALPHA:g} / {checks} checks (Bonferroni); a verdict when the "
        f"interval clears ±{DEFAULT_MIN_EFFECT:.0%}"
    )


def figure_verdict(label: str, figure: PooledFigure, checks: int, why: str | None) -> MetricVerdict:
    """``figure`` judged as one of ``checks`` figures (or not testable, ``why``)."""
    common = (label, figure.metric, figure.scenario, figure.batch_size)

    def median(values: tuple[float | None, ...]) -> float | None:
        known = [v for v in values if v is not None]
        return float(statistics.median(known)) if known else None

    base, cand = median(figure.baselines), median(figure.candidates)
    if why is not None:
        return MetricVerdict(*common, base, cand, Outcome.NOT_TESTABLE, "-", why=why)
    found = median_ratio(
        [float(v) for v in figure.baselines if v is not None],
        [float(v) for v in figure.candidates if v is not None],
        1 - FAMILY_ALPHA / checks,
    )
    return MetricVerdict(
        *common,
        base,
        cand,
        outcome(figure.metric, found),
        method_text(len(figure.candidates), len(figure.baselines), checks),
        ratio=found.ratio,
        low=found.low,
        high=found.high,
        level=found.level,
        baseline_runs=len(figure.baselines),
    )


def pooled_verdicts(
    label: str, candidates: Sequence[ResultDocument], baselines: Sequence[ResultDocument]
) -> list[MetricVerdict]:
    """Every metric of ``candidates`` (2 or more comparable runs, labelled ``label``) against
    ``baselines`` (1 or more): each :func:`pooled_figures` judged by :func:`median_ratio` at
    the Bonferroni level, then top-1 accuracy of the first candidate against the first
    baseline."""
    if len(candidates) < 2 or not baselines:
        raise ValueError(
            f"pooling needs 2 candidate runs and 1 baseline run; got {len(candidates)} and "
            f"{len(baselines)}"
        )
    found = pooled_figures(candidates, baselines)
    missing = NEEDS_SCIPY if scipy_missing() else None
    why_not = [missing or f.why_not for f in found]
    checks = sum(why is None for why in why_not)
    verdicts = [
        figure_verdict(label, figure, checks, why)
        for figure, why in zip(found, why_not, strict=True)
    ]
    accuracy = accuracy_verdict(label, baselines[0], candidates[0])
    if accuracy is not None:
        verdicts.append(accuracy)
    return verdicts
