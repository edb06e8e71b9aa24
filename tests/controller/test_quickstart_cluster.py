"""The exec-node quick start of docs/operator.md, run as written.

The commands are read from the doc's console block (the `$ ` lines) and run in one bash
script with `set -e`, from the repository root, so the doc cannot drift from what works. The
only change to the environment is the run dir (MLMS_DEV_CLUSTER_DIR, so this cluster is the
test's own) and this venv first on PATH (the doc's "venv active"). The output the block shows
must be printed, where it does not vary (no timings, no `kubectl get` table), with the run dir
for the doc's; kubectl's "created" and "condition met" lines must be exactly those shown. The
numbers are read back from the doc's own `kubectl get meval`; afterwards nothing of the run may
be left alive.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operator.md"
HEADING = "## Quick start without containerd: the exec node"
EVALUATIONS = {"digits-onnxruntime", "digits-pytorch", "digits-tensorflow"}
SCRIPT_TIMEOUT_S = 1000
DOC_RUN_DIR = "~/.cache/mlmodelscope/dev-cluster"
"""The run dir as the doc shows it; the test's own replaces it in the output it expects."""
CRD_GROUP = "customresourcedefinition.apiextensions.k8s.io"
KUBECTL_RESULT = re.compile(r"^[a-z0-9.-]+/[a-z0-9.-]+ (?:created|condition met)$")
"""What `kubectl apply` and `kubectl wait` print per object."""
TIMING = re.compile(r"\b\d+(?:\.\d+)?s\b")


def quickstart_block(markdown: str) -> str:
    """The first console block under the quick-start heading."""
    section = markdown.split(HEADING, 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```console\n(.*?)^```", section, flags=re.S | re.M)
    assert block, f"no console block under {HEADING!r} in {DOC}"
    return block[1]


def quickstart_commands(markdown: str) -> list[str]:
    """The `$ ` lines of the quick-start block, unprompted."""
    return [line[2:] for line in quickstart_block(markdown).splitlines() if line.startswith("$ ")]


def steady_output(markdown: str) -> list[str]:
    """The output lines the quick-start block shows that every run prints alike: not the
    `kubectl get` table (its numbers and column widths vary), no line with a timing."""
    steady = []
    command = ""
    for line in quickstart_block(markdown).splitlines():
        if line.startswith("$ "):
            command = line[2:]
        elif not command.startswith("kubectl get") and not TIMING.search(line):
            steady.append(line)
    return steady


def kubectl_results(lines: list[str]) -> Counter[str]:
    """kubectl's "<kind>/<name> created" and "... condition met" lines, counted."""
    return Counter(line for line in lines if KUBECTL_RESULT.match(line))


def crd_names() -> list[str]:
    """metadata.name of every CRD in crds/."""
    return sorted(
        yaml.safe_load(path.read_text())["metadata"]["name"]
        for path in (REPO / "crds").glob("*.yaml")
    )


def table(output: str, header_start: str = "NAME ") -> list[dict[str, str]]:
    """The lines after the last kubectl table header in ``output``, cut at the header's column
    starts (an empty cell stays empty), up to a blank line; later output may follow."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header_start)]
    assert starts, f"no kubectl table in the output:\n{output[-3000:]}"
    header = lines[starts[-1]]
    columns = [(m.start(), m.group()) for m in re.finditer(r"\S+", header)]
    rows = []
    for line in lines[starts[-1] + 1 :]:
        if not line.strip():
            break
        cells = {}
        for index, (start, name) in enumerate(columns):
            end = columns[index + 1][0] if index + 1 < len(columns) else None
            cells[name] = line[start:end].strip()
        rows.append(cells)
    return rows


def leftovers(run_dir: Path) -> list[str]:
    """Live processes of this run: started with the run dir in their environment (cluster,
    operator) or working under it (exec pods)."""
    needle = f"MLMS_DEV_CLUSTER_DIR={run_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cwd = str((entry / "cwd").readlink())
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue
        if needle in environ or cwd == str(run_dir) or cwd.startswith(f"{run_dir}/"):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def test_the_quick_start_has_the_commands_a_newcomer_needs() -> None:
    commands = quickstart_commands(DOC.read_text())
    assert commands[0] == 'eval "$(mlms dev-cluster up)"'
    assert commands[-1] == "mlms dev-cluster down"
    joined = "\n".join(commands)
    for needed in ("kubectl apply -f crds/", "mlms operator", "examples/cluster/digits-compare",
                   "kubectl wait --for=condition=Succeeded", "kubectl get meval"):  # fmt: skip
        assert needed in joined, needed


def test_the_quick_start_creates_and_waits_for_every_crd_in_crds() -> None:
    """Every CRD of crds/ is shown created once and met by each `kubectl wait ... -f crds/`,
    and no other CRD is shown."""
    markdown = DOC.read_text()
    waits = [c for c in quickstart_commands(markdown) if re.match(r"kubectl wait .*-f crds/", c)]
    assert len(waits) == 2, waits
    shown = {
        line: count
        for line, count in kubectl_results(steady_output(markdown)).items()
        if line.startswith(f"{CRD_GROUP}/")
    }
    expected = {}
    for name in crd_names():
        expected[f"{CRD_GROUP}/{name} created"] = 1
        expected[f"{CRD_GROUP}/{name} condition met"] = len(waits)
    assert shown == expected


def test_the_steady_output_holds_what_the_cluster_test_compares() -> None:
    """Guards the filter: the lines compared after a real run include kubectl's results for
    the CRDs and the evaluations, and `up`'s and `down`'s lines without timings."""
    steady = steady_output(DOC.read_text())
    results = kubectl_results(steady)
    assert sum(results.values()) == 3 * len(crd_names()) + 2 * len(EVALUATIONS)
    assert f"stopped; logs kept in {DOC_RUN_DIR}/logs" in steady
    assert not any(line.startswith("NAME ") or TIMING.search(line) for line in steady)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(SCRIPT_TIMEOUT_S + 120)
def test_quick_start_runs_as_written_and_all_three_frameworks_succeed(tmp_path: Path) -> None:
    from mlmodelscope.devcluster import build, versions

    if shutil.which("go") is None and not all(build.is_built(c) for c in versions.ALL_COMPONENTS):
        pytest.skip("the dev cluster needs Go >= 1.26 to build (or a prebuilt cache)")
    run_dir = tmp_path / "dev-cluster"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLMS_OPERATOR_", "KUBECONFIG", "MLMS_DEV_CLUSTER"))
    }
    env["MLMS_DEV_CLUSTER_DIR"] = str(run_dir)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    script = "set -e\n" + "\n".join(quickstart_commands(DOC.read_text())) + "\n"
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if (run_dir / "state.json").exists():  # the script stopped before its `down`
            subprocess.run(
                [sys.executable, "-m", "mlmodelscope.devcluster", "down"],
                env=env,
                capture_output=True,
                timeout=120,
            )
    seconds = time.monotonic() - started
    operator_log = run_dir / "logs" / "operator.log"
    log_tail = operator_log.read_text()[-4000:] if operator_log.exists() else "(no operator log)"
    assert proc.returncode == 0, (
        f"the quick start failed (rc {proc.returncode}) after {seconds:.0f}s:\n"
        f"{output[-6000:]}\n--- operator log\n{log_tail}"
    )
    sys.stderr.write(f"quick start: {seconds:.0f}s\n{output}\n")
    printed = output.splitlines()
    ours = str(run_dir.resolve())
    shown = [line.replace(DOC_RUN_DIR, ours) for line in steady_output(DOC.read_text())]
    missing = [line for line in shown if line not in printed]
    assert not missing, f"the doc shows output the commands did not print: {missing}\n{output}"
    assert kubectl_results(printed) == kubectl_results(shown), output
    rows = {row["NAME"]: row for row in table(output) if row["NAME"] in EVALUATIONS}
    assert set(rows) == EVALUATIONS, output
    for name, row in rows.items():
        assert row["PHASE"] == "Succeeded", row
        assert float(row["P50(MS)"]) > 0, (name, row)
        assert float(row["THROUGHPUT"]) > 0, (name, row)
        assert row["METRIC"] == "top1" and float(row["VALUE"]) > 0.9, (name, row)
    deadline = time.monotonic() + 30  # the operator may still be finishing its SIGTERM
    while (alive := leftovers(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive, f"processes left after `mlms dev-cluster down`: {alive}"
