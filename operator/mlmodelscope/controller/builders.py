"""Every object the operator creates, built by pure functions from the evaluation and settings.

Nothing here talks to the cluster, so each object is unit-tested as a dict. The pod follows
Pod Security ``restricted`` (non-root, no privilege escalation, all capabilities dropped,
RuntimeDefault seccomp, read-only root filesystem with emptyDir volumes for what must be
written) and gets model credentials only through ``envFrom`` of the referenced Secret.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import yaml

from mlmodelscope import API_GROUP, API_VERSION
from mlmodelscope.contract.wire import (
    CONTAINER_NAME,
    EXIT_SPEC_ERROR,
    PRICE_ENV,
    PRICE_SOURCE_ENV,
    PVC_ROOT,
    RESULT_KEY,
    RESULTS_DIR,
    SECRET_DIR,
    SPEC_DIR,
    SPEC_KEY,
    TERMINATION_LOG,
)
from mlmodelscope.controller import names, tracing
from mlmodelscope.controller.pricing import choose_price
from mlmodelscope.controller.settings import PER_EVALUATION, OperatorSettings
from mlmodelscope.spec import ModelEvaluation, parse_duration
from mlmodelscope.spec.document import KIND
from mlmodelscope.spec.evaluation import Device, ResourceList, Resources
from mlmodelscope.spec.manifest import ANNOTATION_MANIFEST
from mlmodelscope.spec.quantity import quantity_value
from mlmodelscope.spec.uris import pvc_claims

YAML_DUMPER: Final = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's emitter where PyYAML was built with it (its wheels are): the same document as
``yaml.safe_dump`` writes, for far less CPU, on every evaluation's spec ConfigMap."""

CACHE_DIR: Final = "/var/cache/mlmodelscope"
TMP_DIR: Final = "/tmp"
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
OTEL_SERVICE_NAME: Final = "mlmodelscope-agent"
RBAC_API: Final = "rbac.authorization.k8s.io"


def owner_reference(evaluation: ModelEvaluation) -> dict[str, Any]:
    """The evaluation as controller owner: deleting it garbage-collects the child."""
    if not evaluation.metadata.uid:
        raise ValueError("the evaluation has no metadata.uid; build children from a stored object")
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": evaluation.metadata.name,
        "uid": evaluation.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def generation_of(evaluation: ModelEvaluation) -> int:
    return evaluation.metadata.generation or 1


def _metadata(evaluation: ModelEvaluation, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": evaluation.metadata.namespace,
        "labels": names.labels(evaluation.metadata.name, generation_of(evaluation)),
        "ownerReferences": [owner_reference(evaluation)],
    }


def _manifest_annotation(annotations: dict[str, str]) -> dict[str, Any]:
    """The resolved modelRef's record, which the agent copies into the result."""
    if ANNOTATION_MANIFEST not in annotations:
        return {}
    return {"annotations": {ANNOTATION_MANIFEST: annotations[ANNOTATION_MANIFEST]}}


def evaluation_document(evaluation: ModelEvaluation) -> dict[str, Any]:
    """The evaluation as the agent reads it: identity plus the validated spec."""
    meta = evaluation.metadata
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "uid": meta.uid,
            "generation": generation_of(evaluation),
            **({"labels": dict(meta.labels)} if meta.labels else {}),
            **_manifest_annotation(meta.annotations),
        },
        "spec": evaluation.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def build_spec_configmap(evaluation: ModelEvaluation) -> dict[str, Any]:
    """ConfigMap ``<name>-spec``: the evaluation YAML the agent loads (mounted read-only)."""
    text = yaml.dump(evaluation_document(evaluation), Dumper=YAML_DUMPER, sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(evaluation, names.spec_configmap_name(evaluation.metadata.name)),
        "data": {SPEC_KEY: text},
    }


def build_results_configmap(evaluation: ModelEvaluation) -> dict[str, Any]:
    """ConfigMap ``<name>-results``, created empty so the agent only needs ``patch`` on it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(evaluation, names.results_configmap_name(evaluation.metadata.name)),
        "data": {},
    }


def _access_metadata(evaluation: ModelEvaluation, name: str) -> dict[str, Any]:
    """Like every child's, without the generation label: these serve every generation."""
    metadata = _metadata(evaluation, name)
    metadata["labels"].pop(names.LABEL_GENERATION)
    return metadata


def build_agent_service_account(evaluation: ModelEvaluation) -> dict[str, Any]:
    """ServiceAccount ``<name>-agent``: the identity of this evaluation's pods alone, so that
    what it may do (:func:`build_results_writer_role`) is this evaluation's business only."""
    name = names.agent_service_account_name(evaluation.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _access_metadata(evaluation, name),
        "automountServiceAccountToken": True,  # the agent patches its results with the token
    }


def build_results_writer_role(evaluation: ModelEvaluation) -> dict[str, Any]:
    """Role ``<name>-results-writer``: ``patch`` on this evaluation's results ConfigMap and
    nothing else (the agent reads nothing through the API: the spec is a volume)."""
    name = names.results_writer_name(evaluation.metadata.name)
    results = names.results_configmap_name(evaluation.metadata.name)
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": _access_metadata(evaluation, name),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [results],
                "verbs": ["patch"],
            }
        ],
    }


def build_results_writer_binding(evaluation: ModelEvaluation) -> dict[str, Any]:
    """RoleBinding ``<name>-results-writer``: that Role, to that ServiceAccount only."""
    name = names.results_writer_name(evaluation.metadata.name)
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "RoleBinding",
        "metadata": _access_metadata(evaluation, name),
        "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": name},
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": names.agent_service_account_name(evaluation.metadata.name),
                "namespace": evaluation.metadata.namespace,
            }
        ],
    }


def pod_service_account(evaluation: ModelEvaluation, settings: OperatorSettings) -> str | None:
    """The ServiceAccount the evaluation's pods run as: its own with per-evaluation results
    access, else the configured one (None: the namespace's default)."""
    if settings.results_access == PER_EVALUATION:
        return names.agent_service_account_name(evaluation.metadata.name)
    return settings.job_service_account


def trace_context(evaluation: ModelEvaluation) -> tuple[str, str]:
    """(trace id, W3C traceparent) of the evaluation's current run, derived from uid and
    generation: deterministic, so a retried handler builds the same Job and the trace id is
    known before the agent starts. The parent span it names is the reconcile that creates the
    Job, which the operator exports with exactly that id (:mod:`.tracing`)."""
    trace_id, span_id = tracing.run_ids(evaluation.metadata.uid or "", generation_of(evaluation))
    return trace_id, tracing.traceparent(trace_id, span_id)


def _quantities(resources: ResourceList) -> dict[str, str]:
    values = {
        "cpu": resources.cpu,
        "memory": resources.memory,
        "ephemeral-storage": resources.ephemeral_storage,
    }
    return {k: str(v) for k, v in values.items() if v is not None}


def memory_limit(resources: Resources, default: str | None) -> str | None:
    """The agent container's memory limit: the spec's own; else the operator's default
    (``MLMS_OPERATOR_DEFAULT_MEMORY_LIMIT``), raised to the spec's memory request when that is
    larger, since the API server refuses a limit below the request; None when neither is set.
    Without a request Kubernetes makes the request equal to the limit."""
    if resources.limits.memory is not None:
        return str(resources.limits.memory)
    if default is None:
        return None
    request = resources.requests.memory
    if request is not None and quantity_value(request) > quantity_value(default):
        return str(request)
    return default


def _resources(evaluation: ModelEvaluation, settings: OperatorSettings) -> dict[str, Any]:
    hardware = evaluation.spec.hardware
    requests = _quantities(hardware.resources.requests)
    limits = _quantities(hardware.resources.limits)
    memory = memory_limit(hardware.resources, settings.default_memory_limit)
    if memory is not None:
        limits["memory"] = memory
    if hardware.gpu_count:
        limits[GPU_RESOURCE] = str(hardware.gpu_count)
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def _env(
    evaluation: ModelEvaluation, settings: OperatorSettings, image: str
) -> list[dict[str, Any]]:
    def field(name: str, path: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}

    name = evaluation.metadata.name
    env: list[dict[str, Any]] = [
        {"name": "MLMS_IMAGE", "value": image},
        field("MLMS_POD_NAME", "metadata.name"),
        field("MLMS_NODE_NAME", "spec.nodeName"),
        field("MLMS_NAMESPACE", "metadata.namespace"),
        {"name": "MLMS_CACHE_DIR", "value": CACHE_DIR},
        {"name": "HOME", "value": TMP_DIR},
        {"name": "OTEL_SERVICE_NAME", "value": OTEL_SERVICE_NAME},
        {
            "name": "OTEL_RESOURCE_ATTRIBUTES",
            "value": "k8s.namespace.name=$(MLMS_NAMESPACE),k8s.pod.name=$(MLMS_POD_NAME),"
            f"mlmodelscope.evaluation={name}",
        },
    ]
    if settings.otlp_endpoint:
        _, traceparent = trace_context(evaluation)
        env.append({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": settings.otlp_endpoint})
        env.append({"name": "TRACEPARENT", "value": traceparent})
    if settings.pushgateway_url:
        env.append({"name": "MLMS_PUSHGATEWAY_URL", "value": settings.pushgateway_url})
    hardware = evaluation.spec.hardware
    price = choose_price(hardware.node_selector, settings.pool_prices, settings.price_per_node_hour)
    if price is not None:
        env.append({"name": PRICE_ENV, "value": repr(price.per_node_hour)})
        env.append({"name": PRICE_SOURCE_ENV, "value": price.source})
    env.extend({"name": k, "value": v} for k, v in settings.fetch.to_env().items())
    return env


def agent_command(evaluation: ModelEvaluation) -> list[str]:
    """The container command: the agent, reading the mounted spec, publishing results."""
    return [
        "mlms",
        "agent",
        "--spec",
        f"{SPEC_DIR}/{SPEC_KEY}",
        "--output",
        f"{RESULTS_DIR}/{RESULT_KEY}",
        "--results-configmap",
        names.results_configmap_name(evaluation.metadata.name),
    ]


def image_for(evaluation: ModelEvaluation, settings: OperatorSettings) -> str:
    """spec.framework.image, else the operator's image for the framework and device."""
    spec = evaluation.spec
    return spec.framework.image or settings.image_for(spec.framework.name, spec.hardware.device)


def _container(evaluation: ModelEvaluation, settings: OperatorSettings) -> dict[str, Any]:
    image = image_for(evaluation, settings)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": agent_command(evaluation),
        "env": _env(evaluation, settings, image),
        "resources": _resources(evaluation, settings),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "spec", "mountPath": SPEC_DIR, "readOnly": True},
            {"name": "results", "mountPath": RESULTS_DIR},
            {"name": "cache", "mountPath": CACHE_DIR},
            {"name": "tmp", "mountPath": TMP_DIR},
            *(
                {"name": _claim_volume(c), "mountPath": f"{PVC_ROOT}/{c}", "readOnly": True}
                for c in pvc_claims(evaluation.spec)
            ),
        ],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    secret = evaluation.spec.model.credentials_secret_ref
    if secret is not None:
        # as variables for boto3, and as files so the agent knows every value to redact
        container["envFrom"] = [{"secretRef": {"name": secret.name}}]
        container["volumeMounts"].append(
            {"name": CREDENTIALS_VOLUME, "mountPath": SECRET_DIR, "readOnly": True}
        )
    return container


CREDENTIALS_VOLUME = "model-credentials"
"""The volume of ``credentialsSecretRef``'s Secret, mounted read-only at SECRET_DIR."""


def _claim_volume(claim: str) -> str:
    return names.child_name("pvc-" + claim.replace(".", "-"), "")


def _scheduling(evaluation: ModelEvaluation, settings: OperatorSettings) -> dict[str, Any]:
    hardware = evaluation.spec.hardware
    node_selector = dict(hardware.node_selector)
    tolerations = [
        t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in hardware.tolerations
    ]
    runtime_class = hardware.runtime_class_name
    if hardware.device == Device.GPU:
        if hardware.gpu_product:
            node_selector[GPU_PRODUCT_LABEL] = hardware.gpu_product
        gpu_toleration = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
        if gpu_toleration not in tolerations:
            tolerations.append(gpu_toleration)
        runtime_class = runtime_class or settings.runtime_class
    out: dict[str, Any] = {}
    if node_selector:
        out["nodeSelector"] = node_selector
    if tolerations:
        out["tolerations"] = tolerations
    if runtime_class:
        out["runtimeClassName"] = runtime_class
    return out


def _pod_spec(evaluation: ModelEvaluation, settings: OperatorSettings) -> dict[str, Any]:
    spec_cm = names.spec_configmap_name(evaluation.metadata.name)
    uid = settings.run_as_user
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(evaluation, settings)],
        "volumes": [
            {
                "name": "spec",
                "configMap": {
                    "name": spec_cm,
                    "items": [{"key": SPEC_KEY, "path": SPEC_KEY}],
                },
            },
            {"name": "results", "emptyDir": {}},
            {"name": "cache", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
            *(
                {
                    "name": _claim_volume(c),
                    "persistentVolumeClaim": {"claimName": c, "readOnly": True},
                }
                for c in pvc_claims(evaluation.spec)
            ),
            *(
                # optional: a missing Secret fails the container on its envFrom, which the
                # start-failure check reads (CreateContainerConfigError), not as a FailedMount
                [{"name": CREDENTIALS_VOLUME, "secret": {"secretName": ref.name, "optional": True}}]
                if (ref := evaluation.spec.model.credentials_secret_ref) is not None
                else []
            ),
        ],
        **_scheduling(evaluation, settings),
    }
    account = pod_service_account(evaluation, settings)
    if account:
        pod["serviceAccountName"] = account
    return pod


def _seconds(duration: str) -> int:
    return max(1, math.ceil(parse_duration(duration)))


def build_job(evaluation: ModelEvaluation, settings: OperatorSettings) -> dict[str, Any]:
    """Job ``<name>-g<generation>``: one pod running the agent, never restarted in place;
    ``retries`` become the backoffLimit and ``timeout`` the activeDeadlineSeconds.

    With a ``kueue.x-k8s.io/queue-name`` label on the evaluation the Job carries the same label
    and is created suspended: Kueue admits it from that LocalQueue and unsuspends it (Kueue's
    own webhook would suspend it too; creating it suspended means no pod starts before
    admission even where that webhook does not run)."""
    spec = evaluation.spec
    generation = generation_of(evaluation)
    metadata = _metadata(evaluation, names.job_name(evaluation.metadata.name, generation))
    queue = names.kueue_queue(evaluation.metadata.labels)
    if queue:
        metadata["labels"][names.LABEL_KUEUE_QUEUE] = queue
    job_spec: dict[str, Any] = {
        "backoffLimit": spec.retries,
        "activeDeadlineSeconds": _seconds(spec.timeout),
        "template": {
            "metadata": {"labels": names.labels(evaluation.metadata.name, generation)},
            "spec": _pod_spec(evaluation, settings),
        },
    }
    if queue:
        job_spec["suspend"] = True
    if spec.ttl_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = _seconds(spec.ttl_after_finished)
    elif settings.job_ttl_seconds is not None:
        job_spec["ttlSecondsAfterFinished"] = settings.job_ttl_seconds
    if settings.pod_failure_policy:
        job_spec["podFailurePolicy"] = {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER_NAME,
                        "operator": "In",
                        "values": [EXIT_SPEC_ERROR],
                    },
                },
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]
        }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


def build_event(
    evaluation: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    timestamp: str,
    instance: str,
) -> dict[str, Any]:
    """A core/v1 Event about the evaluation, shaped as Kopf posts them (for code that runs
    outside Kopf's handlers: the record retry thread)."""
    meta = evaluation.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": "mlmodelscope-", "namespace": meta.get("namespace")},
        "involvedObject": {
            "apiVersion": evaluation.get("apiVersion", f"{API_GROUP}/{API_VERSION}"),
            "kind": evaluation.get("kind", KIND),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": names.MANAGED_BY},
        "reportingComponent": names.MANAGED_BY,
        "reportingInstance": instance,
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
    }
