"""What the chart's ServiceAccounts may do: the one table of RBAC expectations (issue 15 #11).

Each :class:`Grant` is a verb set the operator's (or the agent's) code needs on one resource,
where it needs it, and the code path behind it. Everything not granted here must be denied:
``expected`` turns the table into the exact allowed set for one install and one place, and
``CHECKED`` lists every resource the tests ask about, each with every verb of ``VERBS``.
A grant limited to one object (``resourceNames``: an evaluation's own results ConfigMap) allows
no request that does not name it; ``named`` lists what it allows by name.

Used by test_chart.py (the rendered Roles and ClusterRoles, evaluated without a cluster) and
test_chart_cluster.py (the real API server's authorizer, `kubectl auth can-i` as the
ServiceAccounts, after `helm install`). docs/reliability.md row 11 and docs/install.md point
here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True, order=True)
class Resource:
    """A resource as RBAC sees it (group, plural, subresource)."""

    group: str
    resource: str
    subresource: str = ""
    namespaced: bool = True

    @property
    def kubectl(self) -> str:
        """The name `kubectl auth can-i` takes ("jobs.batch", "configmaps")."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def rule_name(self) -> str:
        """The name in a Role's `resources` ("modelevaluations/status")."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def __str__(self) -> str:
        sub = f"/{self.subresource}" if self.subresource else ""
        return f"{self.kubectl}{sub}"


def _r(group: str, resource: str, subresource: str = "") -> Resource:
    return Resource(group, resource, subresource)


def _cluster(group: str, resource: str) -> Resource:
    return Resource(group, resource, namespaced=False)


MLMS = "mlmodelscope.io"
EVALUATIONS = _r(MLMS, "modelevaluations")
EVALUATIONS_STATUS = _r(MLMS, "modelevaluations", "status")
EVALUATIONS_FINALIZERS = _r(MLMS, "modelevaluations", "finalizers")
SWEEPS = _r(MLMS, "evaluationsweeps")
SWEEPS_STATUS = _r(MLMS, "evaluationsweeps", "status")
SWEEPS_FINALIZERS = _r(MLMS, "evaluationsweeps", "finalizers")
MODELS = _r(MLMS, "models")
JOBS = _r("batch", "jobs")
PODS = _r("", "pods")
POD_LOGS = _r("", "pods", "log")
CONFIGMAPS = _r("", "configmaps")
SERVICE_ACCOUNTS = _r("", "serviceaccounts")
ROLES = _r("rbac.authorization.k8s.io", "roles")
ROLE_BINDINGS = _r("rbac.authorization.k8s.io", "rolebindings")
EVENTS = _r("", "events")
WORKLOADS = _r("kueue.x-k8s.io", "workloads")
KOPF_PEERINGS = _r("kopf.dev", "kopfpeerings")
CRDS = _cluster("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACES = _cluster("", "namespaces")
NODES = _cluster("", "nodes")
CLUSTER_KOPF_PEERINGS = _cluster("kopf.dev", "clusterkopfpeerings")

CHECKED: tuple[Resource, ...] = (
    # what the operator and the agent use
    EVALUATIONS,
    EVALUATIONS_STATUS,
    EVALUATIONS_FINALIZERS,
    SWEEPS,
    SWEEPS_STATUS,
    SWEEPS_FINALIZERS,
    MODELS,
    _r(MLMS, "models", "status"),
    JOBS,
    _r("batch", "jobs", "status"),
    PODS,
    _r("", "pods", "status"),
    POD_LOGS,
    _r("", "pods", "exec"),
    _r("", "pods", "attach"),
    _r("", "pods", "eviction"),
    CONFIGMAPS,
    EVENTS,
    _r("events.k8s.io", "events"),
    WORKLOADS,
    KOPF_PEERINGS,
    SERVICE_ACCOUNTS,
    ROLES,
    ROLE_BINDINGS,
    # what neither needs: credentials, tokens, other workloads
    _r("", "secrets"),
    _r("", "serviceaccounts", "token"),
    _r("", "services"),
    _r("", "persistentvolumeclaims"),
    _r("apps", "deployments"),
    _r("coordination.k8s.io", "leases"),
    # cluster-scoped
    CRDS,
    NAMESPACES,
    NODES,
    CLUSTER_KOPF_PEERINGS,
    _cluster("", "persistentvolumes"),
    _cluster("rbac.authorization.k8s.io", "clusterroles"),
    _cluster("rbac.authorization.k8s.io", "clusterrolebindings"),
    _cluster("admissionregistration.k8s.io", "validatingwebhookconfigurations"),
)


class Scope(Enum):
    """Where a grant holds."""

    SERVED = "every namespace the operator serves"
    """Cluster-wide install: every namespace, and cluster-wide requests (`--all-namespaces`);
    namespaced install: each watched namespace."""
    RUNS = "namespaces where evaluations run"
    """Each watched namespace; for a cluster-wide install, the job namespaces
    (`evaluationJobs.namespaces`, by default the release namespace)."""
    CLUSTER = "cluster-scoped"


class When(Enum):
    ALWAYS = "always"
    STORE = "with a results store"
    CLUSTER_WIDE = "cluster-wide install only"
    NAMESPACED = "namespaced install only"
    CLUSTER_WIDE_PEERING = "cluster-wide install with Kopf peering"
    NAMESPACED_PEERING = "namespaced install with Kopf peering"
    PER_EVALUATION = "per-evaluation results access (evaluationJobs.resultsAccess, the default)"
    SHARED_ACCOUNT = "a shared job ServiceAccount (evaluationJobs.resultsAccess: service-account)"
    LAUNCHES = "the results server launches into the cluster (server.launch.namespace)"
    NODE_POOLS = (
        "the results server launches into the cluster and offers node pools "
        "(server.launch.namespace, server.launch.nodePools)"
    )


OWN_RESULTS = "<evaluation>-results"
"""In ``Grant.resource_name``: the results ConfigMap of the evaluation the account belongs to."""


@dataclass(frozen=True)
class Grant:
    resource: Resource
    verbs: tuple[str, ...]
    scope: Scope
    when: When
    why: str
    resource_name: str = ""
    """Only on the object of this name (a Role's ``resourceNames``); empty: any object."""


OPERATOR: tuple[Grant, ...] = (
    Grant(EVALUATIONS, ("list", "watch"), Scope.SERVED, When.ALWAYS,
          "Kopf's watch; admit.sync_ledger (ledger, resync)"),
    Grant(EVALUATIONS, ("get",), Scope.SERVED, When.ALWAYS,
          "handlers read the live object before acting; Context.update_status"),
    Grant(EVALUATIONS, ("patch",), Scope.SERVED, When.ALWAYS,
          "Kopf's progress and diff-base annotations"),
    Grant(EVALUATIONS, ("create",), Scope.RUNS, When.ALWAYS,
          "a sweep's children (handle_sweep.reconcile); never deleted: the GC does"),
    Grant(EVALUATIONS_STATUS, ("patch",), Scope.SERVED, When.ALWAYS, "Context.update_status"),
    Grant(EVALUATIONS_FINALIZERS, ("update",), Scope.RUNS, When.ALWAYS,
          "blockOwnerDeletion owner refs of the Job and ConfigMaps (builders.owner_reference)"),
    Grant(SWEEPS, ("get", "list", "watch", "patch"), Scope.SERVED, When.ALWAYS,
          "Kopf's watch and annotations; handle_sweep.reconcile and list_sweeps"),
    Grant(SWEEPS_STATUS, ("patch",), Scope.SERVED, When.ALWAYS, "handle_sweep._write_status"),
    Grant(SWEEPS_FINALIZERS, ("update",), Scope.RUNS, When.ALWAYS,
          "blockOwnerDeletion ownerReferences on a sweep's children (sweeps.owner_reference)"),
    Grant(MODELS, ("get",), Scope.RUNS, When.ALWAYS, "model_refs.api_lookup resolves modelRef"),
    Grant(JOBS, ("list", "watch"), Scope.SERVED, When.ALWAYS,
          "object_watches (the Job watch); admit.sync_ledger: slots held for the queue limits"),
    Grant(JOBS, ("get", "create", "delete"), Scope.RUNS, When.ALWAYS,
          "admit; resync; handle_evaluation.act (DeleteOutdatedJobs) and runs.fail_start delete"),
    Grant(PODS, ("list", "watch"), Scope.SERVED, When.ALWAYS,
          "object_watches (the pod watch); a Job's pods listed by label (runs, handle_job)"),
    Grant(CONFIGMAPS, ("get", "create", "patch"), Scope.RUNS, When.ALWAYS,
          "spec and results ConfigMaps (children.ensure, results reading, model_refs)"),
    Grant(CONFIGMAPS, ("list",), Scope.SERVED, When.STORE,
          "recording.list_outboxes: results waiting for the store, by label"),
    Grant(CONFIGMAPS, ("delete",), Scope.RUNS, When.STORE,
          "recording.retry_outbox deletes an outbox once its run is recorded"),
    Grant(EVENTS, ("create",), Scope.SERVED, When.ALWAYS,
          "kopf.event and main.api_event_poster post Events on evaluations and sweeps"),
    Grant(EVENTS, ("list",), Scope.RUNS, When.ALWAYS,
          "runs._failed_create reads a Job's FailedCreate Events"),
    Grant(WORKLOADS, ("list",), Scope.RUNS, When.ALWAYS, "kueue.KueueWatch._list"),
    Grant(KOPF_PEERINGS, ("get", "list", "watch", "patch"), Scope.RUNS,
          When.NAMESPACED_PEERING,
          "Kopf peering keep-alives; get: peering.Peering.acting (a standby skips its ticks)"),
    Grant(SERVICE_ACCOUNTS, ("get", "create"), Scope.RUNS, When.PER_EVALUATION,
          "children.ensure: the evaluation's own account (get: the owner of "
          "one that exists)"),
    Grant(ROLES, ("get", "create"), Scope.RUNS, When.PER_EVALUATION,
          "children.ensure: its results-writer Role (no escalate: the "
          "operator holds configmaps patch here itself)"),
    Grant(ROLE_BINDINGS, ("get", "create"), Scope.RUNS, When.PER_EVALUATION,
          "children.ensure: that Role bound to that account (no bind: "
          "likewise)"),
    Grant(CRDS, ("list", "watch"), Scope.CLUSTER, When.ALWAYS,
          "Kopf's resource observer"),
    Grant(NAMESPACES, ("list", "watch"), Scope.CLUSTER, When.NAMESPACED,
          "Kopf's namespace observer (not used when cluster-wide)"),
    Grant(NAMESPACES, ("get",), Scope.CLUSTER, When.ALWAYS,
          "namespace_policy.read_rules: an evaluation's Namespace's policy.mlmodelscope.io/* "
          "annotations (NamespacePolicies: each Namespace at most every 10 s)"),
    Grant(NODES, ("get",), Scope.CLUSTER, When.CLUSTER_WIDE,
          "simulated.simulated_node: SimulatedNode instead of ResultsMissing"),
    Grant(CLUSTER_KOPF_PEERINGS, ("get", "list", "watch", "patch"), Scope.CLUSTER,
          When.CLUSTER_WIDE_PEERING,
          "Kopf peering keep-alives; get: peering.Peering.acting (a standby skips its ticks)"),
)  # fmt: skip
"""The operator's ServiceAccount."""

AGENT: tuple[Grant, ...] = (
    Grant(CONFIGMAPS, ("patch",), Scope.RUNS, When.SHARED_ACCOUNT,
          "agent.pod.publish_configmap merge-patches the results ConfigMap (its own namespace "
          "only: a Role per job namespace)"),
)  # fmt: skip
"""The evaluation pods' shared ServiceAccount (``<release>-mlmodelscope-evaluation``), which
exists only with ``evaluationJobs.resultsAccess: service-account``."""

EVALUATION_AGENT: tuple[Grant, ...] = (
    Grant(CONFIGMAPS, ("patch",), Scope.RUNS, When.PER_EVALUATION,
          "agent.pod.publish_configmap merge-patches its evaluation's results ConfigMap (Role "
          "<evaluation>-results-writer, builders.build_results_writer_role)",
          resource_name=OWN_RESULTS),
)  # fmt: skip
"""An evaluation's own ServiceAccount (``<evaluation>-agent``), created by the operator."""


SERVER: tuple[Grant, ...] = (
    Grant(EVALUATIONS, ("create",), Scope.RUNS, When.LAUNCHES,
          "server.launch_cluster.ClusterLaunches.submit: a launch's ModelEvaluations"),
    Grant(EVALUATIONS, ("get", "list"), Scope.RUNS, When.LAUNCHES,
          "ClusterLaunches.current (GET of one launch) and .sync (LIST of the namespace's: "
          "launched ones and a launched sweep's children)"),
    Grant(EVALUATIONS, ("watch",), Scope.RUNS, When.LAUNCHES,
          "ClusterLaunches.follow_watch: the launched evaluations' and sweep children's "
          "phases, from the LIST's resourceVersion"),
    Grant(EVALUATIONS, ("delete",), Scope.RUNS, When.LAUNCHES,
          "ClusterLaunches.cancel, and undoing a launch refused half way (uid precondition)"),
    Grant(SWEEPS, ("create",), Scope.RUNS, When.LAUNCHES,
          "ClusterLaunches.submit_sweep: a sweep launch's EvaluationSweep (the operator "
          "creates its children, which the modelevaluations grants follow)"),
    Grant(SWEEPS, ("list",), Scope.RUNS, When.LAUNCHES,
          "ClusterLaunches._sweeps_gone: the launched sweeps (by launch label) while one has "
          "children not ended, so a deleted sweep's never created children are cancelled"),
    Grant(SWEEPS, ("delete",), Scope.RUNS, When.LAUNCHES,
          "ClusterLaunches.cancel_sweep, and undoing a sweep the store refused (uid "
          "precondition); its children go by the garbage collector"),
    Grant(EVENTS, ("list",), Scope.RUNS, When.LAUNCHES,
          "server.launch_watch.read_events: a launch's evaluation, Job and pods, by field "
          "selector on involvedObject"),
    Grant(PODS, ("list",), Scope.RUNS, When.LAUNCHES,
          "launch_watch.read_events and read_log: the pods of the evaluation's Job, by label"),
    Grant(POD_LOGS, ("get",), Scope.RUNS, When.LAUNCHES,
          "launch_watch.read_log: the tail of the agent container's log (tailLines)"),
    Grant(NODES, ("list",), Scope.CLUSTER, When.NODE_POOLS,
          "server.node_pools.NodePools.read: the Launch form's node pools (labels, taints, "
          "nvidia.com/gpu capacity), one LIST cached 30 s; a 403 leaves the form free-form"),
)  # fmt: skip
"""The results server's ServiceAccount (``<fullname>-server``), which exists only with
``server.launch.namespace``; RUNS is that namespace (the server's own, the release namespace,
is another place unless they are the same); CLUSTER its one cluster-wide read, the Nodes
(left out with ``server.launch.nodePools: false``)."""


@dataclass(frozen=True)
class Install:
    """The chart values that change the RBAC."""

    namespaced: bool = False
    store: bool = False
    peering: bool = False
    shared_account: bool = False
    launches: bool = False
    node_pools: bool = True
    """server.launch.nodePools (the chart's default: true); matters only with launches."""

    def holds(self, when: When) -> bool:
        return {
            When.ALWAYS: True,
            When.STORE: self.store,
            When.CLUSTER_WIDE: not self.namespaced,
            When.NAMESPACED: self.namespaced,
            When.CLUSTER_WIDE_PEERING: self.peering and not self.namespaced,
            When.NAMESPACED_PEERING: self.peering and self.namespaced,
            When.PER_EVALUATION: not self.shared_account,
            When.SHARED_ACCOUNT: self.shared_account,
            When.LAUNCHES: self.launches,
            When.NODE_POOLS: self.launches and self.node_pools,
        }[when]


class Place(Enum):
    """Where a request is made, for ``expected``."""

    RUNS = "a namespace where evaluations run (watched / job namespace)"
    OTHER = "any other namespace (kube-system, default)"
    ALL = "all namespaces at once (--all-namespaces)"
    CLUSTER = "cluster scope (cluster-scoped resources)"


Pair = tuple[Resource, str]


def expected(grants: Iterable[Grant], install: Install, place: Place) -> set[Pair]:
    """The exact (resource, verb) pairs allowed at ``place``; every other pair of ``CHECKED``
    x ``VERBS`` that applies there is denied. For the agent, RUNS is its own namespace."""
    allowed: set[Pair] = set()
    for grant in grants:
        if not install.holds(grant.when) or grant.resource_name:
            continue
        if grant.scope is Scope.CLUSTER:
            holds = place is Place.CLUSTER
        elif grant.scope is Scope.RUNS:
            holds = place is Place.RUNS
        else:  # SERVED: everywhere when cluster-wide, the watched namespaces otherwise
            holds = place is Place.RUNS or (not install.namespaced and place is not Place.CLUSTER)
        if holds:
            allowed.update((grant.resource, verb) for verb in grant.verbs)
    return allowed


def checked_pairs(place: Place) -> list[Pair]:
    """Every pair asked about at ``place``: namespaced resources in a namespace (or all of
    them), cluster-scoped ones at cluster scope."""
    cluster = place is Place.CLUSTER
    return [(r, v) for r in CHECKED if r.namespaced != cluster for v in VERBS]


def named(grants: Iterable[Grant], install: Install, evaluation: str) -> set[tuple[Pair, str]]:
    """What the grants limited to one object allow, by name, in the account's own namespace
    (the only place they hold), for the account of ``evaluation``."""
    return {
        ((grant.resource, verb), grant.resource_name.replace("<evaluation>", evaluation))
        for grant in grants
        if grant.resource_name and install.holds(grant.when)
        for verb in grant.verbs
    }
