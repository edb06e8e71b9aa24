"""Does the operator keep up with many evaluations at once? N ModelEvaluations applied at once
plus churn, on the dev cluster's simulated (kwok) CPU node; with ``--limit-per-namespace`` the
operator's per-namespace concurrency limit is on, so every admission goes through the queue.

1. ``--evaluations`` evaluations are created in one namespace (8 client threads), all at once.
2. Churn while they drain: every 10th is deleted, every 10th (another one) has its spec edited
   (a new generation, so a second run).
3. Ingestion: the time until every evaluation has a status for its current generation (Queued,
   or Pending with its Job). The operator handles a burst of creates in arrival order, so this
   is its create throughput, reported as measured.
4. Probes: from then until the backlog has drained, every few seconds an evaluation is created
   in a second namespace (its own slots) and the time from its create to its Job existing is
   measured: how responsive the operator stays while it works through the backlog (target:
   under 5 s).
5. The run ends when every remaining evaluation has ended its current generation. kwok runs no
   container: a Job "completes" and the operator ends the run Failed/SimulatedNode, so the
   whole lifecycle (admission, Job, pod, completion, status, freed slot) is exercised without
   running a model.

Reported: time until every Job existed (after the last create; from the Jobs'
creationTimestamp, so to the second), create-to-Job latency p50/p99 per evaluation (the two
creationTimestamps: whole seconds), drain time, probe latencies, the operator's resident memory
(sampled every 0.5 s from /proc), the API server's requests during the run per evaluation by
resource (its ``apiserver_request_total``: every client's, this script's own LISTs subtracted;
the other controllers also write Jobs, pods and Events), its LIST requests for Jobs and
ModelEvaluations, and Jobs per run generation (must be exactly one). With the admission ledger,
LISTs come from the resync (two per tick and namespace), not from each decision, so they do
not grow with N. The operator's own requests, by verb and resource, come from its client's
counter (``mlmodelscope_operator_api_requests_total``), per run (evaluations + edits - deletes).

6. Two floors, on the same API server after the load, each by a bare client with 8 threads in
   a namespace nobody watches, with the bodies the operator's own builders make:
   - **the whole apply**: per evaluation, the client creates the ModelEvaluation and then what
     the operator creates for it (spec and results ConfigMaps, ServiceAccount, Role,
     RoleBinding and Job, owned by the evaluation), the Job not suspended, so its pod follows
     as in the load. The time from its first create until its last Job existed is what the
     operator's "every Job created, after the first create" is set against: the same apply,
     the same objects, the same pods, without the operator's reads, status and Events.
   - **the objects only**: the operator's six objects alone, the Jobs suspended (no pod
     follows): the API server's cost of the creates, set against the operator's "every Job
     created, after the last create".

    .venv/bin/python benchmarks/operator_load.py --evaluations 1000 --out operator-load.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlmodelscope.contract.kube import (
    Kube,
    KubeError,
    configmap_path,
    evaluation_path,
    job_path,
)
from mlmodelscope.controller import names
from mlmodelscope.devcluster import nodes

REPO = Path(__file__).resolve().parents[1]
PROBE_TARGET_S = 5.0
KWOK_PODS = 110
"""Pods the kwok node holds at once in the benchmark (``--node-pods``)."""
KWOK_CPU = {nodes.SIMULATION_LABEL: "kwok", nodes.POOL_LABEL: "cpu"}
LISTED = ("jobs", "modelevaluations")
COUNTED = (
    "modelevaluations", "jobs", "pods", "configmaps", "events", "serviceaccounts", "roles",
    "rolebindings",
)  # fmt: skip
"""Resources whose request counts are reported per evaluation."""


MEMORY_PROFILED = """
import os, signal, sys, tracemalloc, runpy
tracemalloc.start(8)
dumps = [0]
def dump(*_):
    dumps[0] += 1
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    with open(f"{os.environ['MLMS_MEMORY_PROFILE']}.{dumps[0]}", "w") as out:
        current, peak = tracemalloc.get_traced_memory()
        out.write(f"traced now {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB\\n")
        for kind in ("filename", "lineno", "traceback"):
            out.write(f"\\n== by {kind}\\n")
            for stat in snap.statistics(kind)[:40]:
                out.write(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d} ")
                out.write("\\n    ".join(stat.traceback.format()) + "\\n")
        out.write("\\n== live Kubernetes objects (dicts with metadata.uid), by who holds them\\n")
        import gc, collections, types
        gc.collect()
        live = [o for o in gc.get_objects() if type(o) is dict and isinstance(
            o.get("metadata"), dict) and "uid" in o["metadata"]]
        out.write(f"{len(live)} bodies\\n")
        exclude = {id(live)}
        def holders_of(o):
            refs = gc.get_referrers(o)
            exclude.add(id(refs))
            return [r for r in refs if id(r) not in exclude and not isinstance(r, types.FrameType)]
        def name(o):
            if type(o) is dict:
                return "dict(" + ",".join(sorted(map(str, o))[:5]) + ")"
            if type(o) in (list, tuple):
                return f"{type(o).__name__}[{len(o)}]"
            return type(o).__module__ + "." + type(o).__qualname__
        chains = collections.Counter()
        for body in live[:: max(1, len(live) // 100)]:
            chain, obj = [], body
            for _ in range(6):
                refs = holders_of(obj)
                if not refs:
                    break
                obj = refs[0]
                chain.append(name(obj))
            chains[" <- ".join(chain)] += 1
        for chain, n in chains.most_common(20):
            out.write(f"{n:5d}  {chain}\\n")
signal.signal(signal.SIGUSR2, dump)
sys.argv = ["mlmodelscope", *sys.argv[1:]]
runpy.run_module("mlmodelscope", run_name="__main__", alter_sys=True)
"""
"""With ``--memory-profile``: the operator under tracemalloc; SIGUSR2 writes the largest
allocation sites (diagnosis only: tracemalloc slows the operator down)."""


def _signal_every(process: Any, seconds: float) -> None:
    while process.poll() is None:
        time.sleep(seconds)
        process.send_signal(signal.SIGUSR2)


def manifest(name: str) -> dict[str, Any]:
    """A small evaluation for the kwok CPU node: its pod 'succeeds' without running."""
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": name},
        "spec": {
            "model": {
                "name": "digits",
                "uri": "file:///models/digits.onnx",
                "format": "onnx",
                "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
                "outputs": [{"name": "logits", "shape": [-1, 10]}],
            },
            "framework": {"name": "onnxruntime"},
            "dataset": {"type": "digits"},
            "scenario": {"batchSizes": [1]},
            "hardware": {
                "nodeSelector": KWOK_CPU,
                "tolerations": [nodes.SIMULATED_TOLERATION],
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"memory": "64Mi"},
                },
            },
            "timeout": "10m",
        },
    }


@dataclass
class LoadReport:
    evaluations: int
    deleted: int
    edited: int
    limit_per_namespace: int
    create_s: float
    """Creating all evaluations (client side)."""
    ingest_s: float
    """From the first create until every evaluation had a status for its current generation."""
    drain_s: float
    """From the first create until every remaining evaluation ended its current generation."""
    probe_job_s: list[float]
    """Per probe: its create to its Job existing."""
    rss_mib_start: float
    rss_mib_peak: float
    lists: dict[str, float]
    """API server LIST requests per resource during the run, this script's own subtracted."""
    requests_per_evaluation: dict[str, float]
    """API server requests during the run (all verbs and clients) per created evaluation."""
    requests_by_verb: dict[str, dict[str, float]]
    """The same for ModelEvaluations and Jobs, by verb (and subresource, e.g. PATCH status)."""
    all_jobs_s: float
    """From the last create until the last Job of a first generation was created (1 s)."""
    job_latency_p50_s: float
    job_latency_p99_s: float
    """Evaluation creationTimestamp to its first Job's (whole seconds)."""
    own_lists: int
    phases: dict[str, int]
    reasons: dict[str, int]
    duplicate_jobs: list[str] = field(default_factory=list)
    """Run generations with more than one Job (must be empty)."""
    first_to_all_jobs_s: float = math.nan
    """From the first create until the last Job of a first generation was created (1 s)."""
    operator_requests_per_run: dict[str, float] = field(default_factory=dict)
    """The operator's own requests per run, by "verb resource" (its client's counter)."""
    floor_s: float = math.nan
    """The objects-only floor: a bare client creating the operator's objects, Jobs suspended
    (step 6)."""
    apply_floor_s: float = math.nan
    """The whole-apply floor: a bare client creating each evaluation and its objects, pods
    following; first create to last Job, as ``first_to_all_jobs_s`` (step 6)."""
    ingest_cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds each process used from the first create until every evaluation had a
    status (:func:`cpu_by_process`): where the machine's time went while Jobs were made."""
    floor_cpu_s: dict[str, float] = field(default_factory=dict)
    """The same while the objects-only floor ran."""
    apply_floor_cpu_s: dict[str, float] = field(default_factory=dict)
    """The same while the whole-apply floor ran."""

    def table(self) -> str:
        rows = self.rows()
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def rows(self) -> list[tuple[str, str]]:
        probes = sorted(self.probe_job_s)
        runs = self.evaluations + self.edited - self.deleted
        p50_max = f"{statistics.median(probes):.2f} / {probes[-1]:.2f}" if probes else "-"
        return [
            (
                "evaluations (deleted, edited)",
                f"{self.evaluations} ({self.deleted}, {self.edited})",
            ),
            ("limit per namespace", str(self.limit_per_namespace)),
            ("create all (s)", f"{self.create_s:.1f}"),
            ("every evaluation has a status (s)", f"{self.ingest_s:.1f}"),
            ("every Job created, after the last create (s)", f"{self.all_jobs_s:.0f}"),
            (
                "create to Job p50 / p99 (s, whole seconds)",
                f"{self.job_latency_p50_s:.0f} / {self.job_latency_p99_s:.0f}",
            ),
            ("every Job created, after the first create (s)", f"{self.first_to_all_jobs_s:.0f}"),
            (
                "floor, the whole apply: a bare client creates each evaluation and its objects,"
                " pods following; first create to last Job (s)",
                f"{self.apply_floor_s:.0f}",
            ),
            (
                "operator after the first create / whole-apply floor",
                f"{self.first_to_all_jobs_s / self.apply_floor_s:.1f}×",
            ),
            (
                "floor, the objects only: a bare client creates the operator's objects,"
                " Jobs suspended (s)",
                f"{self.floor_s:.1f}",
            ),
            (
                "operator after the last create / objects-only floor",
                f"{self.all_jobs_s / self.floor_s:.1f}×",
            ),
            (
                "operator after the first create / objects-only floor",
                f"{self.first_to_all_jobs_s / self.floor_s:.1f}×",
            ),
            ("CPU s until every status (by process)", cpu_text(self.ingest_cpu_s)),
            ("CPU s of the whole-apply floor (by process)", cpu_text(self.apply_floor_cpu_s)),
            ("CPU s of the objects-only floor (by process)", cpu_text(self.floor_cpu_s)),
            ("drain (s)", f"{self.drain_s:.1f}"),
            ("runs per second", f"{runs / self.drain_s:.2f}"),
            ("probes", str(len(probes))),
            ("probe: create to Job, p50 / max (s)", p50_max),
            (
                "operator RSS start / peak (MiB)",
                f"{self.rss_mib_start:.0f} / {self.rss_mib_peak:.0f}",
            ),
            *((f"LIST {r} during the run", f"{n:.0f}") for r, n in self.lists.items()),
            (
                "API requests per evaluation",
                ", ".join(f"{r} {n:.1f}" for r, n in self.requests_per_evaluation.items()),
            ),
            *(
                (
                    f"{resource} requests per evaluation, by verb",
                    ", ".join(f"{verb} {n:.1f}" for verb, n in verbs.items()),
                )
                for resource, verbs in self.requests_by_verb.items()
            ),
            (
                "operator's own requests per run",
                f"{sum(self.operator_requests_per_run.values()):.1f}: "
                + ", ".join(f"{k} {n:.2f}" for k, n in self.operator_requests_per_run.items()),
            ),
            ("final phases", ", ".join(f"{k} {v}" for k, v in sorted(self.phases.items()))),
            ("generations with >1 Job", str(len(self.duplicate_jobs))),
        ]


def cpu_text(times: dict[str, float]) -> str:
    if not times:
        return "-"
    shown = ", ".join(f"{k} {v:.1f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]))
    return f"{sum(times.values()):.1f}: {shown}"


def markdown(reports: list[LoadReport]) -> str:
    """One Markdown table, a column per run (rows as in :meth:`LoadReport.rows`)."""
    columns = [dict(r.rows()) for r in reports]
    head = "| | " + " | ".join(f"{r.evaluations:,} evaluations" for r in reports) + " |"
    lines = [head, "|---" * (len(reports) + 1) + "|"]
    for label, _ in reports[0].rows():
        lines.append(f"| {label} | " + " | ".join(c.get(label, "-") for c in columns) + " |")
    return "\n".join(lines) + "\n"


def request_counts(metrics_text: str, subresources: bool = False) -> Counter[tuple[str, str]]:
    """Requests so far by (resource, verb), from the API server's ``apiserver_request_total``;
    with ``subresources`` the verb reads e.g. ``PATCH status``."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        value = int(float(line.rsplit(" ", 1)[1]))
        verb = labels.get("verb", "")
        if subresources and labels.get("subresource"):
            verb = f"{verb} {labels['subresource']}"
        counts[(labels.get("resource", ""), verb)] += value
    return counts


def operator_requests(metrics_text: str) -> Counter[str]:
    """The operator's own requests so far by "verb resource", from its client's counter."""
    counts: Counter[str] = Counter()
    for line in metrics_text.splitlines():
        if not line.startswith("mlmodelscope_operator_api_requests_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        counts[f"{labels['verb']} {labels['resource']}"] += float(line.rsplit(" ", 1)[1])
    return counts


def operator_objects(
    evaluation_body: dict[str, Any], suspended: bool
) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, body) of what the operator creates for an evaluation, built by its own
    builders; ``suspended``: the Job suspended and nothing owned (step 6 of the module)."""
    from mlmodelscope.controller import agent_access, builders
    from mlmodelscope.controller.settings import OperatorSettings
    from mlmodelscope.spec import parse_evaluation

    evaluation = parse_evaluation(evaluation_body)
    namespace = str(evaluation_body["metadata"]["namespace"])
    bodies = [
        (configmap_path(namespace), builders.build_spec_configmap(evaluation)),
        (configmap_path(namespace), builders.build_results_configmap(evaluation)),
        *(
            (
                agent_access.api_path(namespace, access.plural, access.group),
                access.build(evaluation),
            )
            for access in agent_access.OBJECTS
        ),
        (job_path(namespace), builders.build_job(evaluation, OperatorSettings())),
    ]
    if suspended:
        bodies[-1][1]["spec"]["suspend"] = True
        for _, body in bodies:
            body["metadata"].pop("ownerReferences", None)
    return bodies


def floor(
    kube: Kube, namespace: str, evaluations: int, cpu: Callable[[], dict[str, float]]
) -> tuple[float, dict[str, float]]:
    """The objects-only floor (step 6 of the module): seconds a bare client with 8 threads
    takes to create the operator's objects for ``evaluations`` evaluations, Jobs suspended, and
    the CPU seconds each process used meanwhile (``cpu``: :func:`cpu_by_process`; the bodies are
    built before either starts)."""
    prepared = []
    for i in range(evaluations):
        document = manifest(f"floor-{i:05d}")
        document["metadata"].update(namespace=namespace, uid=f"floor-{i:05d}", generation=1)
        prepared.append(operator_objects(document, suspended=True))

    def create_all(objects: list[tuple[str, dict[str, Any]]]) -> None:
        for path, body in objects:
            kube.create(path, body)

    before = cpu()
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create_all, prepared))
    return time.monotonic() - started, cpu_delta(before, cpu())


def apply_floor(
    kube: Kube, namespace: str, evaluations: int, cpu: Callable[[], dict[str, float]]
) -> tuple[float, dict[str, float]]:
    """The whole-apply floor (step 6 of the module): a bare client with 8 threads creates each
    evaluation and then the operator's objects for it, owned by it, the Job not suspended.
    Returns the seconds from the first create until the last Job's creationTimestamp (whole
    seconds, measured as the operator's are), and the CPU seconds each process used."""

    def apply(name: str) -> None:
        created = kube.create(evaluation_path(namespace), manifest(name))
        for path, body in operator_objects(created, suspended=False):
            kube.create(path, body)

    before = cpu()
    first_create = time.time()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(apply, [f"apply-{i:05d}" for i in range(evaluations)]))
    used = cpu_delta(before, cpu())
    jobs, _ = paged_list(kube, job_path(namespace))
    last = max(seconds(j["metadata"]["creationTimestamp"]) for j in jobs)
    return last - math.floor(first_create), used


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0.05}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def paged_list(
    kube: Kube, path: str, label_selector: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The items of a LIST and how many requests it took: the API server counts every page
    (500 items) as a LIST, and the script's own are subtracted from the operator's."""
    items: list[dict[str, Any]] = []
    pages = 0
    for page in kube.pages(path, label_selector):
        items.extend(page)
        pages += 1
    return items, pages


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of the full list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else math.nan


def seconds(timestamp: str) -> float:
    return datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (the operator runs as one process)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


CPU_PROCESSES = ("kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok")
"""The control plane's processes whose CPU time is reported (by ``comm``, which the kernel
cuts to 15 characters), beside the operator's and this script's."""


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_process(operator_pid: int, marker: str = "") -> dict[str, float]:
    """CPU seconds so far of the operator, this script and the control plane (the processes
    whose command line holds ``marker``: the cluster's run folder), by name."""
    times = {"operator": cpu_seconds(operator_pid), "benchmark client": cpu_seconds(os.getpid())}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            ours = marker.encode() in (proc / "cmdline").read_bytes()
            if comm.startswith(CPU_PROCESSES) and ours:
                times[comm] = times.get(comm, 0.0) + cpu_seconds(int(proc.name))
        except OSError:
            continue
    return times


@contextmanager
def sampled_rss(pid: int, every_s: float = 0.5) -> Iterator[list[float]]:
    samples: list[float] = [rss_mib(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            try:
                samples.append(rss_mib(pid))
            except OSError:
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


def observed(item: dict[str, Any]) -> bool:
    """The operator has written a status for the evaluation's current generation."""
    generation = int(item["metadata"].get("generation") or 1)
    return (item.get("status") or {}).get("observedGeneration") == generation


def ended(item: dict[str, Any]) -> bool:
    st = item.get("status") or {}
    generation = int(item["metadata"].get("generation") or 1)
    return st.get("observedGeneration") == generation and st.get("phase") in ("Succeeded", "Failed")


def wait_job(kube: Kube, namespace: str, name: str, timeout: float) -> tuple[float, int]:
    """Create ``name`` in ``namespace``; the seconds until its first Job exists, and the GETs
    spent polling for it."""
    started = time.monotonic()
    kube.create(evaluation_path(namespace), {**manifest(name)})
    job = job_path(namespace, names.job_name(name, 1))
    gets = 1
    while kube.get_or_none(job) is None:
        if time.monotonic() - started > timeout:
            return math.inf, gets
        time.sleep(0.05)
        gets += 1
    return time.monotonic() - started, gets


def run_load(
    kube: Kube,
    metrics: Callable[[], str],
    operator_metrics: Callable[[], str],
    operator_pid: int,
    load_namespace: str,
    probe_namespace: str,
    evaluations: int,
    limit_per_namespace: int,
    probe_every_s: float = 3.0,
    timeout_s: float = 1200.0,
    marker: str = "",
) -> LoadReport:
    """Apply the load (see the module) against an operator already watching both namespaces
    with ``MLMS_OPERATOR_MAX_RUNNING_PER_NAMESPACE=limit_per_namespace``."""
    evaluations_path = evaluation_path(load_namespace)
    own_lists = 0
    before_text = metrics()
    before_all = request_counts(before_text)
    before_verbs = request_counts(before_text, subresources=True)
    before = {r: float(before_all[(r, "LIST")]) for r in LISTED}
    operator_before = operator_requests(operator_metrics())
    cpu_before = cpu_by_process(operator_pid, marker)
    with sampled_rss(operator_pid) as rss:
        first_create = time.time()
        started = time.monotonic()
        todo = [f"load-{i:05d}" for i in range(evaluations)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: kube.create(evaluations_path, manifest(n)), todo))
        create_s = time.monotonic() - started
        creates_done = time.time()
        deleted = todo[5::10]
        edited = todo[7::10]
        for name in deleted:
            kube.delete(evaluation_path(load_namespace, name))
        for name in edited:
            patch = {"spec": {"scenario": {"batchSizes": [2]}}}
            kube.merge_patch(evaluation_path(load_namespace, name), patch)
        while True:
            items, pages = paged_list(kube, evaluations_path)
            own_lists += pages
            if all(observed(i) for i in items if not i["metadata"].get("deletionTimestamp")):
                break
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{sum(not observed(i) for i in items)} evaluations unseen")
            time.sleep(0.5)
        ingest_s = time.monotonic() - started
        cpu_ingest = cpu_by_process(operator_pid, marker)
        probes: list[float] = []
        probe_gets = 0
        next_probe = time.monotonic()
        while True:
            if time.monotonic() >= next_probe:
                name = f"probe-{len(probes):03d}"
                latency, gets = wait_job(kube, probe_namespace, name, PROBE_TARGET_S * 4)
                probes.append(latency)
                probe_gets += gets
                next_probe = time.monotonic() + probe_every_s
            items, pages = paged_list(kube, evaluations_path)
            own_lists += pages
            if all(ended(i) for i in items if not i["metadata"].get("deletionTimestamp")):
                break
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{sum(not ended(i) for i in items)} evaluations never ended")
            time.sleep(1.0)
        drain_s = time.monotonic() - started
    after_text = metrics()
    operator_after = operator_requests(operator_metrics())
    after_all = request_counts(after_text)
    after_verbs = request_counts(after_text, subresources=True)
    after = {r: float(after_all[(r, "LIST")]) for r in LISTED}
    jobs, own_lists_jobs = paged_list(kube, job_path(load_namespace), names.MANAGED_SELECTOR)
    labels = [j["metadata"].get("labels") or {} for j in jobs]
    per_generation = Counter(
        (label.get(names.LABEL_EVALUATION), label.get(names.LABEL_GENERATION)) for label in labels
    )
    failed_reasons: Counter[str] = Counter()
    for item in items:
        for cond in (item.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Failed" and cond.get("status") == "True":
                failed_reasons[str(cond.get("reason"))] += 1
    lists = {r: after[r] - before[r] for r in LISTED}
    lists["modelevaluations"] -= own_lists
    lists["jobs"] -= own_lists_jobs
    own = Counter(
        {
            ("modelevaluations", "LIST"): own_lists,
            ("modelevaluations", "POST"): evaluations + len(probes),
            ("modelevaluations", "DELETE"): len(deleted),
            ("modelevaluations", "PATCH"): len(edited),
            ("jobs", "LIST"): own_lists_jobs,
            ("jobs", "GET"): probe_gets,
        }
    )
    delta = Counter({k: after_all[k] - before_all[k] for k in after_all})
    delta.subtract(own)
    requests = {
        r: sum(v for (res, _), v in delta.items() if res == r) / evaluations for r in COUNTED
    }
    verbs = Counter({k: after_verbs[k] - before_verbs[k] for k in after_verbs})
    verbs.subtract(own)
    by_verb = {
        r: {
            verb: n / evaluations
            for (res, verb), n in sorted(verbs.items())
            if res == r and n / evaluations >= 0.05
        }
        for r in ("modelevaluations", "jobs")
    }
    first_jobs = {
        label.get(names.LABEL_EVALUATION): seconds(j["metadata"]["creationTimestamp"])
        for label, j in zip(labels, jobs, strict=True)
        if label.get(names.LABEL_GENERATION) == "1"
    }
    latencies = [
        first_jobs[i["metadata"]["name"]] - seconds(i["metadata"]["creationTimestamp"])
        for i in items
        if i["metadata"]["name"] in first_jobs
    ]
    runs = evaluations + len(edited) - len(deleted)
    operator_own = {
        kind: (operator_after[kind] - operator_before[kind]) / runs
        for kind in sorted(operator_after)
        if operator_after[kind] - operator_before[kind] > 0
    }
    return LoadReport(
        first_to_all_jobs_s=max(first_jobs.values(), default=math.nan) - math.floor(first_create),
        operator_requests_per_run=operator_own,
        evaluations=evaluations,
        deleted=len(deleted),
        edited=len(edited),
        limit_per_namespace=limit_per_namespace,
        create_s=create_s,
        ingest_s=ingest_s,
        drain_s=drain_s,
        probe_job_s=probes,
        rss_mib_start=rss[0],
        rss_mib_peak=max(rss),
        lists=lists,
        requests_per_evaluation=requests,
        requests_by_verb=by_verb,
        all_jobs_s=max(first_jobs.values(), default=math.nan) - creates_done,
        job_latency_p50_s=percentile(latencies, 50),
        job_latency_p99_s=percentile(latencies, 99),
        own_lists=own_lists,
        phases=dict(Counter(str((i.get("status") or {}).get("phase")) for i in items)),
        reasons=dict(failed_reasons),
        duplicate_jobs=[f"{e}-g{g}" for (e, g), n in per_generation.items() if n > 1],
        ingest_cpu_s=cpu_delta(cpu_before, cpu_ingest),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--evaluations",
        default="1000",
        help="how many to apply at once; a comma-separated list runs each on a fresh cluster",
    )
    parser.add_argument("--limit-per-namespace", type=int, default=0, help="0: no limit")
    parser.add_argument("--resync-seconds", type=float, default=30.0)
    parser.add_argument(
        "--reconcile-workers",
        type=int,
        help="the operator's MLMS_OPERATOR_RECONCILE_WORKERS (default: the operator's own)",
    )
    parser.add_argument(
        "--node-pods",
        type=int,
        default=KWOK_PODS,
        help="pods the kwok node runs at once (the drain's bound; 110 is a kubelet's default)",
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")
    parser.add_argument(
        "--memory-profile",
        type=Path,
        help="run the operator under tracemalloc and write its largest allocation sites here",
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in str(args.evaluations).split(",") if n]
    started = datetime.now(UTC)
    reports = []
    for n in sizes:
        report = measure(n, args)
        print(report.table(), flush=True)
        reports.append(report)
    if args.markdown:
        args.markdown.write_text(markdown(reports))
    if args.out:
        document = {
            "started": started.isoformat(),
            "ended": datetime.now(UTC).isoformat(),
            "cpus": os.cpu_count(),
            "node_pods": args.node_pods,
            "resync_seconds": args.resync_seconds,
            "reconcile_workers": args.reconcile_workers,
            "runs": [asdict(r) for r in reports],
        }
        args.out.write_text(json.dumps(document, indent=2))
    return 0


def measure(evaluations: int, args: argparse.Namespace) -> LoadReport:
    """One load on a fresh dev cluster and a fresh operator process."""
    from mlmodelscope.devcluster.cluster import Cluster

    with tempfile.TemporaryDirectory(prefix="mlms-load-") as tmp:
        run_dir = Path(tmp) / "cluster"
        with Cluster(run_dir, real_node=False) as cluster:
            cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
            cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
            widen_kwok_node(cluster, args.node_pods)
            load_ns, probe_ns = "load", "probe"
            for ns in (load_ns, probe_ns):
                cluster.kubectl("create", "namespace", ns)
            kube = Kube(cluster.api_client())
            metrics_port = free_port()
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("MLMS_OPERATOR_")},
                "KUBECONFIG": str(cluster.kubeconfig),
                "MLMS_OPERATOR_NAMESPACES": f"{load_ns},{probe_ns}",
                "MLMS_OPERATOR_MAX_RUNNING_PER_NAMESPACE": str(args.limit_per_namespace),
                "MLMS_OPERATOR_RESYNC_SECONDS": str(args.resync_seconds),
                "MLMS_OPERATOR_METRICS_PORT": str(metrics_port),
            }
            if args.reconcile_workers:
                env["MLMS_OPERATOR_RECONCILE_WORKERS"] = str(args.reconcile_workers)
            log = (Path(tmp) / "operator.log").open("wb")
            import subprocess

            command = [sys.executable, "-m", "mlmodelscope", "operator", "--standalone"]
            if args.memory_profile:
                env["MLMS_MEMORY_PROFILE"] = f"{args.memory_profile}-{evaluations}"
                command[1:3] = ["-c", MEMORY_PROFILED]
            operator = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            if args.memory_profile:
                threading.Thread(target=_signal_every, args=(operator, 90.0), daemon=True).start()
            try:
                time.sleep(5)  # the operator's first listing
                report = run_load(
                    kube,
                    lambda: cluster.kubectl("get", "--raw", "/metrics").stdout,
                    lambda: scrape(metrics_port),
                    operator.pid,
                    load_ns,
                    probe_ns,
                    evaluations,
                    args.limit_per_namespace,
                    timeout_s=max(1200.0, evaluations * 1.2),
                    marker=str(run_dir),
                )
                cpu = lambda: cpu_by_process(operator.pid, str(run_dir))  # noqa: E731
                # The objects-only floor first: the whole apply's pods go on after it ends.
                cluster.kubectl("create", "namespace", "floor")
                report.floor_s, report.floor_cpu_s = floor(kube, "floor", evaluations, cpu)
                cluster.kubectl("create", "namespace", "apply-floor")
                report.apply_floor_s, report.apply_floor_cpu_s = apply_floor(
                    kube, "apply-floor", evaluations, cpu
                )
                return report
            except (KubeError, TimeoutError):
                log.flush()
                print((Path(tmp) / "operator.log").read_text()[-4000:], file=sys.stderr)
                raise
            finally:
                if args.memory_profile:
                    operator.send_signal(signal.SIGUSR2)
                    time.sleep(60)
                operator.terminate()
                try:
                    operator.wait(30)
                except subprocess.TimeoutExpired:
                    operator.kill()
                    operator.wait(30)


def scrape(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def widen_kwok_node(cluster: Any, pods: int) -> None:
    """Let the kwok CPU node hold ``pods`` pods at once (a kubelet's default is 110; with it,
    the drain of 5,000 evaluations measures the node, not the operator)."""
    nodes_json = json.loads(
        cluster.kubectl(
            "get",
            "nodes",
            "-l",
            f"{nodes.SIMULATION_LABEL}=kwok,{nodes.POOL_LABEL}=cpu",
            "-o",
            "json",
        ).stdout
    )
    for node in nodes_json["items"]:
        patch = {"status": {"capacity": {"pods": str(pods)}, "allocatable": {"pods": str(pods)}}}
        cluster.kubectl(
            "patch", "node", node["metadata"]["name"], "--subresource=status", "--type=merge",
            "-p", json.dumps(patch),
        )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
