"""How much does the agent add to a query? Its SingleStream p50 against a bare timing loop.

For every framework x model x batch size this runs, in one process per framework:

(a) the agent: a ModelEvaluation run through ``mlmodelscope.agent.runner.evaluate`` (fetch,
    dataset, preprocessing, backend, BackendSUT, the SingleStream load generator), taking the
    reported p50 and the agent's own NullBackend ``harness_overhead`` p50;
(b) a bare loop: the same model file loaded with the framework's own API (an ONNX Runtime
    InferenceSession, ``torch.jit.load`` under ``inference_mode``, a SavedModel signature),
    with the same thread settings, fed the *same* pre-built batches (the agent's own
    ``BatchRing``), timed call by call with ``time.perf_counter_ns`` and summarized with the
    agent's percentile rule (``summarize_latencies``).

(a) and (b) alternate for ``--rounds`` rounds (A B, B A, A B, ...) so slow drift of a shared
machine cancels; the medians over rounds are compared. That end-to-end comparison is what
issue 3 asks for, but on a busy machine its noise can exceed a 2 % goal, so each round also
runs (c): the bare call, the agent's ``backend.predict`` and its ``BackendSUT.issue`` (what
the load generator times) interleaved call by call on the same batches. Contention then hits
all three alike, and their p50 differences split the overhead into adapter and harness parts.

The goal (issue 3): agent p50 - bare p50 <= max(2 % of bare p50, 20 µs). Frameworks run in
separate processes, so TensorFlow's and PyTorch's process-wide thread pools never meet, and
threads are pinned before either starts.

    .venv/bin/python benchmarks/harness_overhead.py --out harness-overhead.json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from machine_info import cpu_model, versions

HERE = Path(__file__).resolve().parent
FRAMEWORKS = ("onnxruntime", "pytorch", "tensorflow")
MODELS = ("digits", "resnet18")
FORMAT = {"onnxruntime": "onnx", "pytorch": "torchscript", "tensorflow": "savedmodel"}
"""The model format each framework loads in this benchmark."""
GOAL_FRACTION = 0.02
GOAL_FLOOR_US = 20.0
DEFAULT_QUERIES = {"digits": 2000, "resnet18": 40}
"""minQueryCount per measurement window: enough for a steady p50 in a few seconds."""
DEFAULT_WARMUP = {"digits": 200, "resnet18": 5}
DEFAULT_MIN_DURATION = {"digits": "1s", "resnet18": "1s"}

Call = Callable[[np.ndarray], object]
"""One bare inference on a batch: the framework call and the copy of the output to numpy."""


@dataclass(frozen=True)
class Case:
    """One framework x model x batch size, as the parent hands it to a worker."""

    framework: str
    model: str
    model_path: str
    input_shape: list[int]
    batch_size: int
    queries: int
    warmup: int
    min_duration: str
    postprocess: bool
    interleaved: int
    """Batches in the interleaved run (each run three ways) per round."""


@dataclass
class Round:
    """One round: the end-to-end A/B pair and the interleaved calls, microseconds."""

    agent_p50_us: float
    bare_p50_us: float
    agent_predict_p50_us: float
    agent_postprocess_p50_us: float
    harness_overhead_p50_us: float
    agent_queries: int
    agent_windows: int
    agent_valid: bool
    bare_queries: int
    bare_windows: int
    paired_agent_p50_us: float
    paired_bare_p50_us: float
    paired_overhead_us: float
    """p50 of BackendSUT.issue - p50 of the bare call, interleaved call by call."""

    @property
    def overhead_us(self) -> float:
        return self.agent_p50_us - self.bare_p50_us


def goal_us(bare_us: float) -> float:
    """Issue 3's goal: at most 2 % of the bare p50 or 20 µs, whichever is larger."""
    return max(GOAL_FRACTION * bare_us, GOAL_FLOOR_US)


@dataclass
class Row:
    """The result of one case: per-round values and the medians the verdicts use."""

    framework: str
    model: str
    batch_size: int
    rounds: list[Round] = field(default_factory=list)
    calls_ns: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    """Per round, interleaved: (bare call, backend.predict, BackendSUT.issue) latencies."""

    def summary(self) -> dict[str, Any]:
        """JSON-ready. End to end: medians over rounds of each side's p50. Paired: p50s over
        every interleaved call of every round (differences of p50s, as end to end, so the
        breakdown adds up)."""
        bare_p50s = [r.bare_p50_us for r in self.rounds]
        agent = statistics.median(r.agent_p50_us for r in self.rounds)
        bare = statistics.median(bare_p50s)
        overhead = agent - bare
        bare_call, predict, issue = (np.concatenate(ns) for ns in zip(*self.calls_ns, strict=True))
        p50 = {
            k: _median_us(v)
            for k, v in (("bare", bare_call), ("predict", predict), ("issue", issue))
        }
        paired_bare = p50["bare"]
        paired = p50["issue"] - p50["bare"]
        return {
            "framework": self.framework,
            "model": self.model,
            "batch_size": self.batch_size,
            "agent_p50_us": agent,
            "bare_p50_us": bare,
            "overhead_us": overhead,
            "overhead_ratio": overhead / bare,
            "goal_us": goal_us(bare),
            "pass": overhead <= goal_us(bare),
            "per_round_overhead_us": [r.overhead_us for r in self.rounds],
            "bare_spread_ratio": (max(bare_p50s) - min(bare_p50s)) / bare,
            "paired_pairs": int(issue.shape[0]),
            "paired_agent_p50_us": p50["issue"],
            "paired_bare_p50_us": paired_bare,
            "paired_overhead_us": paired,
            "paired_overhead_ratio": paired / paired_bare,
            "paired_goal_us": goal_us(paired_bare),
            "paired_pass": paired <= goal_us(paired_bare),
            "adapter_us": p50["predict"] - p50["bare"],
            "sut_wrapper_us": p50["issue"] - p50["predict"],
            # Medians of per-batch differences: not additive, but immune to contention that
            # changes between calls more slowly than one batch's three calls take.
            "diff_overhead_us": _median_us(issue - bare_call),
            "diff_adapter_us": _median_us(predict - bare_call),
            "diff_sut_wrapper_us": _median_us(issue - predict),
            "agent_predict_p50_us": statistics.median(r.agent_predict_p50_us for r in self.rounds),
            "agent_postprocess_p50_us": statistics.median(
                r.agent_postprocess_p50_us for r in self.rounds
            ),
            "harness_overhead_p50_us": statistics.median(
                r.harness_overhead_p50_us for r in self.rounds
            ),
            "rounds": [{**asdict(r), "overhead_us": r.overhead_us} for r in self.rounds],
        }


def _median_us(ns: np.ndarray) -> float:
    return float(np.median(ns)) / 1e3


# ------------------------------------------------------------------------------------ worker


def pin_threads(framework: str, intra: int, inter: int) -> None:
    """Size the framework's thread pools before its runtime starts (TensorFlow and PyTorch's
    inter-op pool can be sized only once), so the agent's backend finds them already right."""
    if framework == "pytorch":
        import torch

        torch.set_num_threads(intra)
        torch.set_num_interop_threads(inter)
    elif framework == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)


@dataclass(frozen=True)
class BareSession:
    """The framework's own API on a model: the per-batch call, the context a user's loop
    would run in, and the objects that must stay alive while it runs."""

    call: Call
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    keep: Any = None


def bare_session(framework: str, path: Path, intra: int, inter: int) -> BareSession:
    """Load ``path`` with the framework's API directly (no mlmodelscope code involved).

    ONNX Runtime gets the session options the agent's adapter sets (threads, ORT_ENABLE_ALL,
    deterministic compute) so both sides run the same kernels; PyTorch's ``inference_mode``
    is entered once around the loop, as a hand-written loop would.
    """
    if framework == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = intra
        options.inter_op_num_threads = inter
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if hasattr(options, "use_deterministic_compute"):
            options.use_deterministic_compute = True
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        run, names = session.run, ["logits"]
        return BareSession(lambda x: run(names, {"input": x}), keep=session)
    if framework == "pytorch":
        import torch

        jit: Any = torch.jit  # untyped in some torch releases
        module = jit.load(str(path), map_location="cpu").eval()
        from_numpy = torch.from_numpy
        return BareSession(lambda x: module(from_numpy(x)).numpy(), torch.inference_mode)
    if framework == "tensorflow":
        import tensorflow as tf

        loaded = tf.saved_model.load(str(path))
        fn = loaded.signatures["serving_default"]
        return BareSession(lambda x: fn(input=x)["logits"].numpy(), keep=loaded)
    raise ValueError(f"unknown framework {framework!r}")


def bare_window(
    bare: BareSession, batches: Sequence[np.ndarray], min_queries: int, min_duration_ns: int
) -> np.ndarray:
    """Calls back to back, cycling through ``batches``, until ``min_queries`` calls *and*
    ``min_duration_ns`` have passed (the agent's SingleStream rule); latencies in ns.

    Like the agent's loop: one clock read right before and right after each call, nothing
    else in the timed region, latencies stored in a preallocated array.
    """
    capacity = min_queries
    latencies = np.empty(capacity, dtype=np.int64)
    clock = time.perf_counter_ns
    call = bare.call
    ring = len(batches)
    k = i = 0
    end = clock() + min_duration_ns
    while True:
        batch = batches[k]
        k = k + 1 if k + 1 < ring else 0
        t0 = clock()
        call(batch)
        t1 = clock()
        latencies[i] = t1 - t0
        i += 1
        if i >= min_queries and t1 >= end:
            return latencies[:i].copy()
        if i == capacity:  # between calls, never inside a timed region
            capacity *= 2
            latencies = np.concatenate([latencies, np.empty_like(latencies)])


def bare_measure(
    bare: BareSession,
    batches: Sequence[np.ndarray],
    *,
    warmup: int,
    min_queries: int,
    min_duration_ns: int,
    tolerance_percent: float,
    max_windows: int,
) -> tuple[np.ndarray, int]:
    """Warm-up, then windows until two consecutive p50s agree within the tolerance: the
    agent's stability rule, so neither side gets more chances to land in a quiet spell.
    The cyclic GC is paused throughout, as the agent pauses it. Returns (last window, count)."""
    from mlmodelscope.agent.stats import is_stable, percentile_of_sorted

    p50s: list[float] = []
    window = np.empty(0, dtype=np.int64)
    with bare.context():
        for i in range(warmup):
            bare.call(batches[i % len(batches)])
        gc.collect()
        gc.disable()
        try:
            for _ in range(max_windows):
                window = bare_window(bare, batches, min_queries, min_duration_ns)
                p50s.append(percentile_of_sorted(np.sort(window), 50.0))
                if is_stable(p50s, tolerance_percent):
                    break
                gc.collect(1)
        finally:
            gc.enable()
    return window, len(p50s)


def interleaved_calls(
    calls: Sequence[tuple[Callable[[Any], object], Sequence[Any]]],
    *,
    count: int,
    warmup: int,
    context: Callable[[], contextlib.AbstractContextManager[Any]],
) -> np.ndarray:
    """Several ways of running the same batch, interleaved call by call; (len(calls), count)
    latencies in ns, column i holding every way's time on batch i.

    Each call is ``(function, its pre-built argument per batch)`` and is timed exactly as the
    load generator times a query (a clock read right before and right after). A busy machine
    slows the calls of one column alike, so the ways' p50s compare far more precisely than
    those of separate runs (which need the machine equally busy for minutes).
    The bare side's ``context`` (PyTorch's ``inference_mode``) is held throughout; the agent's
    adapter enters its own per call, which costs the same inside it as outside (measured).
    """
    ways = len(calls)
    latencies = np.empty((ways, count), dtype=np.int64)
    clock = time.perf_counter_ns
    ring = len(calls[0][1])
    # A fresh random order per column (seeded): with a fixed rotation each way would always
    # follow the same other way, and what a call leaves behind (caches, a toggled framework
    # mode) then biases its successor by a few µs.
    rng = np.random.default_rng(0)
    orders: list[list[int]] = [rng.permutation(ways).tolist() for _ in range(count)]
    with context():
        for i in range(warmup):
            for function, args in calls:
                function(args[i % ring])
        gc.collect()
        gc.disable()
        try:
            for i in range(count):
                k = i % ring
                for j in orders[i]:
                    function, args = calls[j]
                    arg = args[k]
                    t0 = clock()
                    function(arg)
                    t1 = clock()
                    latencies[j, i] = t1 - t0
        finally:
            gc.enable()
    return latencies


def evaluation_document(case: Case, intra: int, inter: int) -> dict[str, Any]:
    """The ModelEvaluation the agent runs: digits with the examples' preprocessing, the
    ResNet on a synthetic dataset of its input shape; no accuracy pass (timing only)."""
    fmt = FORMAT[case.framework]
    if case.model == "digits":
        dataset: dict[str, Any] = {"type": "digits", "split": "test"}
        preprocessing: list[dict[str, Any]] = [
            {"scale": {"factor": 0.0625}},
            {"layout": {"from": "HWC", "to": "CHW"}},
        ]
    else:
        size = 16 * case.batch_size  # a 16-query ring, no more synthetic data than that
        dataset = {"type": "synthetic", "shape": case.input_shape[1:], "size": size}
        preprocessing = []
    postprocessing = [{"softmax": {}}, {"topk": {"k": 5}}] if case.postprocess else []
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": f"overhead-{case.framework}-{case.model}"},
        "spec": {
            "model": {
                "name": case.model,
                "uri": case.model_path,
                "format": fmt,
                "inputs": [
                    {"name": "input", "shape": case.input_shape, "dtype": "float32"},
                ],
                "outputs": [
                    {"name": "logits", "shape": [-1, 10 if case.model == "digits" else 1000]}
                ],
            },
            "preprocessing": preprocessing,
            "postprocessing": postprocessing,
            "framework": {
                "name": case.framework,
                "intraOpThreads": intra,
                "interOpThreads": inter,
            },
            "dataset": dataset,
            "scenario": {
                "type": "SingleStream",
                "batchSizes": [case.batch_size],
                "warmup": case.warmup,
                "minQueryCount": case.queries,
                "minDuration": case.min_duration,
                "accuracy": False,
            },
        },
    }


def us(seconds: float) -> float:
    return seconds * 1e6


def run_case(case: Case, intra: int, inter: int, rounds: int) -> Row:
    """``rounds`` times: the agent end to end and the bare loop (alternating which goes
    first), then bare call, backend.predict and BackendSUT.issue interleaved; same batches."""
    from mlmodelscope.agent.backends import create_backend
    from mlmodelscope.agent.datasets import load_dataset
    from mlmodelscope.agent.processing import Postprocessor, Preprocessor, preprocess_all
    from mlmodelscope.agent.runner import evaluate
    from mlmodelscope.agent.scenarios import BackendSUT, BatchRing
    from mlmodelscope.agent.stats import summarize_latencies
    from mlmodelscope.spec import LoadedEvaluation, parse_duration
    from mlmodelscope.spec.document import parse_evaluation

    document = evaluation_document(case, intra, inter)
    loaded = LoadedEvaluation(parse_evaluation(document), "benchmarks/harness_overhead.py", None)
    spec = loaded.evaluation.spec
    # The very batches the agent's ring holds: same dataset, preprocessing, seed and order.
    samples = load_dataset(spec.dataset, seed=spec.scenario.seed)
    inputs, _ = preprocess_all(Preprocessor(spec.preprocessing), samples)
    ring = BatchRing.for_scenario(spec.scenario, [inputs], case.batch_size)
    batches = [query[0][0] for query in ring.queries]
    stability = spec.scenario.stability
    bare_api = bare_session(case.framework, Path(case.model_path), intra, inter)
    # The agent's system under test, built as runner.evaluate builds it, for the interleaved run.
    backend = create_backend(spec.framework.name)
    backend.load(Path(case.model_path), spec)
    postprocess = Postprocessor(spec.postprocessing).timed if spec.postprocessing else None
    sut = BackendSUT(backend, postprocess, capacity=case.interleaved + case.warmup)
    sut_batches = [query[0] for query in ring.queries]

    row = Row(case.framework, case.model, case.batch_size)
    label = f"{case.framework:<11} {case.model:<8} batch {case.batch_size:<3}"
    for r in range(rounds):
        agent: dict[str, Any] = {}
        bare_ns: np.ndarray | None = None
        bare_windows = 0
        # A B, then B A, ...: a linear drift of the machine favours neither side.
        order = ("agent", "bare") if r % 2 == 0 else ("bare", "agent")
        for side in order:
            if side == "agent":
                outcome = evaluate(loaded, include_raw=False)
                agent = outcome.document["measurements"][0]
            else:
                bare_ns, bare_windows = bare_measure(
                    bare_api,
                    batches,
                    warmup=case.warmup,
                    min_queries=case.queries,
                    min_duration_ns=round(parse_duration(case.min_duration) * 1e9),
                    tolerance_percent=stability.tolerance_percent,
                    max_windows=stability.max_windows,
                )
        assert bare_ns is not None
        sut.reset()
        bare_call, predict, issue = interleaved_calls(
            [(bare_api.call, batches), (backend.predict, sut_batches), (sut.issue, sut_batches)],
            count=case.interleaved,
            warmup=case.warmup,
            context=bare_api.context,
        )
        row.calls_ns.append((bare_call, predict, issue))
        bare = summarize_latencies(bare_ns, (50.0,))
        result = Round(
            agent_p50_us=us(agent["latency"]["percentiles_s"]["p50"]),
            bare_p50_us=us(bare.percentile(50.0)),
            agent_predict_p50_us=us(agent["predict"]["percentiles_s"]["p50"]),
            agent_postprocess_p50_us=us(agent["postprocess"]["percentiles_s"]["p50"]),
            harness_overhead_p50_us=us(agent["harness_overhead"]["percentiles_s"]["p50"]),
            agent_queries=int(agent["queries"]),
            agent_windows=len(agent["windows"]),
            agent_valid=bool(agent["verdict"]["valid"]),
            bare_queries=int(bare_ns.shape[0]),
            bare_windows=bare_windows,
            paired_agent_p50_us=float(np.median(issue)) / 1e3,
            paired_bare_p50_us=float(np.median(bare_call)) / 1e3,
            paired_overhead_us=(float(np.median(issue)) - float(np.median(bare_call))) / 1e3,
        )
        row.rounds.append(result)
        print(
            f"  {label} round {r + 1}: agent {result.agent_p50_us:10.1f} us  "
            f"bare {result.bare_p50_us:10.1f} us  overhead {result.overhead_us:+9.1f} us  "
            f"interleaved {result.paired_overhead_us:+7.1f} us  "
            f"(null harness {result.harness_overhead_p50_us:.2f} us)",
            flush=True,
        )
    backend.close()
    return row


def worker(config_path: Path, result_path: Path) -> int:
    """Entry point of one framework's process: every case of that framework."""
    config = json.loads(config_path.read_text())
    framework = config["framework"]
    pin_threads(framework, config["threads"], config["inter_threads"])
    rows = [
        run_case(Case(**case), config["threads"], config["inter_threads"], config["rounds"])
        for case in config["cases"]
    ]
    result_path.write_text(json.dumps([row.summary() for row in rows]))
    return 0


# ------------------------------------------------------------------------------------ parent


def model_files(models: Sequence[str], resnet_size: int) -> dict[str, tuple[Path, list[int]]]:
    """Build (or reuse from the cache) each model; model -> (folder, input shape)."""
    folders: dict[str, tuple[Path, list[int]]] = {}
    if "digits" in models:
        from mlmodelscope.agent.digits import ensure_digits_models

        folders["digits"] = (ensure_digits_models(), [-1, 1, 8, 8])
    if "resnet18" in models:
        folder = _resnet18().ensure_resnet18_models(resnet_size)
        folders["resnet18"] = (folder, [-1, 3, resnet_size, resnet_size])
    return folders


def artifact(model: str, framework: str, folder: Path) -> Path:
    """The file (or SavedModel folder) of ``model`` that ``framework`` loads."""
    fmt = FORMAT[framework]
    if model == "digits":
        from mlmodelscope.agent.digits import MODEL_FILES

        return folder / MODEL_FILES[fmt]
    files: dict[str, str] = _resnet18().MODEL_FILES
    return folder / files[fmt]


def _resnet18() -> Any:
    """benchmarks/resnet18.py, imported by path (benchmarks/ is not a package)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import resnet18

    return resnet18


@contextlib.contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="mlms-overhead-") as tmp:
        yield Path(tmp)


def run_framework(
    framework: str, cases: list[Case], args: argparse.Namespace, scratch: Path
) -> list[dict[str, Any]]:
    """One subprocess per framework: its runtime state dies with it."""
    config = scratch / f"{framework}.config.json"
    result = scratch / f"{framework}.result.json"
    config.write_text(
        json.dumps(
            {
                "framework": framework,
                "threads": args.threads,
                "inter_threads": args.inter_threads,
                "rounds": args.rounds,
                "cases": [asdict(c) for c in cases],
            }
        )
    )
    threads = str(args.threads)
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # OpenMP / MKL pools (oneDNN inside TensorFlow and PyTorch) sized like the frameworks.
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(config), str(result)]
    proc = subprocess.run(command, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the {framework} worker failed with exit status {proc.returncode}")
    rows: list[dict[str, Any]] = json.loads(result.read_text())
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown, so the same text goes into docs/benchmarks.md."""
    header = (
        "| framework | model | batch | agent p50 (µs) | bare p50 (µs) | overhead (µs) "
        "| overhead (%) | per round (µs) | bare spread | interleaved overhead (µs) | goal (µs) "
        "| end to end | interleaved | null harness (µs) |"
    )
    lines = [header, "|" + "---|" * 14]
    for r in rows:
        rounds = ", ".join(f"{v:+.1f}" for v in r["per_round_overhead_us"])
        lines.append(
            f"| {r['framework']} | {r['model']} | {r['batch_size']} "
            f"| {r['agent_p50_us']:.1f} | {r['bare_p50_us']:.1f} | {r['overhead_us']:+.1f} "
            f"| {100 * r['overhead_ratio']:+.2f} | {rounds} "
            f"| {100 * r['bare_spread_ratio']:.0f} % "
            f"| {r['paired_overhead_us']:+.1f} ({100 * r['paired_overhead_ratio']:+.2f} %) "
            f"| {r['goal_us']:.1f} | {'PASS' if r['pass'] else 'FAIL'} "
            f"| {'PASS' if r['paired_pass'] else 'FAIL'} "
            f"| {r['harness_overhead_p50_us']:.2f} |"
        )
    return "\n".join(lines)


def format_breakdown(rows: Sequence[dict[str, Any]]) -> str:
    """Where the overhead goes: differences of p50s of the interleaved calls, and each round's
    total (its spread shows how far the machine's noise lets the total be trusted)."""
    lines = [
        "| framework | model | batch | bare call p50 (µs) | adapter: predict − bare (µs) "
        "| BackendSUT: issue − predict (µs) | total: issue − bare (µs) | total per round (µs) "
        "| null harness (µs) |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        rounds = ", ".join(f"{x['paired_overhead_us']:+.1f}" for x in r["rounds"])
        lines.append(
            f"| {r['framework']} | {r['model']} | {r['batch_size']} "
            f"| {r['paired_bare_p50_us']:.1f} | {r['adapter_us']:+.1f} "
            f"| {r['sut_wrapper_us']:+.1f} | {r['paired_overhead_us']:+.1f} | {rounds} "
            f"| {r['harness_overhead_p50_us']:.2f} |"
        )
    return "\n".join(lines)


def csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", type=csv, default=list(FRAMEWORKS))
    parser.add_argument("--models", type=csv, default=list(MODELS))
    parser.add_argument(
        "--batch-sizes", type=lambda v: [int(b) for b in csv(v)], default=[1], metavar="LIST"
    )
    parser.add_argument(
        "--queries",
        type=int,
        help="minQueryCount per window (default: digits 2000, resnet18 40); "
        "the bare loop times as many queries as the agent's reported window",
    )
    parser.add_argument("--warmup", type=int, help="warm-up queries (default 200 / 5)")
    parser.add_argument("--min-duration", help="minDuration per window (default 1s)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds per case")
    parser.add_argument(
        "--interleaved",
        type=int,
        help="batches per round in the interleaved run (default: as --queries)",
    )
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, both sides")
    parser.add_argument("--inter-threads", type=int, default=1, help="inter-op threads")
    parser.add_argument("--resnet-size", type=int, default=224, help="ResNet input height/width")
    parser.add_argument(
        "--postprocess",
        action="store_true",
        help="give the agent the examples' softmax + top-5 postprocessing (the bare loop has "
        "none, so its cost then counts as overhead)",
    )
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for fw in args.frameworks:
        if fw not in FRAMEWORKS:
            parser.error(f"unknown framework {fw!r}; choose from {', '.join(FRAMEWORKS)}")
    for model in args.models:
        if model not in MODELS:
            parser.error(f"unknown model {model!r}; choose from {', '.join(MODELS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(*args.worker)
    started = time.monotonic()
    load_before = os.getloadavg()
    folders = model_files(args.models, args.resnet_size)
    rows: list[dict[str, Any]] = []
    with _scratch() as scratch:
        for framework in args.frameworks:
            cases = [
                Case(
                    framework=framework,
                    model=model,
                    model_path=str(artifact(model, framework, folders[model][0])),
                    input_shape=folders[model][1],
                    batch_size=batch_size,
                    queries=args.queries or DEFAULT_QUERIES[model],
                    warmup=args.warmup if args.warmup is not None else DEFAULT_WARMUP[model],
                    min_duration=args.min_duration or DEFAULT_MIN_DURATION[model],
                    postprocess=args.postprocess,
                    interleaved=args.interleaved or args.queries or DEFAULT_QUERIES[model],
                )
                for model in args.models
                for batch_size in args.batch_sizes
            ]
            print(f"{framework}: {len(cases)} case(s), {args.rounds} rounds each", flush=True)
            rows.extend(run_framework(framework, cases, args, scratch))
    table = format_table(rows)
    breakdown = format_breakdown(rows)
    print()
    print(table)
    print()
    print(breakdown)
    e2e = sum(r["pass"] for r in rows)
    paired = sum(r["paired_pass"] for r in rows)
    print(
        f"\nwithin max(2 %, 20 µs) of the bare loop: end to end {e2e}/{len(rows)}, "
        f"interleaved {paired}/{len(rows)}"
    )
    if args.out:
        report = {
            "benchmark": "harness_overhead",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "goal": f"overhead <= max({GOAL_FRACTION:.0%} of bare p50, {GOAL_FLOOR_US:g} us)",
            "machine": {
                "cpu": cpu_model(),
                "cpus": os.cpu_count(),
                "loadavg_before": load_before,
                "loadavg_after": os.getloadavg(),
                "platform": platform.platform(),
            },
            "versions": versions(),
            "settings": {
                "threads": args.threads,
                "inter_threads": args.inter_threads,
                "rounds": args.rounds,
                "resnet_size": args.resnet_size,
                "postprocess": args.postprocess,
            },
            "duration_s": time.monotonic() - started,
            "results": rows,
            "table_markdown": table,
            "breakdown_markdown": breakdown,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
