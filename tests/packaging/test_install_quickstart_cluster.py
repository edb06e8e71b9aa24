"""The install quick start of docs/operator.md, run as written, and what a platform team
checks of such an install.

The `$ ` lines of the doc's block run in one `set -e` bash script from a folder holding the
checkout's `examples/` (so `images.yaml` and `runs.json` land there, not in the checkout),
with this venv and the pinned Helm first on PATH, against this session's cluster: the doc's
`mlms dev-cluster up --real-node` finds it running from MLMS_DEV_CLUSTER_DIR and uses it.
The block runs in two parts: everything before `helm uninstall`, then the checks an install
needs (every image pulled by the real node from the registry by digest, the runs recorded in
the bundled PostgreSQL, the dashboard through port-forward in Chromium, `helm upgrade` during
a run losing nothing), then the `up` line again and `helm uninstall`, after which no pod of the
release may be left while the CRDs, the evaluations and PostgreSQL's claim (with the runs in
its volume) remain.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlmodelscope.contract.kube import Kube, evaluation_path
from mlmodelscope.devcluster import node, registry
from mlmodelscope.devcluster.cluster import Cluster
from mlmodelscope.devcluster.pytest_plugin import wait_for
from system_chromium import chromium

pytestmark = [pytest.mark.cluster, pytest.mark.docker, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "operator.md"
HEADING = "## Quick start: install the chart on the dev cluster"
NAMESPACE = "mlmodelscope"
RELEASE = "mlmodelscope"
EVALUATIONS = ("digits-onnxruntime", "digits-pytorch", "digits-tensorflow")
READ_TOKEN = "read-me"
SCRIPT_TIMEOUT_S = 1200
RESULT_LINE = re.compile(
    r"^(?:[a-z0-9.-]+/[a-z0-9.-]+ (?:created|labeled|condition met|bound in \S+)"
    r'|release "[a-z0-9-]+" uninstalled)$'
)
"""What kubectl, `examples-claim` and helm print per object: the lines the doc shows exactly."""


def quickstart_block(markdown: str) -> str:
    section = markdown.split(HEADING, 1)[1].split("\n## ", 1)[0]
    block = re.search(r"^```console\n(.*?)^```", section, flags=re.S | re.M)
    assert block, f"no console block under {HEADING!r} in {DOC}"
    return block[1]


def commands(block: str) -> list[str]:
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def result_lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if RESULT_LINE.match(line)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Shell:
    """Runs doc lines in bash from ``cwd`` with the user's environment as the doc assumes it."""

    def __init__(self, cluster: Cluster, helm: Path, cwd: Path) -> None:
        self.cluster, self.cwd = cluster, cwd
        path = os.pathsep.join([str(Path(sys.executable).parent), str(helm.parent)])
        self.env = {
            **os.environ,
            "PATH": f"{path}{os.pathsep}{os.environ['PATH']}",
            "MLMS_DEV_CLUSTER_DIR": str(cluster.run_dir),
        }
        self.env.pop("KUBECONFIG", None)

    def run(self, lines: list[str]) -> str:
        script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
        proc = subprocess.run(
            ["bash", "-c", script],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, (
            f"the quick start failed (exit {proc.returncode}):\n{output}\n{self.diagnose()}"
        )
        return output

    def diagnose(self) -> str:
        """What the release's pods and the evaluations say, for a failure's message."""
        kubectl = [
            str(self.cluster.kubectl_dir / "kubectl"),
            f"--kubeconfig={self.cluster.kubeconfig}",
        ]
        parts = []
        for args in (
            ["get", "pods,meval", "-n", NAMESPACE, "-o", "wide"],
            [
                "get",
                "meval",
                "-n",
                NAMESPACE,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.status.record}{'\\n'}{end}",
            ],
            ["logs", "-n", NAMESPACE, f"deploy/{RELEASE}-operator", "--tail=40"],
            ["logs", "-n", NAMESPACE, f"deploy/{RELEASE}-server", "--tail=20"],
            ["get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"],
        ):
            proc = subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=60)
            parts.append(f"$ kubectl {' '.join(args)}\n{proc.stdout}{proc.stderr}")
        return "\n".join(parts)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(REPO / "examples")
    return tmp_path


@pytest.fixture
def clean_namespace(cluster: Cluster) -> Iterator[None]:
    """The doc's namespace does not exist before, and is gone after (volumes released)."""
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=120s", check=False)
    yield
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def pods(kube: Kube, selector: str | None = None) -> list[dict[str, Any]]:
    return kube.list(f"/api/v1/namespaces/{NAMESPACE}/pods", selector)


def registry_pulls(cluster: Cluster) -> set[str]:
    """The manifest paths the real node's containerd fetched from the registry."""
    return {
        r["path"]
        for r in registry.request_log(cluster.logs_dir / "registry.log")
        if r["agent"].startswith("containerd/") and "/manifests/" in r["path"]
    }


def published_references(values: dict[str, Any]) -> dict[str, str]:
    """Every image reference the publish step pinned, by what the chart deploys."""
    refs = {
        "operator": f"{values['image']['repository']}@{values['image']['digest']}",
        "postgresql": (
            f"{values['postgresql']['image']['repository']}@"
            f"{values['postgresql']['image']['digest']}"
        ),
    }
    for framework, devices in values["operator"]["images"].items():
        refs[f"agent-{framework}"] = devices["cpu"]
    return refs


def forget_images(cluster: Cluster, references: Iterable[str]) -> None:
    """Remove the images ``references`` name (every name of theirs) from the node's
    containerd, which keeps what it pulled across clusters."""
    digests = {ref.rpartition("@")[2] for ref in references}
    ctr = node.Ctr(cluster.node_paths.socket)
    names = [name for name, digest in ctr.image_targets().items() if digest in digests]
    if names:
        ctr("images", "rm", "--sync", *names, check=False, timeout=600)


def check_pulled_from_registry(cluster: Cluster, kube: Kube, refs: dict[str, str]) -> None:
    """Each pod ran its image by digest from the registry, and the node's containerd holds
    it under the registry's name: containerd fetched its manifest from the registry, now or
    when an earlier pod of the session first needed it."""
    for ref in refs.values():
        assert ref.startswith(f"{registry.NAME}/"), ref
    images = node.Ctr(cluster.node_paths.socket).images()
    assert set(refs.values()) <= images, sorted(set(refs.values()) - images)
    pulled = registry_pulls(cluster)
    for name, ref in refs.items():
        repository, _, digest = ref.removeprefix(f"{registry.NAME}/").rpartition("@")
        assert f"/v2/{repository}/manifests/{digest}" in pulled, (name, sorted(pulled))
    digests = {ref.rpartition("@")[2] for ref in refs.values()}
    for pod in pods(kube):  # the kubelet names an image pulled by digest alone by its id
        for status in pod["status"].get("containerStatuses") or []:
            assert status["imageID"].rpartition("@")[2] in digests, status


def psql(cluster: Cluster, query: str) -> str:
    """``query`` run by psql inside the bundled PostgreSQL's pod (its own socket)."""
    pod = f"{RELEASE}-postgresql-0"
    proc = cluster.kubectl(
        "exec", "-n", NAMESPACE, pod, "--", "sh", "-c",
        'PGPASSWORD="$POSTGRES_PASSWORD" psql -h 127.0.0.1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" '
        f"-tAc {shlex.quote(query)}",
    )  # fmt: skip
    return proc.stdout.strip()


class PortForward:
    """``kubectl port-forward`` to the results server's Service on a free loopback port."""

    def __init__(self, cluster: Cluster) -> None:
        self.port = free_port()
        kubectl = cluster.kubectl_dir / "kubectl"
        argv = [str(kubectl), f"--kubeconfig={cluster.kubeconfig}", "port-forward", "-n"]
        argv += [NAMESPACE, f"svc/{RELEASE}-server", f"{self.port}:8080"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> dict[str, Any]:
        import httpx

        response = httpx.get(
            self.base + path, headers={"Authorization": f"Bearer {READ_TOKEN}"}, timeout=10
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def answers(self) -> bool:
        """The server lists the three runs through the port-forward (False until it listens)."""
        import httpx

        try:
            return bool(self.get("/api/v1/runs")["total"] >= 3)
        except httpx.TransportError:
            return False

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def check_dashboard_in_chromium(forward: PortForward, shots: Path) -> None:
    """The dashboard through port-forward: the login form takes the read token, and the runs
    page lists the three evaluations."""
    executable = chromium()
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True)
        page = browser.new_context(java_script_enabled=False).new_page()
        page.goto(forward.base + "/")
        page.locator("input[name=token]").fill(READ_TOKEN)
        page.locator(
            "form[action='/login'] button, form[action='/login'] input[type=submit]"
        ).click()
        for name in EVALUATIONS:  # the runs table's evaluation cells
            cell = page.get_by_role("cell", name=f"{NAMESPACE}/{name}", exact=True)
            expect(cell.first).to_be_visible()
        page.screenshot(path=str(shots / "dashboard-through-port-forward.png"), full_page=True)
        browser.close()


def slow_evaluation() -> dict[str, Any]:
    """An ONNX Runtime digits evaluation on the real node that runs for about 20 s."""
    doc = next(yaml.safe_load_all((REPO / "examples/cluster/digits-real-node.yaml").read_text()))
    doc["metadata"]["name"] = "digits-during-upgrade"
    doc["spec"]["scenario"].update({"batchSizes": [1], "minDuration": "20s"})
    return dict(doc)


def test_the_install_quick_start_runs_as_written(
    cluster: Cluster,
    real_node: str,
    node_images: dict[str, str],
    helm: Path,
    workdir: Path,
    clean_namespace: None,
    tmp_path: Path,
) -> None:
    block = quickstart_block(DOC.read_text())
    lines = commands(block)
    up = 'eval "$(mlms dev-cluster up --real-node)"'
    (uninstall,) = [i for i, line in enumerate(lines) if line.startswith("helm uninstall ")]
    assert lines[0] == up and uninstall == len(lines) - 1, lines
    shell = Shell(cluster, helm, workdir)
    kube = Kube(cluster.api_client())
    forget_images(cluster, node_images.values())  # so that the node pulls each one here
    started = time.monotonic()
    output = shell.run(lines[:uninstall])
    print(f"quick start up to uninstall: {time.monotonic() - started:.0f} s")

    # the three runs, listed by the server through the doc's port-forward, and in PostgreSQL
    listed = json.loads((workdir / "runs.json").read_text())
    by_name = {item["evaluation"]: item for item in listed["items"]}
    assert set(by_name) == set(EVALUATIONS), f"{listed}\n{shell.diagnose()}"
    assert {item["status"] for item in listed["items"]} == {"Succeeded"}
    counted = psql(cluster, f"select count(*) from runs where namespace = '{NAMESPACE}'")
    assert counted == "3"

    values = yaml.safe_load((workdir / "images.yaml").read_text())
    refs = published_references(values)
    check_pulled_from_registry(cluster, kube, refs)
    for name in EVALUATIONS:  # each Job's pod ran its framework's agent image from the registry
        status = kube.get(evaluation_path(NAMESPACE, name))["status"]
        assert status["phase"] == "Succeeded", status

    forward = PortForward(cluster)
    try:
        wait_for("the port-forward to answer", forward.answers, 30)
        check_dashboard_in_chromium(forward, tmp_path)
    finally:
        forward.close()

    # helm upgrade to a changed value rolls the operator while a run is in progress: the run
    # still ends Succeeded and is recorded once
    operator_selector = "app.kubernetes.io/component=operator"
    before = {p["metadata"]["name"] for p in pods(kube, operator_selector)}
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(slow_evaluation()))
    wait_for(
        "the evaluation to run",
        lambda: (
            (kube.get(evaluation_path(NAMESPACE, "digits-during-upgrade")).get("status") or {}).get(
                "phase"
            )
            == "Running"
        ),
        300,
    )
    upgrade = f"helm upgrade {RELEASE} oci://$MLMS_DEV_REGISTRY/charts/mlmodelscope"
    upgrade += f" --version 0.1.0 --plain-http -n {NAMESPACE} --reuse-values"
    upgrade += " --set operator.maxRunning=8 --wait --timeout 5m"
    shell.run([up, upgrade])
    after = {p["metadata"]["name"] for p in pods(kube, operator_selector)}
    assert after and not after & before, (before, after)
    wait_for(
        "the evaluation begun before the upgrade to succeed",
        lambda: (
            (kube.get(evaluation_path(NAMESPACE, "digits-during-upgrade")).get("status") or {}).get(
                "phase"
            )
            == "Succeeded"
        ),
        300,
    )
    wait_for(
        "its run to be recorded",
        lambda: psql(
            cluster, "select count(*) from runs where evaluation = 'digits-during-upgrade'"
        ) == "1",
        120,
    )  # fmt: skip

    output += shell.run([up, lines[uninstall]])
    missing = [line for line in result_lines(block) if line not in output.splitlines()]
    assert not missing, f"lines the doc shows were not printed: {missing}\n{output}"
    wait_for(
        "the release's pods to go",
        lambda: not pods(kube, f"app.kubernetes.io/instance={RELEASE}"),
        120,
    )
    running = [p["metadata"]["name"] for p in pods(kube) if p["status"].get("phase") == "Running"]
    assert not running, running
    crds = cluster.kubectl("get", "crd", "-o", "name").stdout
    assert "modelevaluations.mlmodelscope.io" in crds
    assert (
        len(kube.list(f"/apis/mlmodelscope.io/v1alpha1/namespaces/{NAMESPACE}/modelevaluations"))
        == 4
    )
    claims = kube.list(
        f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims",
        "app.kubernetes.io/component=postgresql",
    )
    assert [c["status"]["phase"] for c in claims] == ["Bound"], claims
    counted = read_kept_runs(cluster, kube, refs["postgresql"], claims[0]["metadata"]["name"])
    assert counted == "4", counted  # the quick start's three and the one across the upgrade


def read_kept_runs(cluster: Cluster, kube: Kube, image: str, claim: str) -> str:
    """The number of runs in the database an uninstalled release left in ``claim``: a pod of
    the PostgreSQL image starts the server on that data, socket only, and asks."""
    script = (
        'postgres -D "$PGDATA" -c listen_addresses= -k /var/run/postgresql & '
        "until pg_isready -q -h /var/run/postgresql; do sleep 0.2; done; "
        'echo "runs=$(psql -h /var/run/postgresql -U mlmodelscope -d mlmodelscope -tAc '
        "'select count(*) from runs')\""
    )
    restricted = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "read-kept-runs"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": dict(node.SELECTOR),
            "tolerations": [dict(node.TOLERATION)],
            "securityContext": {"runAsUser": 999, "runAsGroup": 999, "runAsNonRoot": True},
            "containers": [
                {
                    "name": "psql",
                    "image": image,
                    "command": ["sh", "-c", script],
                    "env": [{"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}],
                    "securityContext": restricted,
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/var/lib/postgresql/data"},
                        {"name": "run", "mountPath": "/var/run/postgresql"},
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "run", "emptyDir": {}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }
    cluster.kubectl("create", "-n", NAMESPACE, "-f", "-", input=json.dumps(pod))
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/read-kept-runs"
    wait_for(
        "the pod reading the kept runs",
        lambda: kube.get(path)["status"].get("phase") in ("Succeeded", "Failed"),
        120,
    )
    logs = cluster.kubectl("logs", "-n", NAMESPACE, "read-kept-runs").stdout
    found = re.findall(r"^runs=(\d*)$", logs, flags=re.M)
    assert found, logs
    return str(found[-1])
