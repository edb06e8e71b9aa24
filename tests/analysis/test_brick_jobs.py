"""DLBricks suites and brick Jobs without a cluster: the exported folder, the worker run here
on it, what its log says, and the pure parts of a run (batches, the Job, outcomes, problems,
estimates). tests/analysis/test_brick_jobs_cluster.py runs the Jobs on the real node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from mlmodelscope.analysis import brick_worker
from mlmodelscope.analysis.brick_jobs import (
    JobOutcome,
    JobsConfig,
    JobState,
    batch_problems,
    batches,
    build_job,
    compose,
    job_outcome,
    node_selector,
    toleration,
)
from mlmodelscope.analysis.brick_lines import (
    WorkerOutput,
    parse_output,
    stack_line,
    suite_line,
    timing_line,
)
from mlmodelscope.analysis.brickstore import MeasuredBrick, brick_key, stack_key
from mlmodelscope.analysis.bricksuite import (
    Suite,
    SuiteBrick,
    SuiteError,
    SuiteModel,
    export_suite,
    read_suite,
)
from mlmodelscope.analysis.dlbricks import BenchConfig, split, system_stack
from mlmodelscope.cli import app

FAST = BenchConfig(runs=3, warmup=1, graph="raw")


def twin_convs(path: Path) -> Path:
    """x -> Conv -> Relu -> Conv -> Reshape: two equal convs (one brick), and a Reshape whose
    shape input is an integer tensor (kept as recorded in its brick)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.random([4, 4, 3, 3], dtype=np.float32), "w1"),
        numpy_helper.from_array(rng.random([4, 4, 3, 3], dtype=np.float32), "w2"),
        numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1] * 4),
        helper.make_node("Reshape", ["c2", "flat"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes,
        "twin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def suite_dir(tmp_path: Path) -> Path:
    model = twin_convs(tmp_path / "twin.onnx")
    export_suite([model, model], ["twin", "again"], FAST, tmp_path / "suite")
    return tmp_path / "suite"


# ------------------------------------------------------------------------------ the suite


def test_a_suite_holds_each_unique_brick_once_as_a_runnable_model(suite_dir: Path) -> None:
    suite = read_suite(suite_dir)
    layers, bricks = split(suite_dir.parent / "twin.onnx", FAST)
    assert (suite.graph, suite.batch_size) == ("raw", 1)
    assert [b.key for b in suite.bricks] == [brick_key(s) for s in bricks]  # 3, not 4
    assert [b.op_type for b in suite.bricks] == ["Conv", "Relu", "Reshape"]
    assert [m.name for m in suite.models] == ["twin", "again"]
    twin = suite.models[0]
    assert twin.layers == tuple(brick_key(c.signature) for c in layers)
    assert twin.layers[0] == twin.layers[2]  # conv1 and conv2: one brick
    assert sorted(p.name for p in (suite_dir / "bricks").iterdir()) == sorted(
        f"{b.key}.onnx" for b in suite.bricks
    )
    reshape = onnx.load(str(suite_dir / suite.bricks[2].file))
    assert [i.name for i in reshape.graph.input] == ["c2"]  # the shape is an initializer
    assert [i.name for i in reshape.graph.initializer] == ["flat"]


def test_a_suite_round_trips_and_a_foreign_folder_is_refused(tmp_path: Path) -> None:
    suite = Suite(
        "optimized", 2, (SuiteModel("m", ("k1", "k1")),), (SuiteBrick("k1", "Relu", "s"),)
    )
    assert Suite.from_dict(json.loads(json.dumps(suite.to_dict()))) == suite
    with pytest.raises(SuiteError, match="no brick suite"):
        read_suite(tmp_path)
    (tmp_path / "suite.json").write_text(json.dumps({**suite.to_dict(), "format": 2}))
    with pytest.raises(SuiteError, match="format: 2"):
        read_suite(tmp_path)
    (tmp_path / "suite.json").write_text(json.dumps({"format": 1, "graph": "raw"}))
    with pytest.raises(SuiteError, match="malformed"):
        read_suite(tmp_path)


def test_mlms_dlbricks_export_writes_the_suite_and_measures_nothing(tmp_path: Path) -> None:
    model = twin_convs(tmp_path / "twin.onnx")
    result = CliRunner().invoke(
        app, ["dlbricks", str(model), "--graph", "raw", "--export", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert "3 unique bricks of 1 models in" in result.output
    assert "measured" not in result.output
    assert len(read_suite(tmp_path / "out").bricks) == 3


# ----------------------------------------------------------------------------- the worker


def test_the_worker_plans_with_its_stack_and_the_suite(
    suite_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert brick_worker.main([str(suite_dir), "--runs", "3", "--warmup", "1"]) == 0
    output = parse_output(capsys.readouterr().out)
    assert output.stack == system_stack(BenchConfig(runs=3, warmup=1, graph="raw"))
    assert output.suite == read_suite(suite_dir) and output.timings == ()


def test_the_worker_measures_the_bricks_asked_and_names_the_ones_it_cannot(
    suite_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv, relu, reshape = read_suite(suite_dir).bricks
    (suite_dir / relu.file).unlink()
    asked = ",".join([reshape.key, "f" * 64, relu.key, conv.key])
    status = brick_worker.main([str(suite_dir), "--bricks", asked, "--runs", "3", "--warmup", "1"])
    captured = capsys.readouterr()
    assert status == 1
    output = parse_output(captured.out)
    assert [t.brick_key for t in output.timings] == [reshape.key, conv.key]
    conv_timing = output.timings[1]
    assert (conv_timing.signature, conv_timing.op_type) == (conv.signature, "Conv")
    assert conv_timing.runs == 3 and conv_timing.warmup == 1
    assert conv_timing.measure_s > conv_timing.p50_ms * 3 / 1000 > 0
    assert f"brick {'f' * 64} is not in the suite" in captured.err
    assert f"brick {relu.key}: NoSuchFile" in captured.err


def test_the_worker_refuses_a_folder_without_a_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert brick_worker.main([str(tmp_path)]) == 2
    assert "no brick suite at" in capsys.readouterr().err


# ------------------------------------------------------------------------------- its log


def measured(key: str = "k1", p50: float = 1.0) -> MeasuredBrick:
    return MeasuredBrick(key, f"sig-{key}", "Conv", p50, p50, p50, 3, 1, 0.5)


def test_the_log_is_read_back_around_other_lines_and_a_cut_record() -> None:
    suite = Suite("raw", 1, (SuiteModel("m", ("k1",)),), (SuiteBrick("k1", "Conv", "sig-k1"),))
    cut = timing_line(measured("k2"))[:40]
    log = "\n".join(
        [
            "2026-01-01 [W:onnxruntime] a warning",
            stack_line({"cpu": "x", "cpus": 2}),
            suite_line(suite),
            "{not json",
            '{"other": "record"}',
            timing_line(measured("k1")),
            cut,
        ]
    )
    assert parse_output(log) == WorkerOutput({"cpu": "x", "cpus": 2}, suite, (measured("k1"),))
    assert parse_output("") == WorkerOutput(None, None, ())


# ----------------------------------------------------------------------- the run, decided


def test_bricks_are_dealt_round_robin_into_at_most_the_jobs_asked() -> None:
    keys = [f"k{i}" for i in range(7)]
    assert batches(keys, 3) == [("k0", "k3", "k6"), ("k1", "k4"), ("k2", "k5")]
    assert batches(keys[:2], 5) == [("k0",), ("k1",)]
    assert batches([], 2) == []


def test_node_selectors_and_tolerations_from_the_command_line() -> None:
    assert node_selector(["pool=a", "zone=x=y"]) == {"pool": "a", "zone": "x=y"}
    assert toleration("pool=gpu:NoSchedule") == {
        "key": "pool",
        "operator": "Equal",
        "value": "gpu",
        "effect": "NoSchedule",
    }
    assert toleration("dedicated:NoExecute") == {
        "key": "dedicated",
        "operator": "Exists",
        "effect": "NoExecute",
    }
    with pytest.raises(ValueError, match="key=value"):
        node_selector(["pool"])
    with pytest.raises(ValueError, match="Effect one of"):
        toleration("pool=a:Sometimes")
    with pytest.raises(ValueError, match=">= 1"):
        JobsConfig("ns", "img", "c", "s", jobs=0)


def test_a_brick_job_is_restricted_never_retried_and_mounts_the_claim_read_only() -> None:
    config = JobsConfig(
        "lab",
        "registry/agent-onnxruntime@sha256:abc",
        "bricks",
        "/suites/a/",
        threads=2,
        runs=5,
        warmup=0,
        timeout_s=600,
        node_selector={"pool": "a"},
        tolerations=({"key": "pool", "operator": "Exists", "effect": "NoSchedule"},),
    )
    job = build_job(config, "dlbricks-abc123-1", "abc123", ["k1", "k2"])
    assert job["metadata"]["name"] == "dlbricks-abc123-1"
    assert job["metadata"]["namespace"] == "lab"
    assert job["metadata"]["labels"]["mlmodelscope.io/dlbricks-run"] == "abc123"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 600
    assert spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["nodeSelector"] == {"pool": "a"}
    assert pod["tolerations"] == [{"key": "pool", "operator": "Exists", "effect": "NoSchedule"}]
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["command"] == [
        "python", "-m", "mlmodelscope.analysis.brick_worker",
        "/var/run/mlmodelscope/pvc/bricks/suites/a",
        "--threads", "2", "--warmup", "0", "--runs", "5", "--bricks", "k1,k2",
    ]  # fmt: skip
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["suite"] == {
        "name": "suite",
        "mountPath": "/var/run/mlmodelscope/pvc/bricks",
        "readOnly": True,
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["suite"]["persistentVolumeClaim"] == {"claimName": "bricks", "readOnly": True}
    assert {"tmp", "cache"} <= set(volumes) and "emptyDir" in volumes["tmp"]
    plan = build_job(config, "dlbricks-abc123-plan", "abc123", None)
    assert "--bricks" not in plan["spec"]["template"]["spec"]["containers"][0]["command"]


def job(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "status": {"conditions": [{"type": t, "status": s, "message": m} for t, s, m in conditions]}
    }


def waiting_pod(reason: str) -> dict[str, Any]:
    state = {"waiting": {"reason": reason, "message": "pull failed"}}
    return {"status": {"containerStatuses": [{"state": state}]}}


def test_a_jobs_outcome_follows_its_conditions_and_a_pod_that_cannot_start() -> None:
    assert job_outcome(job(("Complete", "True", "")), []).state is JobState.SUCCEEDED
    failed = job_outcome(job(("Failed", "True", "BackoffLimitExceeded")), [])
    assert failed == JobOutcome(JobState.FAILED, "BackoffLimitExceeded")
    assert job_outcome(job(("Failed", "False", "")), []).state is JobState.RUNNING
    assert job_outcome({}, [waiting_pod("ContainerCreating")]).state is JobState.RUNNING
    stuck = job_outcome({}, [waiting_pod("ImagePullBackOff")])
    assert stuck == JobOutcome(JobState.STUCK, "ImagePullBackOff: pull failed")


def test_a_job_that_fails_measures_less_or_runs_elsewhere_is_a_problem_naming_it() -> None:
    stack = {"cpu": "x"}
    ok = JobOutcome(JobState.SUCCEEDED)
    full = WorkerOutput(stack, None, (measured("k1"), measured("k2")))
    assert batch_problems("j-1", ok, ["k1", "k2"], full, stack_key(stack)) == []
    short = WorkerOutput(stack, None, (measured("k1"),))
    failed = JobOutcome(JobState.FAILED, "BackoffLimitExceeded")
    assert batch_problems("j-1", failed, ["k1", "k2"], short, stack_key(stack)) == [
        "Job j-1 failed: BackoffLimitExceeded",
        "Job j-1 measured 1 of 2 bricks (missing k2)",
    ]
    elsewhere = batch_problems("j-2", ok, ["k1", "k2"], full, stack_key({"cpu": "y"}))
    assert len(elsewhere) == 1 and elsewhere[0].startswith("Job j-2 ran on another stack")
    silent = batch_problems("j-3", ok, [], WorkerOutput(None, None, ()), stack_key(stack))
    assert silent == ["Job j-3 printed no stack"]


def test_estimates_sum_each_layers_brick_and_wait_for_every_brick() -> None:
    suite = Suite(
        "raw",
        1,
        (SuiteModel("a", ("k1", "k2", "k1")), SuiteModel("b", ("k3",))),
        (),
    )
    a, b = compose(suite, {"k1": 1.0, "k2": 0.5})
    assert (a.model, a.layers, a.bricks, a.estimate_ms) == ("a", 3, 2, 2.5)
    assert (b.model, b.estimate_ms) == ("b", None)
