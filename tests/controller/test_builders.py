"""The child objects, built as dicts with no cluster: names, ownership, the pod's contract."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import yaml

from mlmodelscope.agent.pod import EXIT_SPEC_ERROR
from mlmodelscope.contract.fetch import FetchPolicy
from mlmodelscope.controller import builders
from mlmodelscope.controller.settings import OperatorSettings
from mlmodelscope.spec import ModelEvaluation, parse_evaluation

Make = Callable[..., ModelEvaluation]
SETTINGS = OperatorSettings.from_env({})


def container(job: dict[str, Any]) -> dict[str, Any]:
    containers = job["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(job)["env"]}


def test_every_child_is_owned_and_labelled(make_evaluation: Make) -> None:
    ev = make_evaluation(generation=4)
    for child in (
        builders.build_spec_configmap(ev),
        builders.build_results_configmap(ev),
        builders.build_job(ev, SETTINGS),
    ):
        meta = child["metadata"]
        assert meta["namespace"] == "team-a"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "mlmodelscope.io/v1alpha1",
                "kind": "ModelEvaluation",
                "name": "digits-cpu",
                "uid": "0f5e1c4a-1111-2222-3333-444455556666",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "mlmodelscope-operator"
        assert meta["labels"]["mlmodelscope.io/evaluation"] == "digits-cpu"
        assert meta["labels"]["mlmodelscope.io/generation"] == "4"
    assert builders.build_job(ev, SETTINGS)["metadata"]["name"] == "digits-cpu-g4"


def test_the_agents_access_objects_are_owned_and_serve_every_generation(
    make_evaluation: Make,
) -> None:
    ev = make_evaluation(generation=4)
    job_meta = builders.build_job(ev, SETTINGS)["metadata"]
    for child in (
        builders.build_agent_service_account(ev),
        builders.build_results_writer_role(ev),
        builders.build_results_writer_binding(ev),
    ):
        meta = child["metadata"]
        assert meta["namespace"] == "team-a"
        assert meta["ownerReferences"] == job_meta["ownerReferences"]
        assert meta["labels"]["mlmodelscope.io/evaluation"] == "digits-cpu"
        assert "mlmodelscope.io/generation" not in meta["labels"]


def test_an_evaluations_service_account_may_patch_its_own_results_configmap_and_nothing_else(
    make_evaluation: Make,
) -> None:
    ev = make_evaluation()
    account = builders.build_agent_service_account(ev)
    role = builders.build_results_writer_role(ev)
    binding = builders.build_results_writer_binding(ev)
    assert account["metadata"]["name"] == "digits-cpu-agent"
    assert account["automountServiceAccountToken"] is True
    assert role["metadata"]["name"] == "digits-cpu-results-writer"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [builders.build_results_configmap(ev)["metadata"]["name"]],
            "verbs": ["patch"],
        }
    ]
    assert binding["metadata"]["name"] == "digits-cpu-results-writer"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "digits-cpu-results-writer",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "digits-cpu-agent", "namespace": "team-a"}
    ]
    pod = builders.build_job(ev, SETTINGS)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


def test_long_names_keep_the_access_objects_distinct_and_within_limits(
    make_evaluation: Make,
) -> None:
    first = make_evaluation(name="x" * 60 + "-a")
    second = make_evaluation(name="x" * 60 + "-b")
    for build in (builders.build_agent_service_account, builders.build_results_writer_role):
        a, b = build(first)["metadata"]["name"], build(second)["metadata"]["name"]
        assert a != b and len(a) <= 63 and len(b) <= 63
    role = builders.build_results_writer_role(first)
    assert role["rules"][0]["resourceNames"] == [
        builders.build_results_configmap(first)["metadata"]["name"]
    ]
    binding = builders.build_results_writer_binding(first)
    account = builders.build_agent_service_account(first)
    assert binding["subjects"][0]["name"] == account["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_a_shared_job_service_account_replaces_the_evaluations_own(make_evaluation: Make) -> None:
    """``service-account`` results access: every pod runs as the configured account (which
    may patch every ConfigMap of the namespace), or the namespace's default when none is set."""
    ev = make_evaluation()
    shared = OperatorSettings.from_env({"MLMS_OPERATOR_JOB_SERVICE_ACCOUNT": "evaluations"})
    assert shared.results_access == "service-account"
    pod = builders.build_job(ev, shared)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "evaluations"
    default = OperatorSettings.from_env({"MLMS_OPERATOR_RESULTS_ACCESS": "service-account"})
    assert "serviceAccountName" not in builders.build_job(ev, default)["spec"]["template"]["spec"]


def test_spec_configmap_round_trips_through_the_agents_parser(make_evaluation: Make) -> None:
    ev = make_evaluation(generation=2, scenario={"type": "Server", "targetQPS": 12.5})
    cm = builders.build_spec_configmap(ev)
    assert cm["metadata"]["name"] == "digits-cpu-spec"
    document = yaml.safe_load(cm["data"]["evaluation.yaml"])
    assert document["metadata"] == {
        "name": "digits-cpu",
        "namespace": "team-a",
        "uid": "0f5e1c4a-1111-2222-3333-444455556666",
        "generation": 2,
    }
    again = parse_evaluation(document)
    assert again.spec == ev.spec


def test_spec_configmap_is_written_by_libyaml_and_reads_back_the_same(
    make_evaluation: Make,
) -> None:
    # libyaml's emitter (builders.YAML_DUMPER): Python's text for a plain document; where it
    # folds an escaped line differently, the same document read back.
    assert builders.YAML_DUMPER is yaml.CSafeDumper
    ev = make_evaluation(scenario={"type": "Server", "targetQPS": 12.5})
    document = builders.evaluation_document(ev)
    text = builders.build_spec_configmap(ev)["data"]["evaluation.yaml"]
    assert text == yaml.safe_dump(document, sort_keys=False)
    document["metadata"]["annotations"] = {"note": "Ünïcode — a line long enough to fold " * 4}
    written = yaml.dump(document, Dumper=builders.YAML_DUMPER, sort_keys=False)
    assert yaml.safe_load(written) == document


def test_results_configmap_starts_empty(make_evaluation: Make) -> None:
    cm = builders.build_results_configmap(make_evaluation())
    assert cm["metadata"]["name"] == "digits-cpu-results"
    assert cm["data"] == {}


def test_cpu_job_runs_the_agent_with_the_contract(make_evaluation: Make) -> None:
    ev = make_evaluation(timeout="90s", retries=2, ttlAfterFinished="1h")
    job = builders.build_job(ev, SETTINGS)
    spec = job["spec"]
    assert spec["backoffLimit"] == 2
    assert spec["activeDeadlineSeconds"] == 90
    assert spec["ttlSecondsAfterFinished"] == 3600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert spec["template"]["metadata"]["labels"]["mlmodelscope.io/evaluation"] == "digits-cpu"
    c = container(job)
    assert c["image"] == SETTINGS.image_for(ev.spec.framework.name, ev.spec.hardware.device)
    assert c["command"] == [
        "mlms",
        "agent",
        "--spec",
        "/etc/mlmodelscope/spec/evaluation.yaml",
        "--output",
        "/var/run/mlmodelscope/results/result.json",
        "--results-configmap",
        "digits-cpu-results",
    ]
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = env_of(job)
    assert env["MLMS_IMAGE"] == c["image"]
    assert env["MLMS_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["MLMS_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["MLMS_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["MLMS_CACHE_DIR"] == "/var/cache/mlmodelscope"
    assert env["OTEL_SERVICE_NAME"] == "mlmodelscope-agent"
    assert "mlmodelscope.evaluation=digits-cpu" in env["OTEL_RESOURCE_ATTRIBUTES"]
    assert "k8s.pod.name=$(MLMS_POD_NAME)" in env["OTEL_RESOURCE_ATTRIBUTES"]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env and "TRACEPARENT" not in env
    assert "MLMS_PUSHGATEWAY_URL" not in env
    assert "nvidia.com/gpu" not in str(c["resources"])
    assert "tolerations" not in pod and "nodeSelector" not in pod
    assert pod["serviceAccountName"] == "digits-cpu-agent"  # its own (per-evaluation access)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/mlmodelscope/spec"]]["configMap"]["name"] == "digits-cpu-spec"
    for writable in ("/var/cache/mlmodelscope", "/tmp", "/var/run/mlmodelscope/results"):
        assert volumes[mounts[writable]] == {"name": mounts[writable], "emptyDir": {}}
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "FailJob"
    assert rules[0]["onExitCodes"]["values"] == [EXIT_SPEC_ERROR]


def test_pod_meets_pod_security_restricted(make_evaluation: Make) -> None:
    """The restricted profile's rules, checked field by field (the cluster test lets the
    API server's PodSecurity admission check them too)."""
    pod = builders.build_job(make_evaluation(), SETTINGS)["spec"]["template"]["spec"]
    sc = pod["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"]:
        csc = c["securityContext"]
        assert csc["allowPrivilegeEscalation"] is False
        assert csc["capabilities"] == {"drop": ["ALL"]}
        assert csc["readOnlyRootFilesystem"] is True
        assert "privileged" not in csc and "ports" not in c
    allowed = {"configMap", "emptyDir", "projected", "secret", "downwardAPI",
               "persistentVolumeClaim", "ephemeral", "csi"}  # fmt: skip
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= allowed
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")


def test_gpu_job_asks_for_gpus_tolerates_the_taint_and_pins_the_product(
    make_evaluation: Make,
) -> None:
    ev = make_evaluation(
        hardware={
            "device": "gpu",
            "gpus": 2,
            "gpuProduct": "NVIDIA-H100-80GB-HBM3",
            "nodeSelector": {"pool": "gpu"},
            "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"memory": "16Gi"}},
        },
        framework={"name": "onnxruntime", "executionProvider": "CUDAExecutionProvider"},
    )
    settings = OperatorSettings.from_env({"MLMS_OPERATOR_RUNTIME_CLASS": "nvidia"})
    job = builders.build_job(ev, settings)
    pod = job["spec"]["template"]["spec"]
    assert container(job)["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"memory": "16Gi", "nvidia.com/gpu": "2"},
    }
    assert pod["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["runtimeClassName"] == "nvidia"
    assert container(job)["image"].endswith("-gpu")


def test_gpu_device_without_count_asks_for_one(make_evaluation: Make) -> None:
    job = builders.build_job(make_evaluation(hardware={"device": "gpu"}), SETTINGS)
    assert container(job)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "runtimeClassName" not in job["spec"]["template"]["spec"]


def test_runtime_class_from_the_spec_wins(make_evaluation: Make) -> None:
    ev = make_evaluation(hardware={"device": "gpu", "runtimeClassName": "nvidia-cdi"})
    settings = OperatorSettings.from_env({"MLMS_OPERATOR_RUNTIME_CLASS": "nvidia"})
    pod = builders.build_job(ev, settings)["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia-cdi"


def test_image_override_credentials_service_account_and_telemetry(make_evaluation: Make) -> None:
    ev = make_evaluation(
        framework={"name": "onnxruntime", "image": "example.com/custom:1"},
        model={"uri": "s3://bucket/digits.onnx", "credentialsSecretRef": {"name": "s3-creds"}},
        labels={"kueue.x-k8s.io/queue-name": "gpu-queue"},
    )
    settings = OperatorSettings.from_env(
        {
            "MLMS_OPERATOR_JOB_SERVICE_ACCOUNT": "mlmodelscope-agent",
            "MLMS_OPERATOR_OTLP_ENDPOINT": "http://otel:4318",
            "MLMS_OPERATOR_PUSHGATEWAY_URL": "http://pushgateway:9091",
            "MLMS_OPERATOR_IMAGE_PULL_POLICY": "Always",
        }
    )
    job = builders.build_job(ev, settings)
    c = container(job)
    assert c["image"] == "example.com/custom:1"
    assert c["imagePullPolicy"] == "Always"
    assert c["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    # and as read-only files, so the agent knows every value of the Secret to redact
    assert {
        "name": "model-credentials",
        "secret": {"secretName": "s3-creds", "optional": True},
    } in job["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "model-credentials",
        "mountPath": "/var/run/secrets/mlmodelscope/model-credentials",
        "readOnly": True,
    } in c["volumeMounts"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "mlmodelscope-agent"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    env = env_of(job)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel:4318"
    assert env["MLMS_PUSHGATEWAY_URL"] == "http://pushgateway:9091"
    trace_id, traceparent = builders.trace_context(ev)
    assert env["TRACEPARENT"] == traceparent
    assert traceparent.startswith(f"00-{trace_id}-") and len(trace_id) == 32


def test_the_price_per_node_hour_reaches_the_agent_as_its_cost_section_reads_it(
    make_evaluation: Make,
) -> None:
    from mlmodelscope.agent.cost import price_from_environment

    priced = OperatorSettings.from_env({"MLMS_OPERATOR_PRICE_PER_NODE_HOUR": "3.20"})
    env = {
        e["name"]: e.get("value")
        for e in container(builders.build_job(make_evaluation(), priced))["env"]
    }
    price = price_from_environment(env)
    assert price is not None and price.per_node_hour == 3.2
    assert "MLMS_OPERATOR_PRICE_PER_NODE_HOUR" in price.source
    unpriced = container(builders.build_job(make_evaluation(), SETTINGS))["env"]
    assert "MLMS_PRICE_PER_NODE_HOUR" not in {e["name"] for e in unpriced}


def test_the_selected_pools_price_reaches_the_agent(make_evaluation: Make) -> None:
    """The pool the spec's nodeSelector names has its own price; an evaluation that selects
    another pool, or none, gets the operator's one price."""
    from mlmodelscope.agent.cost import price_from_environment

    settings = OperatorSettings.from_env(
        {
            "MLMS_OPERATOR_PRICE_PER_NODE_HOUR": "3.20",
            "MLMS_OPERATOR_POOL_PRICES": "a100=4.10,cpu=0.40,big=1234567.25",
        }
    )

    def price_for(selector: dict[str, str]) -> tuple[float, str]:
        ev = make_evaluation(hardware={"nodeSelector": selector})
        job = builders.build_job(ev, settings)
        assert job["spec"]["template"]["spec"].get("nodeSelector", {}) == selector
        price = price_from_environment(env_of(job))
        assert price is not None
        return price.per_node_hour, price.source

    pool = "operator setting MLMS_OPERATOR_POOL_PRICES, pool mlmodelscope.io/pool="
    assert price_for({"mlmodelscope.io/pool": "a100"}) == (4.1, pool + "a100")
    assert price_for({"mlmodelscope.io/pool": "cpu", "zone": "b"}) == (0.4, pool + "cpu")
    assert price_for({"mlmodelscope.io/pool": "big"}) == (1234567.25, pool + "big")  # every digit
    fallback = (3.2, "operator setting MLMS_OPERATOR_PRICE_PER_NODE_HOUR")
    assert price_for({"mlmodelscope.io/pool": "t4"}) == fallback
    assert price_for({}) == fallback


def test_job_is_deterministic(make_evaluation: Make) -> None:
    """A retried handler must build exactly the same Job (the 409 path relies on it)."""
    ev = make_evaluation()
    settings = OperatorSettings.from_env({"MLMS_OPERATOR_OTLP_ENDPOINT": "http://otel:4318"})
    assert builders.build_job(ev, settings) == builders.build_job(ev, settings)


def test_pvc_uris_mount_their_claim_read_only(make_evaluation: Make) -> None:
    ev = make_evaluation(model={"uri": "pvc://models.store/digits/digits.onnx"})
    job = builders.build_job(ev, SETTINGS)
    pod = job["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert volume["persistentVolumeClaim"] == {"claimName": "models.store", "readOnly": True}
    assert "." not in volume["name"]
    mount = next(m for m in container(job)["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {
        "name": volume["name"],
        "mountPath": "/var/run/mlmodelscope/pvc/models.store",
        "readOnly": True,
    }


def test_a_dataset_on_another_claim_mounts_that_claim_too(make_evaluation: Make) -> None:
    """The model on one claim, a folder dataset's images on a second and a labels file on a
    third: the Job mounts all three, each once."""
    ev = make_evaluation(
        model={"uri": "pvc://models/digits.onnx"},
        dataset={"type": "imagefolder", "path": "pvc://images/val"},
        postprocessing=[{"labels": {"uri": "pvc://models/labels.txt"}}, {"argmax": {}}],
    )
    job = builders.build_job(ev, SETTINGS)
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in job["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["models", "images"]
    mounted = [m["mountPath"] for m in container(job)["volumeMounts"]]
    assert "/var/run/mlmodelscope/pvc/images" in mounted


def test_settings_ttl_and_disabled_pod_failure_policy(make_evaluation: Make) -> None:
    settings = OperatorSettings.from_env(
        {"MLMS_OPERATOR_JOB_TTL_SECONDS": "600", "MLMS_OPERATOR_POD_FAILURE_POLICY": "false"}
    )
    spec = builders.build_job(make_evaluation(), settings)["spec"]
    assert spec["ttlSecondsAfterFinished"] == 600
    assert "podFailurePolicy" not in spec
    never = OperatorSettings.from_env({"MLMS_OPERATOR_JOB_TTL_SECONDS": "none"})
    assert "ttlSecondsAfterFinished" not in builders.build_job(make_evaluation(), never)["spec"]


def memory(job: dict[str, Any]) -> tuple[str | None, str | None]:
    """(request, limit) of the agent's memory as the Job asks for them."""
    resources = container(job)["resources"]
    return (
        (resources.get("requests") or {}).get("memory"),
        (resources.get("limits") or {}).get("memory"),
    )


def test_a_spec_without_a_memory_limit_gets_the_operators_default(make_evaluation: Make) -> None:
    """No limit in the spec: the default (4Gi), raised to a larger request (the API server
    refuses a limit below the request); the spec's own limit always wins, even a low one."""
    assert memory(builders.build_job(make_evaluation(), SETTINGS)) == (None, "4Gi")

    def job(requests: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
        resources = {"requests": requests, "limits": limits}
        return builders.build_job(make_evaluation(hardware={"resources": resources}), SETTINGS)

    assert memory(job({"memory": "1Gi"}, {})) == ("1Gi", "4Gi")
    assert memory(job({"memory": "6G"}, {})) == ("6G", "6G")
    assert memory(job({"memory": "4Gi"}, {})) == ("4Gi", "4Gi")
    assert memory(job({}, {"memory": "256Mi"})) == (None, "256Mi")
    assert memory(job({"memory": "8Gi"}, {"memory": "16Gi"})) == ("8Gi", "16Gi")
    cpu_only = container(job({"cpu": "2"}, {"cpu": "2"}))["resources"]
    assert cpu_only == {"requests": {"cpu": "2"}, "limits": {"cpu": "2", "memory": "4Gi"}}


def test_the_default_memory_limit_can_be_changed_or_turned_off(make_evaluation: Make) -> None:
    bigger = OperatorSettings.from_env({"MLMS_OPERATOR_DEFAULT_MEMORY_LIMIT": "16Gi"})
    assert memory(builders.build_job(make_evaluation(), bigger)) == (None, "16Gi")
    off = OperatorSettings.from_env({"MLMS_OPERATOR_DEFAULT_MEMORY_LIMIT": "none"})
    assert container(builders.build_job(make_evaluation(), off))["resources"] == {}
    spec_limit = make_evaluation(hardware={"resources": {"limits": {"memory": "1Gi"}}})
    assert memory(builders.build_job(spec_limit, off)) == (None, "1Gi")


def test_the_fetch_policy_reaches_the_agent_as_it_reads_it(make_evaluation: Make) -> None:
    default = FetchPolicy.from_env(env_of(builders.build_job(make_evaluation(), SETTINGS)))
    assert default.deny.has_address(ipaddress.ip_address("127.0.0.1"))
    assert default.deny.has_address(ipaddress.ip_address("::1"))
    assert (default.max_bytes, default.timeout_s, default.deadline_s) == (16 * 2**30, 60, 3600)
    settings = OperatorSettings.from_env(
        {
            "MLMS_OPERATOR_FETCH_ALLOW": "10.0.0.0/8,models.internal",
            "MLMS_OPERATOR_FETCH_DENY": "192.168.0.0/16",
            "MLMS_OPERATOR_FETCH_MAX_BYTES": "1000000",
            "MLMS_OPERATOR_FETCH_TIMEOUT_SECONDS": "5",
            "MLMS_OPERATOR_FETCH_DEADLINE_SECONDS": "120",
        }
    )
    env = env_of(builders.build_job(make_evaluation(), settings))
    assert env["MLMS_FETCH_ALLOW"] == "10.0.0.0/8,models.internal"
    assert env["MLMS_FETCH_DENY"] == "192.168.0.0/16"  # replaces the loopback default
    assert FetchPolicy.from_env(env) == settings.fetch
    assert (settings.fetch.max_bytes, settings.fetch.timeout_s) == (1000000, 5)
