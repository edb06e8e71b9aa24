"""The Helm chart: linted, rendered, validated against the Kubernetes schemas, least privilege.

Everything here runs `helm` (built from its pinned Go module) without a cluster; installing the
chart into the real control plane is tests/packaging/test_chart_cluster.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from chart_helpers import (
    CHART,
    CI_VALUES,
    NAMESPACE,
    ROOT,
    Manifest,
    find,
    granted,
    one,
    render,
    run_helm,
)
from rbac_table import (
    AGENT,
    CHECKED,
    EVALUATION_AGENT,
    OPERATOR,
    SERVER,
    Install,
    Pair,
    Place,
    checked_pairs,
    expected,
)

from mlmodelscope.controller.policy import ALL, NONE, Allowance, Policy
from mlmodelscope.controller.pricing import DEFAULT_POOL_LABEL, PoolPrices, choose_price
from mlmodelscope.controller.settings import OperatorSettings, SettingsError
from mlmodelscope.devcluster import versions
from mlmodelscope.spec.evaluation import Device, FrameworkName

VALUE_SETS = [pytest.param((), id="defaults")] + [
    pytest.param((path,), id=path.name.removesuffix("-values.yaml")) for path in CI_VALUES
]
NEWEST_SCHEMAS = kubernetes_validate.utils.latest_version()
DEV_CLUSTER = versions.KUBERNETES_VERSION.lstrip("v")
KUBE_VERSIONS = sorted({NEWEST_SCHEMAS, DEV_CLUSTER})
CUSTOM_KINDS = {
    "ServiceMonitor": "monitoring.coreos.com/v1, prometheus-operator's CRD",
    "ClusterKopfPeering": "kopf.dev/v1, Kopf's peering CRD (crds/kopf.dev_peerings.yaml)",
    "KopfPeering": "kopf.dev/v1, Kopf's peering CRD (crds/kopf.dev_peerings.yaml)",
}
"""Objects of CRD-defined kinds: kubernetes-validate ships no schema for them."""
REPO_CRDS = sorted((ROOT / "crds").glob("*.yaml"))
CHART_ONLY_CRDS = {"kopf.dev_peerings.yaml"}
DASHBOARD_SOURCE = ROOT / "operator" / "mlmodelscope" / "telemetry" / "dashboards"
DASHBOARD_SOURCE /= "mlmodelscope.json"
DASHBOARD_COPY = CHART / "dashboards" / "mlmodelscope.json"
FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate"}
FORBIDDEN_RESOURCES = {
    "*",
    "secrets",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "nodes/proxy",
}


# ------------------------------------------------------------------------------ lint & render


@pytest.mark.parametrize("values", VALUE_SETS)
def test_helm_lint_strict(helm: Path, values: tuple[Path, ...]) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for file in values:
        args += ["--values", str(file)]
    out = run_helm(helm, *args).stdout
    assert "[ERROR]" not in out and "[WARNING]" not in out, out


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUE_SETS)
def test_rendered_manifests_validate_against_kubernetes_schemas(
    helm: Path, values: tuple[Path, ...], kube_version: str
) -> None:
    """Strict schemas (unknown fields are errors) of the newest Kubernetes kubernetes-validate
    ships and of the dev cluster's version; CRDs included."""
    manifests = render(helm, values, include_crds=True, kube_version=f"v{kube_version}")
    checked = 0
    for manifest in manifests:
        if manifest["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(manifest, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']}: {where}: {exc}")
        checked += 1
    assert checked >= 10, f"only {checked} objects validated"


def test_kubernetes_schema_versions() -> None:
    """Tells which versions the chart is validated against (visible with -v), and that the
    newest schemas kubernetes-validate ships are not older than the dev cluster."""
    assert tuple(map(int, NEWEST_SCHEMAS.split(".")[:2])) >= tuple(
        map(int, DEV_CLUSTER.split(".")[:2])
    ), (NEWEST_SCHEMAS, DEV_CLUSTER)


def test_chart_kube_version_covers_the_dev_cluster(helm: Path) -> None:
    """Chart.yaml's kubeVersion accepts the dev cluster's Kubernetes version."""
    render(helm, kube_version=versions.KUBERNETES_VERSION)


# ----------------------------------------------------------------------------- CRDs, dashboard


def test_chart_crds_are_identical_copies_of_the_repository_crds() -> None:
    assert REPO_CRDS, "no CRDs in crds/"
    chart_crds = {p.name for p in (CHART / "crds").glob("*.yaml")}
    missing = {p.name for p in REPO_CRDS} - chart_crds
    assert not missing, f"run `mlms crd`, which writes both copies ({sorted(missing)})"
    for crd in REPO_CRDS:
        copy = CHART / "crds" / crd.name
        assert copy.read_bytes() == crd.read_bytes(), (
            f"{copy} differs from {crd}: run `mlms crd`, which writes both copies"
        )
    extra = chart_crds - {p.name for p in REPO_CRDS} - CHART_ONLY_CRDS
    assert not extra, f"CRDs in the chart that crds/ does not have: {sorted(extra)}"


def test_kopf_peering_crds_match_what_kopf_looks_for() -> None:
    from kopf._cogs.structs import references

    docs = list(yaml.safe_load_all((CHART / "crds" / "kopf.dev_peerings.yaml").read_text()))
    served = {
        (d["spec"]["group"], v["name"], d["spec"]["names"]["plural"], d["spec"]["scope"])
        for d in docs
        for v in d["spec"]["versions"]
        if v["served"]
    }
    for selector, scope in (
        (references.CLUSTER_PEERINGS_K, "Cluster"),
        (references.NAMESPACED_PEERINGS_K, "Namespaced"),
    ):
        assert (selector.group, selector.version, selector.any_name, scope) in served


def test_dashboard_is_a_copy_of_the_telemetry_dashboard(helm: Path) -> None:
    assert DASHBOARD_SOURCE.is_file(), f"{DASHBOARD_SOURCE} is missing"
    assert DASHBOARD_COPY.read_bytes() == DASHBOARD_SOURCE.read_bytes(), (
        f"copy it: cp {DASHBOARD_SOURCE.relative_to(ROOT)} {DASHBOARD_COPY.relative_to(ROOT)}"
    )
    dashboard = one(render(helm), "ConfigMap", "mlms-mlmodelscope-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["mlmodelscope.json"]) == json.loads(
        DASHBOARD_SOURCE.read_text()
    )


# ----------------------------------------------------------------------------------- values


def _value_keys(text: str) -> list[tuple[int, str, bool]]:
    """(line number, dotted path, has a comment right above) for every key in values.yaml."""
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    keys = []
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)([A-Za-z0-9_]+):", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        previous = lines[number - 1].strip() if number else ""
        keys.append((number + 1, path, previous.startswith("#")))
    return keys


FREE_FORM = (
    "operator.resources.",
    "podSecurityContext.",
    "securityContext.",
    "postgresql.resources.",
    "postgresql.podSecurityContext.",
    "postgresql.securityContext.",
    "server.resources.",
)
"""Values that are Kubernetes objects given as defaults: their parent's comment covers them."""


def test_every_value_is_commented() -> None:
    keys = _value_keys((CHART / "values.yaml").read_text())
    assert len(keys) > 60
    bare = [
        f"line {n}: {path}"
        for n, path, commented in keys
        if not commented and not path.startswith(FREE_FORM)
    ]
    assert not bare, "values without a comment above them:\n" + "\n".join(bare)


def _schema() -> dict[str, Any]:
    return dict(json.loads((CHART / "values.schema.json").read_text()))


def test_values_and_ci_values_match_the_schema() -> None:
    schema = _schema()
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(defaults, schema)
    for file in CI_VALUES:
        merged = _merge(defaults, yaml.safe_load(file.read_text()))
        jsonschema.validate(merged, schema)


def test_schema_describes_every_default_value() -> None:
    """No value in values.yaml that the schema does not know (and so cannot check)."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, schema: dict[str, Any], path: str) -> None:
        if not isinstance(value, dict) or "properties" not in schema:
            return
        for key, child in value.items():
            assert key in schema["properties"], f"{path}{key} is not in values.schema.json"
            walk(child, schema["properties"][key], f"{path}{key}.")

    walk(defaults, _schema(), "")


@pytest.mark.parametrize(
    "bad",
    [
        "replicaCount=-1",
        "operator.maxRunnin=2",
        "operator.otlpEndpoint=jaeger:4318",
        "operator.imagePullPolicy=Sometimes",
        "watchNamespaces={Team_A}",
        "operator.extraSettings.OTHER_VARIABLE=1",
        "metrics.serviceMonitor.interval=often",
        "evaluationJobs.defaultMemoryLimit=4GB",
        "evaluationJobs.policy.allowSecretRefs=maybe",
        "evaluationJobs.policy.allowedImagePrefixes[0]=a b",
        "evaluationJobs.poolPrices.a100=-1",
        "evaluationJobs.poolPrices.a100=cheap",
        "evaluationJobs.poolLabel=Not A Label",
    ],
)
def test_schema_rejects_bad_values(helm: Path, bad: str) -> None:
    proc = subprocess.run(
        [str(helm), "template", "x", str(CHART), "--set", bad],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "values don't meet the specifications" in proc.stderr, (
        proc.stderr
    )


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value)
        return out
    return override


# --------------------------------------------------------------------------------- operator


def _deployment(manifests: list[Manifest]) -> Manifest:
    return one(manifests, "Deployment", "mlms-mlmodelscope-operator")


@pytest.mark.parametrize("values", VALUE_SETS)
def test_operator_pod_meets_the_restricted_pod_security_profile(
    helm: Path, values: tuple[Path, ...]
) -> None:
    pod = _deployment(render(helm, values))["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
    for volume in pod["volumes"]:
        assert set(volume) <= {"name", "emptyDir", "configMap", "projected", "secret"}
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    assert "add" not in context["capabilities"]
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    assert "privileged" not in context


def test_operator_deployment_runs_mlms_operator_with_probes_and_resources(helm: Path) -> None:
    manifests = render(helm)
    deployment = _deployment(manifests)
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mlms-mlmodelscope-operator"
    (container,) = pod["containers"]
    assert container["command"] == ["mlms"]
    assert container["args"] == ["operator", "--liveness=http://0.0.0.0:8080/healthz"]
    assert container["image"] == "ghcr.io/mlmodelscope/operator:0.1.0"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["envFrom"] == [{"configMapRef": {"name": "mlms-mlmodelscope-operator"}}]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/tmp", "/var/cache/mlmodelscope"}
    service = one(manifests, "Service", "mlms-mlmodelscope-metrics")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def _settings(manifests: list[Manifest]) -> OperatorSettings:
    data = one(manifests, "ConfigMap", "mlms-mlmodelscope-operator")["data"]
    assert all(key.startswith("MLMS_OPERATOR_") for key in data), sorted(data)
    try:
        return OperatorSettings.from_env(data)
    except SettingsError as exc:
        pytest.fail(f"the operator refuses the chart's ConfigMap: {exc}")


@pytest.mark.parametrize("values", VALUE_SETS)
def test_operator_accepts_the_rendered_configuration(helm: Path, values: tuple[Path, ...]) -> None:
    """The ConfigMap's variables go through the operator's own settings parser."""
    settings = _settings(render(helm, values))
    if settings.results_access == "service-account":  # namespaced-values.yaml: a cloud identity
        assert settings.job_service_account == "mlms-mlmodelscope-evaluation"
    else:
        assert settings.job_service_account is None


def test_results_access_is_per_evaluation_unless_the_shared_account_is_chosen(
    helm: Path,
) -> None:
    """Per-evaluation accounts by default: no shared evaluation ServiceAccount, Role or binding,
    and the operator may create each evaluation's own; ``service-account`` brings the shared
    account back and takes those verbs away again."""
    per_evaluation = render(helm)
    assert _settings(per_evaluation).results_access == "per-evaluation"
    assert not find(per_evaluation, "ServiceAccount", "mlms-mlmodelscope-evaluation")
    assert not find(per_evaluation, "Role", "mlms-mlmodelscope-evaluation")
    assert not find(per_evaluation, "RoleBinding", "mlms-mlmodelscope-evaluation")
    shared = render(helm, sets=["evaluationJobs.resultsAccess=service-account"])
    settings = _settings(shared)
    assert settings.results_access == "service-account"
    assert settings.job_service_account == "mlms-mlmodelscope-evaluation"
    assert one(shared, "Role", "mlms-mlmodelscope-evaluation")

    def identity_verbs(manifests: list[Manifest]) -> set[tuple[str, str]]:
        role = one(manifests, "Role", "mlms-mlmodelscope-operator")
        kinds = {"serviceaccounts", "roles", "rolebindings"}
        return {
            (resource, verb)
            for rule in role["rules"]
            for resource in kinds & set(rule["resources"])
            for verb in rule["verbs"]
        }

    assert identity_verbs(per_evaluation) == {
        (kind, verb)
        for kind in ("serviceaccounts", "roles", "rolebindings")
        for verb in ("get", "create")
    }
    assert identity_verbs(shared) == set()


def test_configuration_maps_values_to_settings(helm: Path) -> None:
    wide = _settings(render(helm, [CHART / "ci" / "cluster-wide-values.yaml"]))
    assert (wide.max_running, wide.max_running_per_namespace) == (8, 2)
    assert wide.otlp_endpoint == "http://jaeger-collector.observability:4318"
    assert wide.pushgateway_url == "http://prometheus-pushgateway.monitoring:9091"
    assert wide.runtime_class == "nvidia"
    assert wide.default_memory_limit == "8Gi"
    assert wide.namespaces == ()
    assert wide.peering == "mlmodelscope"  # two replicas
    assert wide.image_for(FrameworkName.ONNXRUNTIME, Device.GPU) == (
        "registry.example.com/mlmodelscope/agent-onnxruntime:0.1.0-gpu"
    )
    assert wide.image_for(FrameworkName.PYTORCH, Device.CPU).startswith(
        "ghcr.io/mlmodelscope/agent-pytorch:"
    )
    scoped = _settings(render(helm, [CHART / "ci" / "namespaced-values.yaml"]))
    assert scoped.namespaces == ("team-a", "team-b")
    assert scoped.peering == "mlmodelscope"
    assert scoped.job_ttl_seconds is None
    assert scoped.default_memory_limit is None  # null: no default limit
    assert scoped.image_pull_policy == "Always"
    assert scoped.pod_failure_policy is False  # extraSettings wins
    defaults = _settings(render(helm))
    assert defaults.peering is None and defaults.max_running == 0
    assert defaults.metrics_port == 9090  # the container port the Service targets
    assert defaults.default_memory_limit == "4Gi"
    off = _settings(render(helm, sets=["evaluationJobs.defaultMemoryLimit=0"]))
    assert off.default_memory_limit is None
    assert defaults.price_per_node_hour is None
    priced = _settings(render(helm, sets=["evaluationJobs.pricePerNodeHour=3.2"]))
    assert priced.price_per_node_hour == 3.2
    assert _settings(render(helm, sets=["metrics.port=9464"])).metrics_port == 9464
    assert _settings(render(helm, sets=["metrics.enabled=false"])).metrics_port == 0


def test_pool_prices_reach_the_operator_and_price_the_selected_pool(
    helm: Path, tmp_path: Path
) -> None:
    """evaluationJobs.poolPrices (from a values file, and from --set, whose numbers Helm
    keeps as text) and poolLabel become the settings whose price the selected pool's Job
    gets; pricePerNodeHour stays the fallback."""
    defaults = _settings(render(helm)).pool_prices
    assert defaults == PoolPrices(DEFAULT_POOL_LABEL, ())
    values = tmp_path / "prices-values.yaml"
    prices = {"a100": 4.10, "cpu": 0.4, "free": 0, "big": 1234567.5}
    values.write_text(
        yaml.safe_dump({"evaluationJobs": {"pricePerNodeHour": 3.2, "poolPrices": prices}})
    )
    settings = _settings(render(helm, [values]))
    assert dict(settings.pool_prices.prices) == prices
    assert settings.pool_prices.label == DEFAULT_POOL_LABEL

    def price(selector: dict[str, str], s: OperatorSettings = settings) -> float | None:
        got = choose_price(selector, s.pool_prices, s.price_per_node_hour)
        return None if got is None else got.per_node_hour

    assert price({DEFAULT_POOL_LABEL: "a100"}) == 4.1
    assert price({DEFAULT_POOL_LABEL: "free"}) == 0.0
    assert price({DEFAULT_POOL_LABEL: "t4"}) == price({}) == 3.2
    gke = _settings(
        render(
            helm,
            sets=[
                "evaluationJobs.poolLabel=cloud.google.com/gke-nodepool",
                "evaluationJobs.poolPrices.a100=4.10",
            ],
        )
    )
    assert gke.pool_prices == PoolPrices("cloud.google.com/gke-nodepool", (("a100", 4.1),))
    assert price({"cloud.google.com/gke-nodepool": "a100"}, gke) == 4.1
    assert price({DEFAULT_POOL_LABEL: "a100"}, gke) is None  # no global price set


def test_peering_is_on_with_more_than_one_replica(helm: Path) -> None:
    assert not find(render(helm), "ClusterKopfPeering")
    manifests = render(helm, sets=["replicaCount=2"])
    assert one(manifests, "ClusterKopfPeering")["metadata"]["name"] == "mlmodelscope"
    rules = one(manifests, "ClusterRole", "mlms-mlmodelscope-operator")["rules"]
    assert any("clusterkopfpeerings" in r["resources"] for r in rules)
    scoped = render(helm, [CHART / "ci" / "namespaced-values.yaml"])
    peerings = find(scoped, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]


def test_two_replicas_get_distinct_peering_identities_and_no_shared_priority(helm: Path) -> None:
    """Kopf pauses every replica that shares the highest priority, so the chart sets none:
    each replica takes its own from its start time (controller/peering.py), and its peer
    identity is its pod name."""
    manifests = render(helm, sets=["replicaCount=2"])
    deployment = one(manifests, "Deployment", "mlms-mlmodelscope-operator")
    assert deployment["spec"]["replicas"] == 2
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "--standalone" not in container["args"]
    settings = _settings(manifests)
    assert settings.peering == "mlmodelscope" and settings.peering_priority is None


def test_service_monitor_and_network_policy_are_opt_in(helm: Path) -> None:
    manifests = render(helm)
    assert not find(manifests, "ServiceMonitor") and not find(manifests, "NetworkPolicy")
    on = render(helm, [CHART / "ci" / "cluster-wide-values.yaml"])
    monitor = one(on, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    policies = {p["metadata"]["name"]: p for p in find(on, "NetworkPolicy")}
    evaluation = policies["mlms-mlmodelscope-evaluation"]
    assert evaluation["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in evaluation["spec"]


# ------------------------------------------------------------------------------------- RBAC


def _rules(manifests: list[Manifest]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{m['kind']}/{m['metadata'].get('namespace', '')}/{m['metadata']['name']}", rule)
        for m in manifests
        if m["kind"] in ("Role", "ClusterRole")
        for rule in m["rules"]
    ]


@pytest.mark.parametrize("values", VALUE_SETS)
def test_rbac_grants_nothing_broad(helm: Path, values: tuple[Path, ...]) -> None:
    for where, rule in _rules(render(helm, values)):
        assert "*" not in rule.get("apiGroups", []), where
        assert not FORBIDDEN_VERBS & set(rule["verbs"]), (where, rule)
        assert not FORBIDDEN_RESOURCES & set(rule["resources"]), (where, rule)
        assert "nonResourceURLs" not in rule, where
        if "" in rule["apiGroups"] and "pods" in rule["resources"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, (where, rule)


def test_a_shared_evaluation_account_may_only_patch_configmaps(helm: Path) -> None:
    shared = "evaluationJobs.resultsAccess=service-account"
    for values, sets in (((), (shared,)), ((CHART / "ci" / "namespaced-values.yaml",), ())):
        manifests = render(helm, values, sets)
        roles = find(manifests, "Role", "mlms-mlmodelscope-evaluation")
        assert roles
        for role in roles:
            assert role["rules"] == [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}
            ]
        bindings = find(manifests, "RoleBinding", "mlms-mlmodelscope-evaluation")
        assert {b["metadata"]["namespace"] for b in bindings} == {
            r["metadata"]["namespace"] for r in roles
        }
        for binding in bindings:
            (subject,) = binding["subjects"]
            assert subject["name"] == "mlms-mlmodelscope-evaluation"
            assert subject["namespace"] == binding["metadata"]["namespace"]
    default_ns = {r["metadata"]["namespace"] for r in find(render(helm), "Role")}
    assert default_ns == {NAMESPACE}


SERVER_LAUNCHES = (
    "server.enabled=true",
    "server.auth.existingSecret=results-tokens",
    "server.launch.namespace=team-a",
)
STORE_URL = "store.url=postgresql://mlmodelscope:pw@db.example.com:5432/mlmodelscope"
RBAC_INSTALLS = {
    "cluster-wide": (Install(), ()),
    "cluster-wide-job-namespaces": (Install(), ("evaluationJobs.namespaces={team-a,team-b}",)),
    "cluster-wide-store-peering": (
        Install(store=True, peering=True),
        (STORE_URL, "peering.enabled=true"),
    ),
    "namespaced": (Install(namespaced=True), ("watchNamespaces={team-a,team-b}",)),
    "namespaced-store-peering": (
        Install(namespaced=True, store=True, peering=True),
        ("watchNamespaces={team-a,team-b}", STORE_URL, "replicaCount=2"),
    ),
    "cluster-wide-shared-account": (
        Install(shared_account=True),
        (
            "evaluationJobs.namespaces={team-a,team-b}",
            "evaluationJobs.resultsAccess=service-account",
        ),
    ),
    "namespaced-shared-account": (
        Install(namespaced=True, shared_account=True),
        ("watchNamespaces={team-a,team-b}", "evaluationJobs.resultsAccess=service-account"),
    ),
    "namespaced-server-launches": (
        Install(namespaced=True, store=True, launches=True),
        ("watchNamespaces={team-a,team-b}", STORE_URL, *SERVER_LAUNCHES),
    ),
    "cluster-wide-server-launches": (
        Install(store=True, launches=True),
        (STORE_URL, *SERVER_LAUNCHES),
    ),
    "cluster-wide-server-launches-no-node-pools": (
        Install(store=True, launches=True, node_pools=False),
        (STORE_URL, *SERVER_LAUNCHES, "server.launch.nodePools=false"),
    ),
}
OTHER_NAMESPACES = ["kube-system", "default"]


def _allowed(
    manifests: list[Manifest], who: tuple[str, str], place: Place, namespace: str | None
) -> set[Pair]:
    rendered = granted(manifests, *who, namespace)
    pairs = checked_pairs(place)
    return {(r, verb) for r, verb in pairs if (r.group, r.rule_name, verb) in rendered}


def _places(runs: list[str], also_other: list[str]) -> list[tuple[Place, str | None]]:
    others = [ns for ns in OTHER_NAMESPACES + also_other if ns not in runs]
    return [
        *((Place.RUNS, ns) for ns in runs),
        *((Place.OTHER, ns) for ns in others),
        (Place.ALL, None),
        (Place.CLUSTER, None),
    ]


@pytest.mark.parametrize("variant", sorted(RBAC_INSTALLS))
def test_rendered_rbac_grants_exactly_the_table(helm: Path, variant: str) -> None:
    """Every verb on every resource of tests/packaging/rbac_table.py, for the operator and the
    shared evaluation ServiceAccount (granted nothing with per-evaluation accounts), in the
    namespaces where evaluations run, elsewhere (kube-system included) and cluster-wide:
    allowed exactly when the table says so. The same table is checked against the real API
    server's authorizer in test_chart_cluster.py."""
    install, sets = RBAC_INSTALLS[variant]
    manifests = render(helm, sets=sets)
    job_namespaces = sorted(
        role["metadata"]["namespace"]
        for role in find(manifests, "Role", "mlms-mlmodelscope-operator")
    )
    runs = job_namespaces
    wrong = []
    operator = (NAMESPACE, "mlms-mlmodelscope-operator")
    for place, namespace in _places(runs, [NAMESPACE]):
        want = expected(OPERATOR, install, place)
        got = _allowed(manifests, operator, place, namespace)
        wrong += [("operator", namespace, "missing", str(r), v) for r, v in want - got]
        wrong += [("operator", namespace, "ALLOWED", str(r), v) for r, v in got - want]
    for home in job_namespaces:
        agent = (home, "mlms-mlmodelscope-evaluation")
        for place, namespace in _places([home], [NAMESPACE, *job_namespaces]):
            want = expected(AGENT, install, place)
            got = _allowed(manifests, agent, place, namespace)
            wrong += [(f"agent@{home}", namespace, "missing", str(r), v) for r, v in want - got]
            wrong += [(f"agent@{home}", namespace, "ALLOWED", str(r), v) for r, v in got - want]
    server = (NAMESPACE, "mlms-mlmodelscope-server")
    launch_namespaces = ["team-a"] if install.launches else []
    for place, namespace in _places(launch_namespaces, [NAMESPACE, *job_namespaces]):
        want = expected(SERVER, install, place)
        got = _allowed(manifests, server, place, namespace)
        wrong += [("server", namespace, "missing", str(r), v) for r, v in want - got]
        wrong += [("server", namespace, "ALLOWED", str(r), v) for r, v in got - want]
    assert not wrong, wrong


def test_every_rendered_grant_is_in_the_table(helm: Path) -> None:
    """Nothing in the chart's Roles and ClusterRoles escapes the table's checks: each rule names
    a resource of CHECKED and a verb the table grants on it."""
    grants = OPERATOR + AGENT + EVALUATION_AGENT + SERVER
    table = {(g.resource.group, g.resource.rule_name, v) for g in grants for v in g.verbs}
    for _, sets in RBAC_INSTALLS.values():
        for where, rule in _rules(render(helm, sets=sets)):
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert (group, resource, verb) in table, (where, group, resource, verb)
    checked = set(CHECKED)
    assert all(g.resource in checked for g in grants)


@pytest.mark.parametrize(
    "sets",
    [
        (STORE_URL,),
        ("operator.extraSettings.MLMS_OPERATOR_STORE_URL=postgresql://db/x",),
        ("operator.extraEnv[0].name=MLMS_OPERATOR_STORE_URL", "operator.extraEnv[0].value=x"),
    ],
    ids=["store-values", "extra-settings", "extra-env"],
)
def test_outbox_verbs_only_with_a_results_store(helm: Path, sets: tuple[str, ...]) -> None:
    """configmaps list/delete serve only the outbox of results waiting for the store."""

    def configmap_verbs(manifests: list[Manifest]) -> set[str]:
        role = one(manifests, "Role", "mlms-mlmodelscope-operator")
        cluster_role = one(manifests, "ClusterRole", "mlms-mlmodelscope-operator")
        return {
            verb
            for rule in role["rules"] + cluster_role["rules"]
            if rule["resources"] == ["configmaps"]
            for verb in rule["verbs"]
        }

    assert configmap_verbs(render(helm)) == {"get", "create", "patch"}
    assert configmap_verbs(render(helm, sets=sets)) == {"get", "create", "patch", "list", "delete"}


def test_cluster_wide_operator_writes_configmaps_and_jobs_only_where_evaluations_run(
    helm: Path,
) -> None:
    """The ClusterRole reads and watches everywhere, but its only writes are to the operator's
    own objects and Events; ConfigMaps and Jobs are written through the job namespaces' Roles."""
    manifests = render(helm, sets=["evaluationJobs.namespaces={team-a,team-b}"])
    role = one(manifests, "ClusterRole", "mlms-mlmodelscope-operator")
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    for rule in role["rules"]:
        if rule["apiGroups"] in ([""], ["batch"]) and "events" not in rule["resources"]:
            assert not writes & set(rule["verbs"]), rule
    binding = one(manifests, "ClusterRoleBinding", "mlms-mlmodelscope-operator")
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    roles = find(manifests, "Role", "mlms-mlmodelscope-operator")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    bindings = find(manifests, "RoleBinding", "mlms-mlmodelscope-operator")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]


def test_namespaced_operator_gets_roles_only_where_it_watches(helm: Path) -> None:
    manifests = render(helm, [CHART / "ci" / "namespaced-values.yaml"])
    roles = find(manifests, "Role", "mlms-mlmodelscope-operator")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    (cluster_role,) = find(manifests, "ClusterRole")
    cluster_resources = {r for rule in cluster_role["rules"] for r in rule["resources"]}
    assert cluster_resources == {"customresourcedefinitions", "namespaces"}
    for rule in cluster_role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}
    job_namespaces = {
        sa["metadata"]["namespace"]
        for sa in find(manifests, "ServiceAccount", "mlms-mlmodelscope-evaluation")
    }
    assert job_namespaces == {"team-a", "team-b"}


def test_policy_values_map_to_settings(helm: Path) -> None:
    """evaluationJobs.policy (#15, defect 9): lists joined, an empty list is false."""
    defaults = _settings(render(helm)).policy
    assert defaults == Policy()  # the operator's own defaults
    assert defaults.secret_refs == NONE and defaults.pvcs == ALL
    wide = _settings(render(helm, [CHART / "ci" / "cluster-wide-values.yaml"])).policy
    assert wide.image_prefixes == ("registry.example.com/team-images/", "ghcr.io/acme")
    assert wide.secret_refs == Allowance(names=frozenset({"hf-token", "model-store"}))
    assert wide.pvcs == NONE  # []
    assert wide.tolerations == Allowance(names=frozenset({"mlmodelscope.io/pool"}))
    scoped = _settings(render(helm, [CHART / "ci" / "namespaced-values.yaml"])).policy
    assert (scoped.secret_refs, scoped.pvcs, scoped.tolerations) == (ALL, ALL, NONE)


def test_only_a_launching_server_holds_kubernetes_credentials(helm: Path) -> None:
    """Without server.launch.namespace the server pod mounts no token and the chart makes it
    no ServiceAccount; with it, the pod runs as <fullname>-server, creates launches in that
    namespace and reads its catalog from the ConfigMap named."""
    base = (STORE_URL, "server.enabled=true", "server.auth.existingSecret=results-tokens")
    plain = one(render(helm, sets=base), "Deployment", "mlms-mlmodelscope-server")["spec"]
    assert plain["template"]["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in plain["template"]["spec"]
    assert not find(render(helm, sets=base), "ServiceAccount", "mlms-mlmodelscope-server")
    manifests = render(helm, sets=(*base, "server.launch.namespace=team-a",
                                   "server.launch.catalogConfigMap=models"))  # fmt: skip
    pod = one(manifests, "Deployment", "mlms-mlmodelscope-server")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mlms-mlmodelscope-server"
    assert pod["automountServiceAccountToken"] is True
    (container,) = pod["containers"]
    assert "--launch-namespace=team-a" in container["args"]
    assert "--catalog=/etc/mlmodelscope/catalog" in container["args"]
    assert {"name": "catalog", "configMap": {"name": "models"}} in pod["volumes"]
    account = one(manifests, "ServiceAccount", "mlms-mlmodelscope-server")
    assert account["metadata"]["namespace"] == NAMESPACE
    role = one(manifests, "Role", "mlms-mlmodelscope-server-launch")
    assert role["metadata"]["namespace"] == "team-a"
    no_writes = (*base, "server.auth.writeToken=false", "server.launch.namespace=team-a")
    refused = subprocess.run(
        [str(helm), "template", "mlms", str(CHART), *(f"--set={s}" for s in no_writes)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "write token" in refused.stderr, refused.stderr


def test_a_launching_server_may_be_left_without_the_nodes_grant(helm: Path) -> None:
    """server.launch.nodePools: false leaves out the ClusterRole and ClusterRoleBinding
    <fullname>-server-nodes, and only them: the server still launches into its namespace,
    and its Launch form says it may not list the Nodes (tests/server/test_launch_hardware.py,
    the 403 note)."""
    base = (STORE_URL, *SERVER_LAUNCHES)
    with_pools = render(helm, sets=base)
    without = render(helm, sets=(*base, "server.launch.nodePools=false"))
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert one(with_pools, kind, "mlms-mlmodelscope-server-nodes")
        assert not find(without, kind, "mlms-mlmodelscope-server-nodes")
    names = lambda manifests: {(m["kind"], m["metadata"]["name"]) for m in manifests}  # noqa: E731
    assert names(with_pools) - names(without) == {
        ("ClusterRole", "mlms-mlmodelscope-server-nodes"),
        ("ClusterRoleBinding", "mlms-mlmodelscope-server-nodes"),
    }
    assert names(without) <= names(with_pools)
    assert one(without, "Role", "mlms-mlmodelscope-server-launch")
    pod = one(without, "Deployment", "mlms-mlmodelscope-server")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "mlms-mlmodelscope-server"
