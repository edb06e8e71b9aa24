"""Launching into the real control plane (issue 32): `mlms serve --launch-namespace NS` with
the chart's server RBAC and nothing else.

The chart's server ServiceAccount, Role and RoleBinding are rendered by `helm template`
(``server.launch.namespace`` = the test's namespace, the release in a namespace of its own)
and applied as rendered. The API server's authorizer, asked with SubjectAccessReviews, must
allow that ServiceAccount exactly the ``SERVER`` grants of tests/packaging/rbac_table.py:
every verb on every resource of the table, in NS, the server's own namespace, default,
kube-system, all namespaces at once and cluster-wide.

Then `mlms serve` runs as a process whose only credential is a kubeconfig holding a
TokenRequest token of that ServiceAccount, with the example catalog. A launch of the catalog's
digits CNN in ONNX Runtime creates its ModelEvaluation in NS; a ValidatingAdmissionPolicy that
admits a ModelEvaluation create in NS only from that ServiceAccount's username proves who
created it (the dev cluster keeps no audit log, and ``managedFields`` names the client's user
agent, not the user). The operator runs it for real on the CPU exec node (the launch form sets
no hardware: every other node is tainted), the Model and the claim its ``pvc://`` URI names
being in NS too; the launch, read back through the server's API, must reach ``succeeded``
with the evaluation's run id; then its Events (of the Job at least) and its agent's log are
read through the server's API, as that account.

A sweep launch (``kind: sweep``) creates its EvaluationSweep in NS, admitted by the same policy
(which refuses every EvaluationSweep create there but the server account's, and lets the
operator create a sweep's children: ModelEvaluations labelled and owned by an EvaluationSweep);
the operator creates its two children and runs them, and the server's watch brings each
child's uid, state and run id into its store, read back through the server's API. A second
sweep, cancelled through the server's API once its first child exists, is deleted as that
account and the garbage collector takes its children.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cluster_evaluations import examples_claim
from operator_process import OperatorProcess

from mlmodelscope.contract.kube import Kube, KubeError, evaluation_path, sweep_path
from mlmodelscope.devcluster import nodes
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from mlmodelscope.devtools import helm as helm_tool
from mlmodelscope.devtools.telemetry_servers import free_port
from mlmodelscope.server.launch_cluster import LAUNCH_LABEL
from mlmodelscope.server.launch_queue import FINAL
from mlmodelscope.spec.sweep import LABEL_SWEEP

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "tests" / "packaging"))  # the RBAC table lives with the chart's tests
from rbac_table import (  # noqa: E402
    EVALUATIONS,
    EVENTS,
    POD_LOGS,
    PODS,
    SERVER,
    SWEEPS,
    Install,
    Pair,
    Place,
    checked_pairs,
    expected,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(480)]

CHART = REPO / "helm" / "mlmodelscope"
CATALOG = REPO / "examples" / "catalog"
RELEASE = "mlms"
SERVER_SA = f"{RELEASE}-mlmodelscope-server"
LAUNCHES = Install(launches=True)
CLAIM = "mlmodelscope-examples"
"""The claim the catalog's digits-cnn names (``pvc://mlmodelscope-examples/digits.onnx``)."""
READ_TOKEN = "launch-read-token"
WRITE_TOKEN = "launch-write-token"
LAUNCH = {
    "model": "digits-cnn",
    "frameworks": ["onnxruntime"],
    "scenario": "SingleStream",
    "batch_sizes": [1],
    "scenario_settings": {
        "warmup": 2,
        "minQueryCount": 20,
        "minDuration": "20ms",
        "stability": {"maxWindows": 2},
    },
}
SWEEP_LAUNCH = {**LAUNCH, "kind": "sweep", "name": "launched", "batch_sizes": [1, 8]}
"""The digits CNN in ONNX Runtime at two batch sizes: an EvaluationSweep of two children."""
SWEEP_CHILDREN = ["launched-digits-cnn-onnxruntime-b1", "launched-digits-cnn-onnxruntime-b8"]
CPU_EXEC_NODE = next(n.name for n in nodes.exec_nodes() if n.pool.name == "cpu")
SA_GROUPS = ("system:serviceaccounts", "system:authenticated")


@dataclass(frozen=True)
class ServerAccount:
    """The chart's server ServiceAccount: in ``home`` (the release namespace), launching
    into ``launches``."""

    home: str
    launches: str
    name: str = SERVER_SA

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.home}:{self.name}"


def render_server_rbac(home: str, launches: str) -> list[dict[str, Any]]:
    """The chart's server RBAC (templates/server-rbac.yaml), as `helm template` renders it for
    a release in ``home`` launching into ``launches``."""
    sets = [
        "server.enabled=true",
        "server.auth.existingSecret=results-tokens",
        "store.url=postgresql://mlmodelscope:unused@db.invalid:5432/mlmodelscope",
        f"server.launch.namespace={launches}",
    ]
    args = ["template", RELEASE, str(CHART), "--namespace", home]
    args += [arg for item in sets for arg in ("--set", item)]
    args += ["--show-only", "templates/server-rbac.yaml"]
    if shutil.which("go") is None and not helm_tool.is_built():
        pytest.skip(f"building helm {helm_tool.HELM_VERSION} needs Go >= 1.26 (or a built cache)")
    proc = subprocess.run(
        [str(helm_tool.ensure_helm()), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


@pytest.fixture
def server_account(cluster: Cluster, namespace: str) -> Iterator[ServerAccount]:
    """The chart's server RBAC applied: its ServiceAccount in a namespace of its own, its Role
    and RoleBinding in the test's namespace, its ClusterRole and ClusterRoleBinding for the
    Nodes (deleted after the test: no namespace takes them)."""
    home = f"{namespace[:55]}-home"
    manifests = render_server_rbac(home, namespace)
    kinds = sorted(m["kind"] for m in manifests)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"]
    cluster_wide = [m for m in manifests if m["kind"].startswith("Cluster")]
    cluster.kubectl("create", "namespace", home)
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(manifests))
        yield ServerAccount(home, namespace)
    finally:
        for manifest in cluster_wide:
            kind, name = manifest["kind"].lower(), manifest["metadata"]["name"]
            cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", home, "--wait=false", check=False)


def places(account: ServerAccount) -> list[tuple[Place, str | None]]:
    return [
        (Place.RUNS, account.launches),
        *((Place.OTHER, ns) for ns in (account.home, "default", "kube-system")),
        (Place.ALL, None),
        (Place.CLUSTER, None),
    ]


def allowed(kube: Kube, account: ServerAccount, namespace: str | None, pair: Pair) -> bool:
    """The authorizer's answer (a SubjectAccessReview) for the account doing ``pair``
    (resource, verb) in ``namespace`` (None: all namespaces, or cluster scope)."""
    resource, verb = pair
    attributes = {"group": resource.group, "resource": resource.resource, "verb": verb}
    if resource.subresource:
        attributes["subresource"] = resource.subresource
    if namespace is not None:
        attributes["namespace"] = namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": account.username,
            "groups": [*SA_GROUPS, f"system:serviceaccounts:{account.home}"],
            "resourceAttributes": attributes,
        },
    }
    answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


def test_the_server_account_may_do_exactly_the_server_table(
    kube: Kube, server_account: ServerAccount
) -> None:
    """Every verb on every resource of the table, at every place: allowed exactly when SERVER
    grants it (create, get, list, watch and delete on modelevaluations in NS, create, list and
    delete on evaluationsweeps, list on events and pods, get on pods/log; nothing else)."""
    runs = expected(SERVER, LAUNCHES, Place.RUNS)
    verbs = ("create", "get", "list", "watch", "delete")
    sweeps = {(SWEEPS, v) for v in ("create", "list", "delete")}
    watching = {(EVENTS, "list"), (PODS, "list"), (POD_LOGS, "get")}
    assert runs == {(EVALUATIONS, v) for v in verbs} | sweeps | watching  # checked below
    wrong = []
    asked = 0
    for place, namespace in places(server_account):
        want = expected(SERVER, LAUNCHES, place)
        for pair in checked_pairs(place):
            asked += 1
            if allowed(kube, server_account, namespace, pair) != (pair in want):
                state = "denied" if pair in want else "ALLOWED"
                wrong.append((state, namespace or place.name, str(pair[0]), pair[1]))
    assert not wrong, wrong
    assert asked > 500


def request_token(kube: Kube, account: ServerAccount) -> str:
    """A token of the account from the TokenRequest API (one hour)."""
    path = f"/api/v1/namespaces/{account.home}/serviceaccounts/{account.name}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}}  # fmt: skip
    return str(kube.create(path, body)["status"]["token"])


def write_kubeconfig(cluster: Cluster, token: str, path: Path) -> Path:
    """The dev cluster's kubeconfig with the admin's token replaced by ``token``."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": SERVER_SA, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = SERVER_SA
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


SWEEP_CHILD_CEL = (
    "request.resource.resource == 'modelevaluations' && has(object.metadata.labels) && "
    f"'{LABEL_SWEEP}' in object.metadata.labels && has(object.metadata.ownerReferences) && "
    "object.metadata.ownerReferences.exists(r, r.kind == 'EvaluationSweep')"
)
"""A sweep's child, which the operator (not the server) creates."""


def creator_policy(account: ServerAccount) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) that refuses every ModelEvaluation and
    EvaluationSweep create in the launch namespace whose requester is not the server's
    ServiceAccount, but a sweep's child (:data:`SWEEP_CHILD_CEL`)."""
    name = f"launch-creator-{account.launches}"
    in_namespace = {"matchLabels": {"kubernetes.io/metadata.name": account.launches}}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": in_namespace,
                    "resourceRules": [
                        {
                            "apiGroups": ["mlmodelscope.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE"],
                            "resources": ["modelevaluations", "evaluationsweeps"],
                        }
                    ],
                },
                "validations": [
                    {
                        "expression": f"request.userInfo.username == '{account.username}' || "
                        f"({SWEEP_CHILD_CEL})",
                        "messageExpression": "'created by ' + request.userInfo.username",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": in_namespace},
            },
        },
    ]


@pytest.fixture
def only_the_server_creates(
    cluster: Cluster, crds: None, server_account: ServerAccount
) -> Iterator[None]:
    """:func:`creator_policy` in force: an admin's dry-run create in NS of a ModelEvaluation,
    and then of an EvaluationSweep, is refused by it."""
    policy = creator_policy(server_account)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(policy))
    probe = {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": "probe", "namespace": server_account.launches},
        "spec": {
            "modelRef": {"name": "digits-cnn"},
            "framework": {"name": "onnxruntime"},
            "dataset": {"type": "digits"},
        },
    }

    def refused(document: dict[str, Any]) -> bool:
        args = ("create", "--dry-run=server", "-f", "-")
        proc = cluster.kubectl(*args, input=json.dumps(document), check=False)
        if proc.returncode == 0:  # the policy is not in force yet
            return False
        assert policy[0]["metadata"]["name"] in proc.stderr, proc.stderr
        assert "denied request: created by admin" in proc.stderr, proc.stderr
        return True

    sweep = {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "EvaluationSweep",
        "metadata": {"name": "probe", "namespace": server_account.launches},
        "spec": {
            "matrix": {"models": [{"name": "digits", "modelRef": {"name": "digits-cnn"}}],
                       "frameworks": ["onnxruntime"]},
            "template": {"dataset": {"type": "digits"}},
        },
    }  # fmt: skip
    try:
        wait_for("the creator policy to refuse an admin's create", lambda: refused(probe), 30)
        assert refused(sweep), "an admin's EvaluationSweep create was admitted"
        yield
    finally:
        for manifest in reversed(policy):
            cluster.kubectl("delete", manifest["kind"], manifest["metadata"]["name"], check=False)


@pytest.fixture
def examples_in_namespace(cluster: Cluster, namespace: str) -> Iterator[None]:
    """What a launch of the catalog's digits-cnn needs in NS: the Model (the operator resolves
    modelRef there) and the claim its URI names, bound to the dev cluster's examples folder."""
    volume = f"{namespace}-examples"
    manifests = examples_claim(cluster, namespace, CLAIM, volume)
    try:
        for manifest in manifests:
            cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        cluster.kubectl("apply", "-n", namespace, "-f", str(CATALOG / "digits-cnn.yaml"))

        def bound() -> bool:
            jsonpath = "jsonpath={.status.phase}"
            proc = cluster.kubectl("get", "pvc", CLAIM, "-n", namespace, "-o", jsonpath)
            return proc.stdout == "Bound"

        wait_for(f"claim {CLAIM} to be bound", bound, 60)
        yield
    finally:
        cluster.kubectl("delete", "pv", volume, "--wait=false", check=False)


@pytest.fixture
def operator(start_operator: Callable[..., OperatorProcess], agent_rbac: str) -> OperatorProcess:
    return start_operator(MLMS_OPERATOR_JOB_SERVICE_ACCOUNT=agent_rbac)


@dataclass(frozen=True)
class Served:
    """A running `mlms serve --launch-namespace` and its log."""

    url: str
    log: Path
    kubeconfig: Path

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text().splitlines()[-lines:])


@pytest.fixture
def served(
    cluster: Cluster, kube: Kube, server_account: ServerAccount, tmp_path: Path
) -> Iterator[Served]:
    """`python -m mlmodelscope serve --launch-namespace NS` over a SQLite store, the example
    catalog, a read and a write token, and $KUBECONFIG holding only the server account's token
    (no pod environment: the kubeconfig is its one credential); stopped by its PID."""
    kubeconfig = write_kubeconfig(cluster, request_token(kube, server_account), tmp_path / "kc")
    tokens = {"read": READ_TOKEN, "write": WRITE_TOKEN}
    for name, token in tokens.items():
        (tmp_path / name).write_text(token)
    port = free_port()
    command = [sys.executable, "-m", "mlmodelscope", "serve", "--port", str(port)]
    command += ["--store", f"sqlite:///{tmp_path / 'runs.db'}", "--catalog", str(CATALOG)]
    command += ["--read-token-file", str(tmp_path / "read")]
    command += ["--write-token-file", str(tmp_path / "write")]
    command += ["--launch-namespace", server_account.launches]
    dropped = ("MLMS_SERVE_", "KUBERNETES_SERVICE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env["KUBECONFIG"] = str(kubeconfig)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Served(f"http://127.0.0.1:{port}", log, kubeconfig)

    def ready() -> bool:
        assert process.poll() is None, f"mlms serve exited:\n{server.tail()}"
        try:
            return httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for("mlms serve to be ready", ready, 60)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        sys.stderr.write(f"--- mlms serve log\n{server.tail()}\n")


def test_a_launch_is_created_by_the_server_account_and_runs_on_the_exec_node(
    namespace: str,
    kube: Kube,
    server_account: ServerAccount,
    only_the_server_creates: None,
    examples_in_namespace: None,
    operator: OperatorProcess,
    served: Served,
) -> None:
    """The server's kubeconfig is the account (a SelfSubjectReview says so, and it may not read
    Secrets); its launch is created in NS under the creator policy, runs on the CPU exec node
    and the launch ends ``succeeded`` with the evaluation's run id, followed by the server's
    watch (the listing read reads only the store)."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(served.kubeconfig))  # type: ignore[no-untyped-call]
    as_server = Kube(client)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    who = as_server.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
    assert who["status"]["userInfo"]["username"] == server_account.username
    with pytest.raises(KubeError) as refused:
        as_server.list(f"/api/v1/namespaces/{namespace}/secrets")
    assert refused.value.status == 403
    with httpx.Client(base_url=served.url, timeout=30) as http:
        reads = {"Authorization": f"Bearer {READ_TOKEN}"}
        writes = {"Authorization": f"Bearer {WRITE_TOKEN}"}
        answer = http.post("/api/v1/launches", json=LAUNCH, headers=writes)
        assert answer.status_code == 202, answer.text
        [item] = answer.json()["launches"]
        assert item["namespace"] == namespace

        # Created in NS, admitted by the creator policy: by the server's ServiceAccount.
        created = kube.get(evaluation_path(namespace, item["evaluation"]))
        assert created["metadata"]["uid"] == item["resource_uid"]
        assert created["metadata"]["labels"][LAUNCH_LABEL] == item["launch_id"]

        states: list[str] = []

        def ended() -> dict[str, Any] | None:
            # The listing reads the store only: the states come from the server's watch.
            got = http.get("/api/v1/launches", headers=reads)
            got.raise_for_status()
            [launch] = [i for i in got.json()["items"] if i["launch_id"] == item["launch_id"]]
            if not states or states[-1] != launch["state"]:
                states.append(launch["state"])
            return launch if launch["state"] in FINAL else None

        def detail() -> str:
            return f"{operator.tail(30)}\n--- mlms serve\n{served.tail(20)}"

        launch = wait_for("the launch to end", ended, 300, detail, interval=1)
        # Watched as the server's account: the Events of the evaluation, its Job and pod,
        # and the agent's log (its lines, or why the kubelet gave none: never an error).
        base = f"/api/v1/launches/{item['launch_id']}"
        events = http.get(f"{base}/events", headers=reads)
        log = http.get(f"{base}/log", params={"tail": 50}, headers=reads)
    evaluation = kube.get(evaluation_path(namespace, item["evaluation"]))
    status = evaluation.get("status") or {}
    assert launch["state"] == "succeeded", (launch, status.get("message"), states)
    assert "following launches in the cluster" not in served.tail(400)  # the watch held
    assert status["phase"] == "Succeeded"
    assert launch["run_id"] == status["runId"]
    assert status["stack"]["node"] == CPU_EXEC_NODE
    assert status["summary"]["top1"] > 0.9
    assert events.status_code == 200 and log.status_code == 200, (events.text, log.text)
    watched, tail = events.json(), log.json()
    assert watched["job"] == status["jobName"] and watched["pods"], watched
    about = {(e["kind"], e["name"]) for e in watched["items"]}
    assert ("Job", status["jobName"]) in about, watched  # the Job controller's SuccessfulCreate
    assert "cannot read" not in (watched["reason"] or ""), watched  # the Role allows it
    assert tail["pod"] == watched["pods"][-1], tail
    assert tail["lines"] or tail["reason"], tail
    assert "HTTP 403" not in (tail["reason"] or ""), tail


@pytest.mark.timeout(780)
def test_a_sweep_launch_is_created_by_the_server_account_and_its_children_reach_the_store(
    namespace: str,
    kube: Kube,
    server_account: ServerAccount,
    only_the_server_creates: None,
    examples_in_namespace: None,
    operator: OperatorProcess,
    served: Served,
) -> None:
    """A sweep launch creates its EvaluationSweep in NS under the creator policy (so as the
    server's account); the operator creates its two children, one at a time, and runs them on
    the CPU exec node; each child's uid, state and run id reach the server's store through its
    watch (the sweep's read reads only the store), and the sweep ends ``succeeded``. A second
    sweep, cancelled through the API once its first child exists, is deleted (as the server's
    account) and its children go with it."""
    with httpx.Client(base_url=served.url, timeout=30) as http:
        reads = {"Authorization": f"Bearer {READ_TOKEN}"}
        writes = {"Authorization": f"Bearer {WRITE_TOKEN}"}
        answer = http.post("/api/v1/launches", json=SWEEP_LAUNCH, headers=writes)
        assert answer.status_code == 202, answer.text
        sweep = answer.json()["sweep"]
        assert sweep["namespace"] == namespace
        assert [c["evaluation"] for c in sweep["children"]] == SWEEP_CHILDREN

        # Created in NS, admitted by the creator policy: by the server's ServiceAccount.
        created = kube.get(sweep_path(namespace, "launched"))
        assert created["metadata"]["uid"] == sweep["resource_uid"]
        assert created["metadata"]["labels"][LAUNCH_LABEL] == sweep["sweep_id"]

        def read(location: str) -> dict[str, Any]:
            got = http.get(location, headers=reads)
            got.raise_for_status()
            found: dict[str, Any] = got.json()
            return found

        counts: list[dict[str, int]] = []

        def ended() -> dict[str, Any] | None:
            found = read(sweep["location"])
            if not counts or counts[-1] != found["counts"]:
                counts.append(found["counts"])
            return found if found["state"] in FINAL else None

        def detail() -> str:
            return f"{operator.tail(30)}\n--- mlms serve\n{served.tail(20)}"

        done = wait_for("the sweep to end", ended, 600, detail, interval=2)

        stopped = http.post(
            "/api/v1/launches", json={**SWEEP_LAUNCH, "name": "stopped"}, headers=writes
        )
        assert stopped.status_code == 202, stopped.text
        location = stopped.json()["sweep"]["location"]

        def first_child_found() -> bool:
            return read(location)["children"][0]["resource_uid"] is not None

        wait_for("the second sweep's first child in the store", first_child_found, 120, detail)
        cancelled = http.post(f"{location}/cancel", headers=writes)
    children = kube.list(evaluation_path(namespace), f"{LABEL_SWEEP}=launched")
    by_name = {c["metadata"]["name"]: c for c in children}
    assert sorted(by_name) == SWEEP_CHILDREN
    assert done["state"] == "succeeded", (done, counts)
    for child in done["children"]:
        obj = by_name[child["evaluation"]]
        status = obj.get("status") or {}
        assert child["resource_uid"] == obj["metadata"]["uid"]
        assert [r["uid"] for r in obj["metadata"]["ownerReferences"]] == [sweep["resource_uid"]]
        assert status["phase"] == "Succeeded" and status["stack"]["node"] == CPU_EXEC_NODE
        assert child["run_id"] == status["runId"]
    assert "following launches in the cluster" not in served.tail(400)  # the watch held

    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["counts"] == {"cancelled": 2}
    assert kube.get_or_none(sweep_path(namespace, "stopped")) is None  # deleted, as the server

    def collected() -> bool:
        return not kube.list(evaluation_path(namespace), f"{LABEL_SWEEP}=stopped")

    wait_for("the garbage collector to delete the cancelled sweep's children", collected, 120)
