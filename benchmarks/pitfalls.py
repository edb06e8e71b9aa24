"""Top-1 of the preprocessing pitfalls (examples/sweeps/digits-pitfalls.yaml) in each framework.

    .venv/bin/python benchmarks/pitfalls.py --out pitfalls.json --markdown pitfalls.md

The children come from the sweep's own expansion (:func:`mlmodelscope.spec.sweep.expand`):
its variants as written, its frameworks axis widened to ``--frameworks`` with the digits
CNN's other formats as exports beside the ONNX file in the same claim (as
examples/sweeps/digits-frameworks.yaml lists them). Each child runs through
:func:`mlmodelscope.agent.runner.evaluate`, the agent ``mlms run`` runs, on the example CNN
that ``ensure_digits_models`` builds, its folder mounted as the claim under a temporary
``$MLMS_PVC_ROOT``. The scenario is replaced by a minimal one: the accuracy pass scores every
sample of the split whatever the scenario, and accuracy is what this step reports.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from mlmodelscope.spec.sweep import SweepChild

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "examples" / "sweeps" / "digits-pitfalls.yaml"
FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
PACKAGES = {"onnxruntime": "onnxruntime", "pytorch": "torch", "tensorflow": "tensorflow"}
"""Framework -> its name in ``machine_info.versions()``."""
REFERENCE = "correct"
"""The variant preprocessed as the network was trained; the others are compared to it."""
SCENARIO = {"type": "Offline", "batchSizes": [32], "warmup": 1, "minQueryCount": 2,
            "minDuration": "10ms"}  # fmt: skip
"""The latency pass kept as short as the agent allows: it does not change the accuracy."""


@dataclass(frozen=True)
class Score:
    """One child's accuracy pass: a variant in a framework."""

    variant: str
    framework: str
    samples: int
    top1: float
    top5: float | None


def widened(sweep: dict[str, Any], frameworks: Sequence[str]) -> dict[str, Any]:
    """The sweep document with its frameworks axis set to ``frameworks``, and each inline
    model given the digits CNN's exports for them, in the claim and folder of its model.uri."""
    from mlmodelscope.agent.digits import FRAMEWORK_FORMATS, MODEL_FILES

    out = copy.deepcopy(sweep)
    matrix = out["spec"]["matrix"]
    matrix["frameworks"] = list(frameworks)
    for entry in matrix["models"]:
        model = entry["model"]
        folder = model["uri"].rsplit("/", 1)[0]
        entry["exports"] = [
            {"format": fmt, "uri": f"{folder}/{MODEL_FILES[fmt]}"}
            for fmt in (FRAMEWORK_FORMATS[f] for f in frameworks)
            if fmt != model["format"]
        ]
    return out


def children(
    sweep: dict[str, Any], frameworks: Sequence[str], variants: Sequence[str] = ()
) -> list[SweepChild]:
    """The sweep's children in matrix order, over ``frameworks``; only the
    ``variants`` named, when any are."""
    from mlmodelscope.spec.sweep import expand, parse_sweep

    expanded = expand(parse_sweep(widened(sweep, frameworks), str(SWEEP)))
    return [c for c in expanded if not variants or c.axes["model"] in variants]


@contextlib.contextmanager
def mounted(models: Path, claim: str) -> Iterator[Path]:
    """``models`` as the claim ``claim`` under a temporary ``$MLMS_PVC_ROOT``, as the operator
    mounts a claim into the Job; the variable is restored after."""
    before = os.environ.get("MLMS_PVC_ROOT")
    with tempfile.TemporaryDirectory(prefix="mlms-pitfalls-") as root:
        (Path(root) / claim).symlink_to(models, target_is_directory=True)
        os.environ["MLMS_PVC_ROOT"] = root
        try:
            yield Path(root)
        finally:
            if before is None:
                os.environ.pop("MLMS_PVC_ROOT", None)
            else:
                os.environ["MLMS_PVC_ROOT"] = before


def claim_of(sweep: dict[str, Any]) -> str:
    """The claim the sweep's models live in (one for all of them)."""
    from mlmodelscope.spec.uris import parse_pvc_uri

    claims = {parse_pvc_uri(e["model"]["uri"]).claim for e in sweep["spec"]["matrix"]["models"]}
    if len(claims) != 1:
        raise ValueError(f"the sweep's models are in {len(claims)} claims, not one")
    return claims.pop()


def score(child: SweepChild) -> Score:
    """Run one child's evaluation with :data:`SCENARIO` and read its accuracy section."""
    from mlmodelscope.agent.runner import evaluate
    from mlmodelscope.spec import LoadedEvaluation, parse_evaluation

    document = copy.deepcopy(child.document)
    document["spec"]["scenario"] = dict(SCENARIO)
    evaluation = parse_evaluation(document, child.name)
    outcome = evaluate(LoadedEvaluation(evaluation, child.name, None), include_raw=False)
    accuracy = outcome.document["accuracy"]
    return Score(
        child.axes["model"],
        child.axes["framework"],
        accuracy["samples"],
        accuracy["top1"],
        accuracy["top5"],
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _points(value: float | None, reference: float | None) -> str:
    if value is None or reference is None:
        return "-"
    return f"{(value - reference) * 100:+.1f}"


def markdown(scores: Sequence[Score], versions: dict[str, str] | None = None) -> str:
    """The table, one row per variant and framework, each against :data:`REFERENCE` in the
    same framework (in percentage points), and how far the frameworks agree per variant."""
    reference = {s.framework: s for s in scores if s.variant == REFERENCE}
    samples = sorted({s.samples for s in scores})
    stack = ", ".join(f"{k} {v}" for k, v in (versions or {}).items())
    lines = [
        f"Top-1 and top-5 of each variant of `examples/sweeps/digits-pitfalls.yaml` on the "
        f"digits test split ({', '.join(map(str, samples))} samples), every sample scored "
        f"once by the agent's accuracy pass; the difference is in percentage points against "
        f"`{REFERENCE}` in the same framework{f'; {stack}' if stack else ''}.",
        "",
        f"| variant | framework | top-1 | top-5 | top-1 vs {REFERENCE} | top-5 vs {REFERENCE} |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for s in scores:
        ref = reference.get(s.framework)
        top1 = _points(s.top1, None if ref is None else ref.top1)
        top5 = _points(s.top5, None if ref is None else ref.top5)
        lines.append(
            f"| {s.variant} | {s.framework} | {_pct(s.top1)} | {_pct(s.top5)} | {top1} | {top5} |"
        )
    spread = agreement(scores)
    if spread:
        worst = max(spread, key=lambda v: spread[v])
        frameworks = len({s.framework for s in scores})
        within = (
            "exactly"
            if spread[worst] == 0
            else f"within {spread[worst] * 100:.1f} points (widest: {worst})"
        )
        lines += ["", f"The {frameworks} frameworks agree on each variant's top-1 {within}."]
    return "\n".join(lines) + "\n"


def agreement(scores: Sequence[Score]) -> dict[str, float]:
    """Per variant run in more than one framework: its highest top-1 minus its lowest."""
    by_variant: dict[str, list[float]] = {}
    for s in scores:
        by_variant.setdefault(s.variant, []).append(s.top1)
    return {v: max(t) - min(t) for v, t in by_variant.items() if len(t) > 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    parser.add_argument("--variants", nargs="+", default=[], help="default: every variant")
    parser.add_argument("--out", type=Path, help="JSON: every score")
    parser.add_argument("--markdown", type=Path, help="the table")
    args = parser.parse_args(argv)
    if str(Path(__file__).parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent))
    from machine_info import versions

    from mlmodelscope.agent.digits import ensure_digits_models

    sweep = yaml.safe_load(SWEEP.read_text())
    picked = children(sweep, args.frameworks, args.variants)
    with mounted(ensure_digits_models(), claim_of(sweep)):
        scores = [score(c) for c in picked]
    found = versions()
    stack = {PACKAGES[f]: found[PACKAGES[f]] for f in args.frameworks if PACKAGES[f] in found}
    text = markdown(scores, stack)
    print(text)
    if args.out:
        report = {"versions": found, "scenario": SCENARIO, "scores": [asdict(s) for s in scores]}
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
