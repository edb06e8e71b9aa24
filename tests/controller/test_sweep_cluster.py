"""EvaluationSweeps against the real control plane (mlmodelscope.devcluster).

Each test runs its own `mlms operator --standalone` subprocess for its namespace (the fixtures
of test_operator_cluster.py), recording into a SQLite results store; the children's Jobs run
the digits model for real on the exec node, in ONNX Runtime, PyTorch and TensorFlow.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_evaluations import (
    ENDED,
    EXEC_CPU,
    apply,
    children,
    get_sweep,
    gone,
    sweep_manifest,
    wait_sweep,
)
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, KubeError, configmap_path, evaluation_path, job_path
from mlmodelscope.controller import names
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.spec.sweep import LABEL_SWEEP

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
PITFALLS = REPO / "examples" / "sweeps" / "digits-pitfalls.yaml"
WRONG_SHA256 = "0" * 64


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def operator(
    start_operator: Callable[..., OperatorProcess], agent_rbac: str, store_url: str
) -> OperatorProcess:
    """An operator whose Jobs may publish their results, recording runs in ``store_url``."""
    return start_operator(
        MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac, MLMS_OPERATOR_STORE_URL=store_url
    )


# -------------------------------------------------------------------------------- helpers


def model_entry(name: str, models: Path, **extra: Any) -> dict[str, Any]:
    """A ``spec.matrix.models`` entry for the digits CNN, with its TorchScript and SavedModel
    exports for the frameworks that cannot load ONNX."""
    return {
        "name": name,
        "model": {
            "name": "digits",
            "uri": f"file://{models / 'digits.onnx'}",
            "format": "onnx",
            "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
            "outputs": [{"name": "logits", "shape": [-1, 10]}],
            **extra,
        },
        "exports": [
            {"format": "torchscript", "uri": f"file://{models / 'digits.torchscript.pt'}"},
            {"format": "savedmodel", "uri": f"file://{models / 'digits_savedmodel'}"},
        ],
    }


def ended(child: dict[str, Any]) -> bool:
    st = child.get("status") or {}
    current = st.get("observedGeneration") == child["metadata"].get("generation")
    return current and st.get("phase") in ENDED


def sweep_events(
    kube: Kube, namespace: str, name: str, *waiting_for: str, timeout: float = 15.0
) -> list[dict[str, Any]]:
    """The sweep's events, once every reason in ``waiting_for`` is among them: the operator
    posts an event just after the status patch a test may already have seen."""
    found: list[dict[str, Any]] = []

    def present() -> bool:
        found[:] = [
            e
            for e in kube.list(f"/api/v1/namespaces/{namespace}/events")
            if e["involvedObject"].get("kind") == "EvaluationSweep"
            and e["involvedObject"].get("name") == name
        ]
        return set(waiting_for) <= {e["reason"] for e in found}

    wait_for(f"events {', '.join(waiting_for)} on {namespace}/{name}", present, timeout)
    return found


class ActiveWatch:
    """Counts the sweep's active children (created, not Succeeded/Failed) every 0.2 s, in a
    thread, for as long as the test runs: the peak, and every name ever seen."""

    def __init__(self, kube: Kube, namespace: str, sweep: str) -> None:
        self.kube, self.namespace, self.sweep = kube, namespace, sweep
        self.peak = 0
        self.samples = 0
        self.seen: set[str] = set()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items = children(self.kube, self.namespace, self.sweep)
            except (KubeError, OSError) as exc:  # pragma: no cover - reported by the test
                self.errors.append(exc)
                return
            self.seen.update(c["metadata"]["name"] for c in items)
            self.peak = max(self.peak, sum(1 for c in items if not ended(c)))
            self.samples += 1
            time.sleep(0.2)

    def __enter__(self) -> ActiveWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def record_states(kube: Kube, namespace: str, names_: list[str]) -> list[str | None]:
    out = []
    for name in names_:
        ev = kube.get(evaluation_path(namespace, name))
        out.append(((ev.get("status") or {}).get("record") or {}).get("state"))
    return out


# ---------------------------------------------------------------------------------- tests


def test_a_sweep_runs_every_combination_within_its_parallelism_then_goes_with_its_children(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    operator: OperatorProcess,
    digits_onnx: Path,
    store_url: str,
) -> None:
    models = digits_onnx.parent
    frameworks = ["onnxruntime", "pytorch", "tensorflow"]
    manifest = sweep_manifest(
        "grid",
        {"models": [model_entry("cnn", models)], "frameworks": frameworks, "batchSizes": [1, 8]},
        parallelism=2,
    )
    expected = [f"grid-cnn-{f}-b{b}" for f in frameworks for b in (1, 8)]
    started = time.monotonic()
    with ActiveWatch(kube, namespace, "grid") as watch:
        apply(cluster, namespace, manifest)
        st = wait_sweep(kube, namespace, "grid", lambda s: s.get("phase") in ENDED, "ended")
    elapsed = time.monotonic() - started
    print(f"\nsweep grid: 6 children in {elapsed:.0f}s, peak active {watch.peak}, "
          f"{watch.samples} samples")  # fmt: skip
    assert not watch.errors, watch.errors
    assert 1 <= watch.peak <= 2, watch.peak
    assert watch.samples > 20
    assert st["phase"] == "Succeeded", st.get("message")
    assert (st["total"], st["created"], st["succeeded"], st["failed"], st["active"]) == (
        6,
        6,
        6,
        0,
        0,
    )
    assert st["progress"] == "6/6 Succeeded"
    assert st["observedGeneration"] == 1

    sweep = get_sweep(kube, namespace, "grid")
    uid = sweep["metadata"]["uid"]
    assert not sweep["metadata"].get("finalizers")
    found = {c["metadata"]["name"]: c for c in children(kube, namespace, "grid")}
    assert sorted(found) == sorted(expected) and watch.seen == set(expected)
    rows = {r["name"]: r for r in st["children"]}
    assert [r["name"] for r in st["children"]] == expected
    for name in expected:
        child = found[name]
        assert child["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "mlmodelscope.io/v1alpha1",
                "kind": "EvaluationSweep",
                "name": "grid",
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert child["metadata"]["labels"][LABEL_SWEEP] == "grid"
        cst = child["status"]
        assert cst["phase"] == "Succeeded", cst.get("message")
        row = rows[name]
        framework, batch = name.split("-")[2], int(name.rsplit("-b", 1)[1])
        assert (row["framework"], row["batchSize"], row["model"]) == (framework, batch, "cnn")
        assert cst["results"][0]["batchSize"] == batch
        assert row["phase"] == "Succeeded" and row["runId"] == cst["runId"]
        assert row["p50Ms"] == cst["summary"]["p50Ms"] > 0
        assert row["p99Ms"] == cst["results"][0]["latencyMs"]["p99"] >= row["p50Ms"]
        assert row["throughput"] == cst["summary"]["throughput"] > 0
        assert row["top1"] == cst["summary"]["top1"] > 0.85

    table = cluster.kubectl("get", "evaluationsweep", "grid", "-n", namespace).stdout
    assert "6/6 Succeeded" in table and "Succeeded" in table, table
    reasons = [e["reason"] for e in sweep_events(kube, namespace, "grid", "Succeeded")]
    assert reasons.count("ChildCreated") == 6 and "Succeeded" in reasons, reasons

    # Every child's run is in the store, tagged with the sweep.
    wait_for(
        "every child's run to be recorded",
        lambda: record_states(kube, namespace, expected) == ["Recorded"] * 6,
        60,
    )
    from mlmodelscope.store import open_store

    with open_store(store_url) as store:
        runs = store.list_runs(namespace=namespace)
        assert sorted(r.evaluation or "" for r in runs) == sorted(expected)
        assert all((r.labels or {}).get(LABEL_SWEEP) == "grid" for r in runs)
        assert {r.run_id for r in runs} == {rows[n]["runId"] for n in expected}

    # Deleting the sweep deletes its children (the garbage collector), and theirs.
    cluster.kubectl("delete", "evaluationsweep", "grid", "-n", namespace, "--wait=false")
    wait_for(
        "the children to be garbage-collected", lambda: not children(kube, namespace, "grid"), 90
    )
    for name in expected:
        for path in (
            job_path(namespace, names.job_name(name, 1)),
            configmap_path(namespace, f"{name}-spec"),
        ):
            wait_for(f"{path} to be garbage-collected", lambda p=path: gone(kube, p), 60)


def test_failure_policy_stop_stops_after_a_failed_child_and_continue_runs_the_rest(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    models = digits_onnx.parent
    matrix = {
        "models": [
            model_entry("first", models),
            model_entry("corrupt", models, sha256=WRONG_SHA256),  # the digest cannot match
            model_entry("third", models),
        ],
        "frameworks": ["onnxruntime"],
    }
    manifest = sweep_manifest("halt", matrix, parallelism=1, failurePolicy="Stop")
    apply(cluster, namespace, manifest)
    st = wait_sweep(
        kube,
        namespace,
        "halt",
        lambda s: s.get("phase") == "Stopped" and s.get("active") == 0,
        "Stopped with nothing running",
    )
    assert (st["created"], st["succeeded"], st["failed"], st["total"]) == (2, 1, 1, 3)
    rows = {r["name"]: r for r in st["children"]}
    assert rows["halt-corrupt-onnxruntime"]["phase"] == "Failed"
    assert "sha256" in rows["halt-corrupt-onnxruntime"]["message"]
    assert "phase" not in rows["halt-third-onnxruntime"]
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "FailurePolicyStop")
    time.sleep(3)  # a child event or a reconcile in flight would create the third by now
    assert sorted(c["metadata"]["name"] for c in children(kube, namespace, "halt")) == [
        "halt-corrupt-onnxruntime",
        "halt-first-onnxruntime",
    ]
    reasons = [e["reason"] for e in sweep_events(kube, namespace, "halt", "Stopped")]
    assert "Stopped" in reasons and reasons.count("ChildCreated") == 2

    # Continue: the same sweep goes on, runs the third child and ends Failed.
    cluster.kubectl(
        "patch", "evaluationsweep", "halt", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"failurePolicy": "Continue"}}),
    )  # fmt: skip
    st = wait_sweep(
        kube, namespace, "halt", lambda s: s.get("phase") == "Failed", "Failed after all ran"
    )
    assert (st["created"], st["succeeded"], st["failed"], st["active"]) == (3, 2, 1, 0)
    assert st["progress"] == "2/3 Succeeded" and st["observedGeneration"] == 2
    assert "halt-corrupt-onnxruntime" in st["message"]
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "ChildrenFailed")
    assert len(children(kube, namespace, "halt")) == 3


def test_a_suspended_sweep_creates_nothing_until_resumed(
    cluster: Cluster, namespace: str, kube: Kube, operator: OperatorProcess, digits_onnx: Path
) -> None:
    matrix = {
        "models": [model_entry("cnn", digits_onnx.parent)],
        "frameworks": ["onnxruntime"],
        "batchSizes": [1, 4],
    }
    apply(cluster, namespace, sweep_manifest("later", matrix, parallelism=2, suspend=True))
    st = wait_sweep(kube, namespace, "later", lambda s: s.get("phase") == "Suspended", "Suspended")
    assert (st["created"], st["active"], st["total"]) == (0, 0, 2)
    time.sleep(3)
    assert children(kube, namespace, "later") == []
    table = cluster.kubectl("get", "evaluationsweep", "later", "-n", namespace).stdout
    assert "Suspended" in table and "0/2 Succeeded" in table, table

    cluster.kubectl(
        "patch", "evaluationsweep", "later", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"suspend": False}}),
    )  # fmt: skip
    st = wait_sweep(kube, namespace, "later", lambda s: s.get("phase") in ENDED, "ended")
    assert st["phase"] == "Succeeded" and st["progress"] == "2/2 Succeeded", st.get("message")
    suspended = next(c for c in st["conditions"] if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", "Resumed")
    reasons = [e["reason"] for e in sweep_events(kube, namespace, "later", "Suspended", "Resumed")]
    assert "Suspended" in reasons and "Resumed" in reasons


def test_the_pitfalls_sweep_shows_the_accuracy_drop_in_mlms_compare(
    cluster: Cluster,
    namespace: str,
    kube: Kube,
    operator: OperatorProcess,
    digits_onnx: Path,
    store_url: str,
) -> None:
    """examples/sweeps/digits-pitfalls.yaml as shipped, but with the models read from this
    machine (the example's claim lives in `default`) and the children on the exec node."""
    text = PITFALLS.read_text()
    text = text.replace("pvc://mlmodelscope-examples/", f"file://{digits_onnx.parent}/")
    manifest = yaml.safe_load(text)
    manifest["spec"]["template"]["hardware"] = {"nodeSelector": EXEC_CPU}
    name = manifest["metadata"]["name"]
    variants = [m["name"] for m in manifest["spec"]["matrix"]["models"]]
    assert "correct" in variants and len(variants) >= 3
    apply(cluster, namespace, manifest)
    st = wait_sweep(kube, namespace, name, lambda s: s.get("phase") in ENDED, "ended")
    assert st["phase"] == "Succeeded", st.get("message")
    top1 = {r["model"]: r["top1"] for r in st["children"]}
    run_ids = {r["model"]: r["runId"] for r in st["children"]}
    assert top1["correct"] > 0.9, top1
    child_names = [r["name"] for r in st["children"]]
    wait_for(
        "the runs to be recorded",
        lambda: record_states(kube, namespace, child_names) == ["Recorded"] * len(child_names),
        60,
    )

    from typer.testing import CliRunner

    from mlmodelscope.cli import app

    ordered = [run_ids["correct"]] + [run_ids[v] for v in variants if v != "correct"]
    runner = CliRunner()
    answer = runner.invoke(app, ["compare", *ordered, "--store", store_url, "--json"])
    assert answer.exit_code == 0, answer.output
    comparison = json.loads(answer.output)
    label_of = {run["run_id"]: run["label"] for run in comparison["runs"]}
    assert sorted(label_of) == sorted(ordered)
    by_label = {row["run"]: row for row in comparison["rows"]}
    compared = {run_id: by_label[label_of[run_id]] for run_id in ordered}
    assert compared[run_ids["correct"]]["top1"] == pytest.approx(top1["correct"], rel=1e-5)
    worst = min((v for v in variants if v != "correct"), key=lambda v: top1[v])
    row = compared[run_ids[worst]]
    assert row["top1"] < top1["correct"] - 0.3, (worst, top1)
    assert row["top1_rel"] < -0.3, row
    # The spec differences name what changed: the preprocessing.
    assert any(re.match(r"spec\.preprocessing", d["key"]) for d in comparison["spec"])
    table = runner.invoke(app, ["compare", *ordered, "--store", store_url])
    assert table.exit_code == 0, table.output
    print(f"\n{name}: top-1 by variant {top1}\n{table.output}")
