"""The Helm chart installed into the real control plane (mlmodelscope.devcluster).

One namespaced release (Kopf peering on) runs the operator as a pod on the CPU exec node (the
exec kubelet runs its container command, `mlms operator`, for real) in a namespace that enforces
Pod Security `restricted`; a ModelEvaluation applied with kubectl runs there and must reach
Succeeded, its pod running as the evaluation's own ServiceAccount, with no request of the
operator refused. The API server's authorizer then answers, for every verb on every resource of
tests/packaging/rbac_table.py, what each ServiceAccount (the evaluation's own included) may do
in its namespace, in kube-system, in default and cluster-wide, and the answers must be exactly
the table's. A second, cluster-wide release (zero replicas, so no operator acts on other tests'
namespaces; a results store, peering and the shared evaluation ServiceAccount configured) is
checked the same way.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, render
from rbac_table import (
    AGENT,
    CONFIGMAPS,
    EVALUATION_AGENT,
    OPERATOR,
    VERBS,
    Grant,
    Install,
    Place,
    Resource,
    checked_pairs,
    expected,
    named,
)

from mlmodelscope.contract.wire import RESULT_KEY, SUMMARY_KEY
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

EXEC_CPU = {"mlmodelscope.io/simulation": "exec", "mlmodelscope.io/pool": "cpu"}
NAMESPACED_RELEASE = Install(namespaced=True, peering=True)
"""The `release` fixture's install, as the RBAC table sees it."""
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Release:
    cluster: Cluster
    helm: Path
    name: str
    namespace: str
    install_output: str
    health_port: int

    @property
    def fullname(self) -> str:
        return f"{self.name}-mlmodelscope"

    @property
    def operator_sa(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.fullname}-operator"

    @property
    def job_sa_name(self) -> str:
        return f"{self.fullname}-evaluation"

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.cluster.kubectl(*args, "-o", "json").stdout)

    def operator_restarts(self) -> int:
        """Restarts of the operator container: it crashed (bad settings, no credentials)."""
        pods = self.kubectl_json(
            "get", "pods", "-n", self.namespace, "-l", "app.kubernetes.io/component=operator"
        )["items"]
        statuses = [c for p in pods for c in (p.get("status") or {}).get("containerStatuses") or []]
        return sum(int(c.get("restartCount") or 0) for c in statuses)

    def check_operator(self) -> None:
        """Fail at once, with its log, when the operator is crash-looping."""
        if self.operator_restarts():
            pytest.fail(f"the operator container restarted:\n{self.operator_logs()}")

    def operator_logs(self, tail: int = 40) -> str:
        """The operator container's log (exec nodes keep it under the run dir)."""
        logs = sorted(self.cluster.pods_dir.glob(f"{self.namespace}_{self.fullname}-operator-*"))
        out = []
        for pod_dir in logs:
            for log in pod_dir.glob("*.log"):
                out.append(f"--- {log}\n" + "\n".join(log.read_text().splitlines()[-tail:]))
        return "\n".join(out) or "(no operator pod log)"


def helm_cmd(cluster: Cluster, helm: Path, *args: str) -> list[str]:
    return [str(helm), f"--kubeconfig={cluster.kubeconfig}", *args]


def create_namespace(cluster: Cluster, name: str, labels: dict[str, str]) -> None:
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    manifest["metadata"]["labels"] = labels
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    wait_for(
        f"ServiceAccount default in {name}",
        lambda: cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        30,
        lambda: "",
    )


def install(cluster: Cluster, helm: Path, name: str, namespace: str, values: dict[str, Any]) -> str:
    proc = subprocess.run(
        helm_cmd(cluster, helm, "install", name, str(CHART), "-n", namespace, "-f", "-"),
        input=yaml.safe_dump(values),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"helm install failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def uninstall(cluster: Cluster, helm: Path, name: str, namespace: str) -> None:
    subprocess.run(
        helm_cmd(cluster, helm, "uninstall", name, "--namespace", namespace, "--wait"),
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def release(cluster: Cluster, helm: Path) -> Iterator[Release]:
    """A namespaced release whose operator pod runs on the CPU exec node, in a namespace that
    enforces Pod Security `restricted`; evaluations run in the same namespace."""
    suffix = uuid.uuid4().hex[:5]
    name, namespace = f"pk{suffix}", f"packaging-{suffix}"
    create_namespace(cluster, namespace, RESTRICTED)
    port = free_port()
    values = {
        "watchNamespaces": [namespace],
        "nodeSelector": EXEC_CPU,
        # Exec pods share the host's loopback: a free port for Kopf's /healthz.
        "operator": {"healthPort": port},
        "metrics": {"enabled": False},
        # Kopf peering (a KopfPeering in the namespace): its keep-alives use the Role's
        # kopfpeerings get/list/watch/patch for real.
        "peering": {"enabled": True, "name": name},
    }
    try:
        output = install(cluster, helm, name, namespace, values)
        yield Release(cluster, helm, name, namespace, output, port)
    finally:
        uninstall(cluster, helm, name, namespace)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def evaluation(name: str, model: Path) -> dict[str, Any]:
    """A digits ModelEvaluation that runs for real on the CPU exec node in seconds."""
    return {
        "apiVersion": "mlmodelscope.io/v1alpha1",
        "kind": "ModelEvaluation",
        "metadata": {"name": name},
        "spec": {
            "model": {
                "name": "digits-cnn",
                "uri": f"file://{model}",
                "format": "onnx",
                "inputs": [{"name": "input", "shape": [-1, 1, 8, 8]}],
                "outputs": [{"name": "logits", "shape": [-1, 10]}],
            },
            "preprocessing": [
                {"scale": {"factor": 0.0625}},
                {"layout": {"from": "HWC", "to": "CHW"}},
            ],
            "framework": {"name": "onnxruntime", "intraOpThreads": 1},
            "dataset": {"type": "digits", "split": "test"},
            "scenario": {
                "batchSizes": [1],
                "warmup": 2,
                "minQueryCount": 20,
                "minDuration": "20ms",
                "stability": {"maxWindows": 2},
            },
            "hardware": {"nodeSelector": EXEC_CPU},
            "timeout": "5m",
        },
    }


# ------------------------------------------------------------------------------------ tests


def test_install_prints_the_next_step(release: Release) -> None:
    assert "NOTES:" in release.install_output
    assert "get meval -w" in release.install_output


def test_operator_pod_is_admitted_under_restricted_and_becomes_ready(release: Release) -> None:
    deployment = f"{release.fullname}-operator"

    def ready() -> bool:
        release.check_operator()
        status = release.kubectl_json("get", "deployment", deployment, "-n", release.namespace)
        return int(status.get("status", {}).get("readyReplicas") or 0) == 1

    wait_for(f"deployment {deployment} ready", ready, 120, release.operator_logs)
    time.sleep(3)  # Kopf needs a moment: a crash at login shows up as a restart
    release.check_operator()

    def healthy() -> bool:
        """What the probes ask: Kopf's /healthz answers 200 (exec pods share the loopback)."""
        release.check_operator()
        url = f"http://127.0.0.1:{release.health_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for("the operator's /healthz", healthy, 120, release.operator_logs)
    pods = release.kubectl_json(
        "get", "pods", "-n", release.namespace, "-l", "app.kubernetes.io/component=operator"
    )["items"]
    (pod,) = pods
    assert pod["spec"]["nodeName"] == "cpu-exec-0"
    assert pod["spec"]["containers"][0]["args"][0] == "operator"


def test_namespace_enforces_restricted(release: Release) -> None:
    """The admission plugin is really on: a privileged pod is refused in the same namespace."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]
        },
    }
    args = ("apply", "--dry-run=server", "-n", release.namespace, "-f", "-")
    proc = release.cluster.kubectl(*args, input=json.dumps(pod), check=False)
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr, proc.stderr


EXAMPLE = "digits-helm"


@pytest.fixture(scope="module")
def example(release: Release) -> dict[str, Any]:
    """The example evaluation, applied with kubectl and run to its end (once per module)."""
    from mlmodelscope.agent.digits import ensure_digits_models

    model = ensure_digits_models() / "digits.onnx"
    manifest = yaml.safe_dump(evaluation(EXAMPLE, model))
    release.cluster.kubectl("apply", "-n", release.namespace, "-f", "-", input=manifest)

    def phase() -> str | None:
        release.check_operator()
        body = release.kubectl_json("get", "meval", EXAMPLE, "-n", release.namespace)
        value = (body.get("status") or {}).get("phase")
        return value if value in ("Succeeded", "Failed") else None

    wait_for(f"{EXAMPLE} to finish", phase, 240, release.operator_logs)
    body: dict[str, Any] = release.kubectl_json("get", "meval", EXAMPLE, "-n", release.namespace)
    return body


def test_example_evaluation_succeeds_as_its_own_service_account(
    release: Release, example: dict[str, Any]
) -> None:
    name = EXAMPLE
    assert example["status"]["phase"] == "Succeeded", json.dumps(example["status"], indent=1)
    assert example["status"]["results"], "no results reached the status"
    pods = release.kubectl_json(
        "get", "pods", "-n", release.namespace, "-l", f"mlmodelscope.io/evaluation={name}"
    )["items"]
    assert pods, "the evaluation pod is gone"
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == f"{name}-agent"
    # The agent wrote its result through the API with `configmaps patch` on that one ConfigMap
    # alone (a refused patch would leave only the termination message's summary).
    results = release.kubectl_json("get", "configmap", f"{name}-results", "-n", release.namespace)
    assert set(results.get("data") or {}) >= {RESULT_KEY, SUMMARY_KEY}, results.get("data")


def test_the_operator_was_refused_nothing(release: Release, example: dict[str, Any]) -> None:
    """After a whole evaluation (and Kopf's start, discovery and peering keep-alives) the
    operator's log shows no request the API server refused: the Role is enough, also to create
    the evaluation's own Role and RoleBinding without `escalate` or `bind`."""
    started = f"mlmodelscope operator: namespaces {release.namespace}, peering {release.name}"
    wait_for(
        "the operator's start in its log",
        lambda: started in release.operator_logs(tail=100_000),
        120,
        release.operator_logs,
    )
    log = release.operator_logs(tail=100_000)
    refused = [
        line
        for line in log.splitlines()
        if "forbidden" in line.lower() or "HTTP 403" in line or "Not enough permissions" in line
    ]
    assert not refused, "\n".join(refused)


# ---------------------------------------------------------------------- RBAC, least privilege

SERVICE_ACCOUNT_GROUPS = ("system:serviceaccounts", "system:authenticated")
BLANK = re.compile(r"\s*")
Question = tuple[Place, str | None, Resource, str]


def review(
    sa_namespace: str, sa_name: str, question: Question, object_name: str = ""
) -> dict[str, Any]:
    """The SubjectAccessReview `kubectl auth can-i VERB RESOURCE[/NAME] --as=<the
    ServiceAccount>` makes (as a SelfSubjectAccessReview under impersonation, which adds these
    groups)."""
    _, namespace, resource, verb = question
    attributes = {"verb": verb, "group": resource.group, "resource": resource.resource}
    if object_name:
        attributes["name"] = object_name
    if resource.subresource:
        attributes["subresource"] = resource.subresource
    if namespace is not None:
        attributes["namespace"] = namespace
    groups = [*SERVICE_ACCOUNT_GROUPS, f"system:serviceaccounts:{sa_namespace}"]
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{sa_namespace}:{sa_name}",
            "groups": groups,
            "resourceAttributes": attributes,
        },
    }


def authorizer_answers(
    cluster: Cluster,
    sa_namespace: str,
    sa_name: str,
    questions: list[Question],
    object_names: list[str] | None = None,
) -> list[bool]:
    """The API server's answers to every question (about the object named alongside, if any),
    in one `kubectl create` of a List of SubjectAccessReviews (thousands of separate kubectl
    calls would take minutes)."""
    names = object_names or [""] * len(questions)
    items = [review(sa_namespace, sa_name, q, n) for q, n in zip(questions, names, strict=True)]
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    out = cluster.kubectl("create", "-o", "json", "-f", "-", input=body).stdout
    answered: list[dict[str, Any]] = []
    decoder, at = json.JSONDecoder(), BLANK.match(out).end()
    while at < len(out):  # one document per review, or a List of them
        document, end = decoder.raw_decode(out, at)
        answered += document["items"] if document.get("kind") == "List" else [document]
        at = BLANK.match(out, end).end()
    assert len(answered) == len(questions), out[-2000:]
    return [bool(a["status"].get("allowed")) for a in answered]


def can_i_served(cluster: Cluster, who: str, *args: str) -> bool | None:
    """`kubectl auth can-i`'s answer; None for a resource the cluster does not serve (Kueue's
    Workloads without Kueue): kubectl then cannot map the name to its API group and asks
    about a core resource of that name instead, so only the review above tells."""
    proc = cluster.kubectl("auth", "can-i", *args, f"--as={who}", check=False)
    if "doesn't have a resource type" in proc.stderr:
        return None
    answer = proc.stdout.strip()
    assert answer in ("yes", "no"), proc.stdout + proc.stderr
    return answer == "yes"


def can_i_args(question: Question) -> tuple[str, ...]:
    place, namespace, resource, verb = question
    args = [verb, resource.kubectl]
    if resource.subresource:
        args.append(f"--subresource={resource.subresource}")
    if namespace is not None:
        args += ["-n", namespace]
    elif place is Place.ALL:
        args.append("--all-namespaces")
    return tuple(args)


def check_rbac(
    cluster: Cluster,
    sa: tuple[str, str],
    grants: tuple[Grant, ...],
    install: Install,
    places: list[tuple[Place, str | None]],
) -> list[tuple[str, ...]]:
    """Every verb on every resource of the table at every place: what the authorizer allows
    must be exactly what the table grants. The pairs the table grants, and every verb on
    ConfigMaps, pods and Secrets in kube-system, are asked once more with `kubectl auth can-i`
    itself, which must agree. Returns what is wrong (empty when all is right)."""
    questions = [(p, ns, r, v) for p, ns in places for r, v in checked_pairs(p)]
    answers = authorizer_answers(cluster, *sa, questions)
    who = f"system:serviceaccount:{sa[0]}:{sa[1]}"
    wrong: list[tuple[str, ...]] = []
    kube_system = {"configmaps", "pods", "secrets"}
    for question, allowed in zip(questions, answers, strict=True):
        place, namespace, resource, verb = question
        must = (resource, verb) in expected(grants, install, place)
        if allowed != must:
            state = "ALLOWED" if allowed else "denied"
            wrong.append((sa[1], state, namespace or place.name, str(resource), verb))
        if must or (namespace == "kube-system" and resource.resource in kube_system):
            literal = can_i_served(cluster, who, *can_i_args(question))
            if literal is not None and literal != allowed:
                wrong.append((sa[1], "can-i disagrees", *can_i_args(question)))
    return wrong


def places(runs: list[str], others: list[str]) -> list[tuple[Place, str | None]]:
    return [
        *((Place.RUNS, ns) for ns in runs),
        *((Place.OTHER, ns) for ns in ["kube-system", "default", *others] if ns not in runs),
        (Place.ALL, None),
        (Place.CLUSTER, None),
    ]


def check_named(
    cluster: Cluster, sa: tuple[str, str], evaluation_name: str, others: list[str]
) -> list[tuple[str, ...]]:
    """An evaluation's own account, asked about ConfigMaps by name in its namespace: every verb
    on its own results ConfigMap and on other evaluations' (and on kube-system's
    ``extension-apiserver-authentication``): allowed exactly what ``named`` lists. The allowed
    answers, and the refusals on the other results, are asked again with `kubectl auth can-i`."""
    allowed_names = named(EVALUATION_AGENT, NAMESPACED_RELEASE, evaluation_name)
    targets = [(sa[0], f"{n}-results") for n in [evaluation_name, *others]]
    targets.append(("kube-system", "extension-apiserver-authentication"))
    questions: list[Question] = []
    object_names: list[str] = []
    for namespace, name in targets:
        for verb in VERBS:
            questions.append((Place.RUNS, namespace, CONFIGMAPS, verb))
            object_names.append(name)
    answers = authorizer_answers(cluster, *sa, questions, object_names)
    who = f"system:serviceaccount:{sa[0]}:{sa[1]}"
    wrong: list[tuple[str, ...]] = []
    for question, name, allowed in zip(questions, object_names, answers, strict=True):
        _, namespace, resource, verb = question
        must = namespace == sa[0] and ((resource, verb), name) in allowed_names
        if allowed != must:
            wrong.append((sa[1], "ALLOWED" if allowed else "denied", str(namespace), name, verb))
        if must or (verb == "patch" and namespace == sa[0]):
            args = (verb, f"configmap/{name}", "-n", str(namespace))
            if can_i_served(cluster, who, *args) != allowed:
                wrong.append((sa[1], "can-i disagrees", *args))
    return wrong


def test_namespaced_release_grants_exactly_the_rbac_table(
    release: Release, example: dict[str, Any]
) -> None:
    """The operator, the (unused) shared evaluation ServiceAccount and the example evaluation's
    own ServiceAccount of the namespaced release (the default for multi-tenant clusters),
    every verb on every resource, in the watched namespace, kube-system, default and
    cluster-wide; the evaluation's own account also by ConfigMap name: it may patch its own
    results ConfigMap and nothing else."""
    cluster, ns = release.cluster, release.namespace
    wrong = check_rbac(
        cluster,
        (ns, f"{release.fullname}-operator"),
        OPERATOR,
        NAMESPACED_RELEASE,
        places([ns], []),
    )
    wrong += check_rbac(
        cluster, (ns, release.job_sa_name), AGENT, NAMESPACED_RELEASE, places([ns], [])
    )
    own = (ns, f"{EXAMPLE}-agent")
    assert (
        example["metadata"]["uid"]
        in release.cluster.kubectl(
            "get", "serviceaccount", own[1], "-n", ns, "-o", "jsonpath={.metadata.ownerReferences}"
        ).stdout
    )
    wrong += check_rbac(cluster, own, EVALUATION_AGENT, NAMESPACED_RELEASE, places([ns], []))
    wrong += check_named(cluster, own, EXAMPLE, ["another-evaluation", "digits-helm-2"])
    assert not wrong, wrong


def test_cluster_wide_release_grants_exactly_the_rbac_table(cluster: Cluster, helm: Path) -> None:
    """The cluster-wide release, with a results store, peering and the shared evaluation
    ServiceAccount, evaluations in two job namespaces; zero replicas (nothing runs). Reads and
    its own objects everywhere; ConfigMaps and Jobs written only in the job namespaces, never
    in kube-system or default; the shared account patches ConfigMaps in its own namespace."""
    suffix = uuid.uuid4().hex[:5]
    name, namespace, second = f"pw{suffix}", f"packaging-wide-{suffix}", f"packaging-jobs-{suffix}"
    create_namespace(cluster, namespace, RESTRICTED)
    create_namespace(cluster, second, RESTRICTED)
    values = {
        "replicaCount": 0,
        "peering": {"enabled": True, "name": name},
        "store": {"url": "postgresql://mlmodelscope:unused@db.invalid:5432/mlmodelscope"},
        "evaluationJobs": {"namespaces": [namespace, second], "resultsAccess": "service-account"},
    }
    install_kind = Install(store=True, peering=True, shared_account=True)
    try:
        install(cluster, helm, name, namespace, values)
        runs = [namespace, second]
        wrong = check_rbac(
            cluster,
            (namespace, f"{name}-mlmodelscope-operator"),
            OPERATOR,
            install_kind,
            places(runs, []),
        )
        for home in runs:
            agent = (home, f"{name}-mlmodelscope-evaluation")
            wrong += check_rbac(cluster, agent, AGENT, install_kind, places([home], runs))
        assert not wrong, wrong
    finally:
        uninstall(cluster, helm, name, namespace)
        for ns in (namespace, second):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_store_and_server_objects_pass_the_api_server_and_restricted(release: Release) -> None:
    """The bundled PostgreSQL, the store Secrets and the results server, applied with
    --dry-run=server in the release's `restricted` namespace: the API server validates them and
    Pod Security admission warns about any pod template it would refuse."""
    sets = [
        "postgresql.enabled=true",
        "server.enabled=true",
        "server.auth.existingSecret=results-tokens",
        f"fullnameOverride={release.fullname}-dry",
    ]
    wanted = {"Secret", "Service", "StatefulSet", "Deployment"}
    objects = [
        m
        for m in render(release.helm, sets=sets)
        if m["kind"] in wanted
        and ("-server" in m["metadata"]["name"] or m["kind"] != "Deployment")
        and not m["metadata"]["name"].endswith("-metrics")
    ]
    assert {m["kind"] for m in objects} == wanted
    for manifest in objects:
        manifest["metadata"]["namespace"] = release.namespace
    body = yaml.safe_dump_all(objects)
    args = ("apply", "--dry-run=server", "-n", release.namespace, "-f", "-")
    proc = release.cluster.kubectl(*args, input=body, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "PodSecurity" not in proc.stderr, proc.stderr
