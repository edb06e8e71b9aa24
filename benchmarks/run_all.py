"""Every benchmark in one command, and the tables in the docs regenerated from that one run.

    .venv/bin/python benchmarks/run_all.py                 # all of them, ~13 min on 2 quiet cores
    .venv/bin/python benchmarks/run_all.py --only operator-load,startup
    .venv/bin/python benchmarks/run_all.py --full          # + 5,000 evaluations, 100,000 runs

Each step runs one script in its own process (its own frameworks and thread pools) with
``--out`` (its JSON, kept in ``--results``) and, where the script writes one, ``--markdown``;
for the older scripts that print their tables, the table lines of their output are taken. The
tables replace what stands between the step's markers in the docs::

    <!-- benchmarks/run_all.py: NAME -->
    ...
    <!-- end: NAME -->

with one line above them stating the machine, the date and how long that step took, so every
ratio in a table comes from one run on one machine. Steps run one after the other, never side
by side (they would measure each other). A step that fails keeps the old table, is reported,
and makes the command exit non-zero; the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
BENCHMARKS_DOC = REPO / "docs" / "benchmarks.md"
ANALYSIS_DOC = REPO / "docs" / "analysis.md"
PIPELINE_DOC = REPO / "docs" / "analysis-pipeline.md"


@dataclass(frozen=True)
class Step:
    """One benchmark run: ``script args``, and where its tables go."""

    name: str
    script: str
    args: tuple[str, ...]
    doc: Path = BENCHMARKS_DOC
    markdown_flag: bool = True
    """The script takes ``--markdown FILE``; otherwise its output's table lines are used."""
    full_only: bool = False
    quick_only: bool = False
    extra_outputs: tuple[str, ...] = field(default=())


STEPS: tuple[Step, ...] = (
    Step("harness-overhead", "harness_overhead.py", (), markdown_flag=False),
    Step(
        "harness-postprocess",
        "harness_overhead.py",
        ("--models", "digits", "--postprocess"),
        markdown_flag=False,
    ),
    Step(
        "tracing-overhead",
        "tracing_overhead.py",
        ("--rounds", "3", "--markdown"),
        markdown_flag=False,
    ),
    Step("loadgen-crosscheck", "loadgen_crosscheck.py", ()),
    Step("startup", "startup.py", ()),
    Step("operator-load", "operator_load.py", ("--evaluations", "100,1000"), quick_only=True),
    Step("operator-load", "operator_load.py", ("--evaluations", "100,1000,5000"), full_only=True),
    Step(
        "store-listing",
        "store_listing.py",
        ("--runs", "20000", "--repeat", "100"),
        markdown_flag=False,
        quick_only=True,
    ),
    Step("store-listing", "store_listing.py", (), markdown_flag=False, full_only=True),
    Step("gate-rates", "gate_rates.py", ("--quick",), quick_only=True),
    Step("gate-rates", "gate_rates.py", ("--same", "104", "--repeats", "5"), full_only=True),
    Step("analysis-zoo", "analysis_zoo.py", ("--quick",), doc=ANALYSIS_DOC),
    Step("benanza-measured", "benanza_measured.py", ("--quick",), doc=ANALYSIS_DOC),
    Step("xsp-residual", "xsp_residual.py", ("--quick",), doc=PIPELINE_DOC),
    Step("xsp-layers", "xsp_layers.py", ("--quick",), doc=ANALYSIS_DOC),
    Step("pitfalls", "pitfalls.py", (), doc=ANALYSIS_DOC),
)


def machine() -> str:
    """One line: what ran it (the tables are only comparable on the same kind of machine)."""
    if str(BENCHMARKS) not in sys.path:  # loaded by path (tests): its folder for machine_info
        sys.path.insert(0, str(BENCHMARKS))
    from machine_info import cpu_model

    model = cpu_model()
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{os.cpu_count()} vCPUs ({model}){memory}, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def table_lines(text: str) -> str:
    """The Markdown tables of a script's output: runs of lines starting with '|'."""
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line.rstrip())
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return "\n\n".join("\n".join(b) for b in blocks)


def marker(name: str) -> tuple[str, str]:
    return f"<!-- benchmarks/run_all.py: {name} -->", f"<!-- end: {name} -->"


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with the step's block replaced; a missing block is an error (the docs name
    where each table goes, the runner does not guess)."""
    begin, end = marker(name)
    pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise KeyError(f"no block {begin} ... {end}")
    return pattern.sub(lambda _: f"{begin}\n{body.strip()}\n{end}", text, count=1)


@dataclass
class Outcome:
    step: str
    seconds: float
    returncode: int
    load_before: str
    load_after: str
    markdown: str


def run_step(step: Step, results: Path, python: str) -> Outcome:
    out = results / f"{step.name}.json"
    md = results / f"{step.name}.md"
    command = [python, str(BENCHMARKS / step.script), *step.args, "--out", str(out)]
    if step.markdown_flag:
        command += ["--markdown", str(md)]
    print(f"\n=== {step.name}: {' '.join(command[1:])}", flush=True)
    load_before = load_average()
    started = time.monotonic()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.monotonic() - started
    (results / f"{step.name}.log").write_text(proc.stdout + proc.stderr)
    print(proc.stdout[-3000:], end="")
    if proc.returncode:
        print(proc.stderr[-3000:], file=sys.stderr)
    tables = md.read_text() if step.markdown_flag and md.is_file() else table_lines(proc.stdout)
    return Outcome(step.name, seconds, proc.returncode, load_before, load_average(), tables)


def header(outcome: Outcome, host: str) -> str:
    day = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"*Regenerated by `benchmarks/run_all.py` on {day}: {host}; this step took "
        f"{outcome.seconds:.0f} s, load average {outcome.load_before} before, "
        f"{outcome.load_after} after.*"
    )


def selected(only: Sequence[str], full: bool) -> list[Step]:
    steps = [s for s in STEPS if s.full_only == full or not (s.full_only or s.quick_only)]
    if only:
        unknown = set(only) - {s.name for s in STEPS}
        if unknown:
            raise SystemExit(f"--only: no step {', '.join(sorted(unknown))}")
        steps = [s for s in steps if s.name in only]
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated step names")
    parser.add_argument("--full", action="store_true", help="the long variants too")
    parser.add_argument("--results", type=Path, help="keep each step's JSON and log here")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite the docs' tables")
    parser.add_argument("--list", action="store_true", help="print the steps and exit")
    args = parser.parse_args(argv)
    steps = selected([s for s in args.only.split(",") if s], args.full)
    if args.list:
        for s in steps:
            print(f"{s.name:22} {s.script} {' '.join(s.args)}")
        return 0
    results = args.results or Path(tempfile.mkdtemp(prefix="mlms-benchmarks-"))
    results.mkdir(parents=True, exist_ok=True)
    host = machine()
    started = time.monotonic()
    outcomes: list[Outcome] = []
    for step in steps:
        outcome = run_step(step, results, sys.executable)
        outcomes.append(outcome)
        if outcome.returncode == 0 and not args.no_docs:
            doc = step.doc
            text = doc.read_text()
            body = header(outcome, host) + "\n\n" + outcome.markdown
            doc.write_text(replace_block(text, step.name, body))
    total = time.monotonic() - started
    summary = {
        "machine": host,
        "total_s": total,
        "steps": [o.__dict__ | {"markdown": None} for o in outcomes],
    }
    (results / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\n=== {len(outcomes)} steps in {total:.0f} s (results in {results})")
    for o in outcomes:
        verdict = "ok" if o.returncode == 0 else f"FAILED (exit {o.returncode})"
        print(f"  {o.step:22} {o.seconds:7.0f} s  {verdict}")
    return 0 if all(o.returncode == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
