"""Operator settings from MLMS_OPERATOR_* variables: defaults, parsing, clear errors."""

from __future__ import annotations

import pytest

from mlmodelscope import __version__
from mlmodelscope.controller.pricing import DEFAULT_POOL_LABEL, PoolPrices
from mlmodelscope.controller.settings import OperatorSettings, SettingsError
from mlmodelscope.spec.evaluation import Device, FrameworkName


def test_defaults_need_no_environment() -> None:
    settings = OperatorSettings.from_env({})
    assert settings.max_running == 0
    assert settings.max_running_per_namespace == 0
    assert settings.namespaces == ()
    assert settings.peering is None
    assert settings.job_service_account is None
    assert settings.results_access == "per-evaluation"
    assert settings.image_pull_policy == "IfNotPresent"
    assert settings.reconcile_workers == 16
    assert settings.price_per_node_hour is None
    assert settings.pool_prices == PoolPrices(DEFAULT_POOL_LABEL, ())
    image = settings.image_for(FrameworkName.ONNXRUNTIME, Device.CPU)
    assert image == f"ghcr.io/mlmodelscope/agent-onnxruntime:{__version__}-cpu"
    assert settings.image_for(FrameworkName.PYTORCH, Device.GPU).endswith("-gpu")


def test_every_variable_is_read() -> None:
    env = {
        "MLMS_OPERATOR_IMAGE_ONNXRUNTIME_GPU": "registry.local/ort:1-gpu",
        "MLMS_OPERATOR_IMAGE_VERSION": "9.9.9",
        "MLMS_OPERATOR_IMAGE_PULL_POLICY": "Always",
        "MLMS_OPERATOR_MAX_RUNNING": "2",
        "MLMS_OPERATOR_MAX_RUNNING_PER_NAMESPACE": "1",
        "MLMS_OPERATOR_JOB_SERVICE_ACCOUNT": "mlmodelscope-agent",
        "MLMS_OPERATOR_OTLP_ENDPOINT": "http://otel-collector:4318",
        "MLMS_OPERATOR_PUSHGATEWAY_URL": "http://pushgateway:9091",
        "MLMS_OPERATOR_RUNTIME_CLASS": "nvidia",
        "MLMS_OPERATOR_NAMESPACES": "team-a, ml-*",
        "MLMS_OPERATOR_PEERING": "true",
        "MLMS_OPERATOR_POD_FAILURE_POLICY": "false",
        "MLMS_OPERATOR_JOB_TTL_SECONDS": "never",
        "MLMS_OPERATOR_RUN_AS_USER": "1000",
        "MLMS_OPERATOR_RECONCILE_WORKERS": "4",
        "MLMS_OPERATOR_PRICE_PER_NODE_HOUR": "3.20",
        "MLMS_OPERATOR_POOL_LABEL": "cloud.google.com/gke-nodepool",
        "MLMS_OPERATOR_POOL_PRICES": "a100=4.10,cpu=0.40",
    }
    s = OperatorSettings.from_env(env)
    assert s.image_for(FrameworkName.ONNXRUNTIME, Device.GPU) == "registry.local/ort:1-gpu"
    assert s.image_for(FrameworkName.TENSORFLOW, Device.CPU).endswith(":9.9.9-cpu")
    assert (s.max_running, s.max_running_per_namespace) == (2, 1)
    assert s.job_service_account == "mlmodelscope-agent"
    assert s.otlp_endpoint == "http://otel-collector:4318"
    assert s.pushgateway_url == "http://pushgateway:9091"
    assert s.runtime_class == "nvidia"
    assert s.namespaces == ("team-a", "ml-*")
    assert s.peering == "mlmodelscope"
    assert s.pod_failure_policy is False
    assert s.job_ttl_seconds is None
    assert s.run_as_user == 1000
    assert s.reconcile_workers == 4
    assert s.price_per_node_hour == 3.2
    assert s.pool_prices == PoolPrices(
        "cloud.google.com/gke-nodepool", (("a100", 4.1), ("cpu", 0.4))
    )
    assert s.image_pull_policy == "Always"


def test_bad_values_are_all_reported_with_the_variable_name() -> None:
    env = {
        "MLMS_OPERATOR_MAX_RUNNING": "two",
        "MLMS_OPERATOR_MAX_RUNNING_PER_NAMESPACE": "-1",
        "MLMS_OPERATOR_IMAGE_PULL_POLICY": "sometimes",
        "MLMS_OPERATOR_OTLP_ENDPOINT": "otel:4318",
        "MLMS_OPERATOR_PEERING": "Not_A_Name",
        "MLMS_OPERATOR_MAX_RUNING": "3",
        "MLMS_OPERATOR_RECONCILE_WORKERS": "0",
        "MLMS_OPERATOR_PRICE_PER_NODE_HOUR": "-1",
        "MLMS_OPERATOR_POOL_LABEL": "Not A Label",
        "MLMS_OPERATOR_POOL_PRICES": "a100:4",
    }
    with pytest.raises(SettingsError) as info:
        OperatorSettings.from_env(env)
    text = str(info.value)
    assert "MLMS_OPERATOR_MAX_RUNNING='two': expected a whole number >= 0" in text
    assert "MLMS_OPERATOR_MAX_RUNNING_PER_NAMESPACE='-1'" in text
    assert "one of Always, IfNotPresent, Never" in text
    assert "MLMS_OPERATOR_OTLP_ENDPOINT='otel:4318': expected an http:// or https:// URL" in text
    assert "MLMS_OPERATOR_PEERING" in text
    assert "MLMS_OPERATOR_MAX_RUNING is not an operator setting; did you mean" in text
    assert "MLMS_OPERATOR_RECONCILE_WORKERS='0': expected a whole number >= 1" in text
    assert "MLMS_OPERATOR_PRICE_PER_NODE_HOUR='-1': expected a price" in text
    assert "MLMS_OPERATOR_POOL_LABEL='Not A Label': expected a node label key" in text
    assert "MLMS_OPERATOR_POOL_PRICES='a100:4': expected comma-separated POOL=PRICE" in text
    assert len(info.value.problems) == 10


def test_fetch_settings_are_checked_like_the_agent_checks_them() -> None:
    env = {
        "MLMS_OPERATOR_FETCH_ALLOW": "10.0.0.0/33",
        "MLMS_OPERATOR_FETCH_DENY": "not a host",
        "MLMS_OPERATOR_FETCH_MAX_BYTES": "-1",
        "MLMS_OPERATOR_FETCH_TIMEOUT_SECONDS": "0",
        "MLMS_OPERATOR_FETCH_DEADLINE_SECONDS": "soon",
    }
    with pytest.raises(SettingsError) as info:
        OperatorSettings.from_env(env)
    text = str(info.value)
    assert "MLMS_OPERATOR_FETCH_ALLOW='10.0.0.0/33': expected comma-separated CIDRs" in text
    assert "MLMS_OPERATOR_FETCH_DENY='not a host'" in text
    assert "MLMS_OPERATOR_FETCH_MAX_BYTES='-1': expected a whole number of bytes" in text
    assert "MLMS_OPERATOR_FETCH_TIMEOUT_SECONDS='0'" in text
    assert "MLMS_OPERATOR_FETCH_DEADLINE_SECONDS='soon'" in text
    assert len(info.value.problems) == 5


def test_results_access_is_per_evaluation_unless_a_job_service_account_is_chosen() -> None:
    def access(**env: str) -> str:
        return OperatorSettings.from_env(
            {f"MLMS_OPERATOR_{k}": v for k, v in env.items()}
        ).results_access

    assert access() == "per-evaluation"
    assert access(JOB_SERVICE_ACCOUNT="evaluations") == "service-account"  # as before
    assert access(RESULTS_ACCESS="service-account") == "service-account"
    both = {"RESULTS_ACCESS": "service-account", "JOB_SERVICE_ACCOUNT": "evaluations"}
    assert access(**both) == "service-account"
    assert access(RESULTS_ACCESS="per-evaluation") == "per-evaluation"


def test_results_access_refuses_unknown_values_and_a_contradiction() -> None:
    with pytest.raises(SettingsError) as info:
        OperatorSettings.from_env({"MLMS_OPERATOR_RESULTS_ACCESS": "shared"})
    assert "MLMS_OPERATOR_RESULTS_ACCESS='shared': expected per-evaluation or" in str(info.value)
    env = {
        "MLMS_OPERATOR_RESULTS_ACCESS": "per-evaluation",
        "MLMS_OPERATOR_JOB_SERVICE_ACCOUNT": "evaluations",
    }
    with pytest.raises(SettingsError) as info:
        OperatorSettings.from_env(env)
    assert "unset MLMS_OPERATOR_JOB_SERVICE_ACCOUNT" in str(info.value)


def test_peering_name_and_off_values() -> None:
    assert OperatorSettings.from_env({"MLMS_OPERATOR_PEERING": "eval-ops"}).peering == "eval-ops"
    assert OperatorSettings.from_env({"MLMS_OPERATOR_PEERING": "false"}).peering is None
    assert OperatorSettings.from_env({"MLMS_OPERATOR_PEERING": ""}).peering is None


def test_unrelated_variables_are_ignored() -> None:
    OperatorSettings.from_env({"MLMS_CACHE_DIR": "/x", "HOME": "/root"})


def test_default_memory_limit_is_4gi_and_none_or_0_turns_it_off() -> None:
    def limit(value: str) -> str | None:
        env = {"MLMS_OPERATOR_DEFAULT_MEMORY_LIMIT": value}
        return OperatorSettings.from_env(env).default_memory_limit

    assert OperatorSettings.from_env({}).default_memory_limit == "4Gi"
    assert limit("") == "4Gi"
    assert (limit("16Gi"), limit("1.5G"), limit("512Mi")) == ("16Gi", "1.5G", "512Mi")
    assert limit("none") is None and limit("None") is None and limit("0") is None
    assert limit("0Gi") is None


def test_a_default_memory_limit_that_is_no_quantity_or_tiny_is_refused() -> None:
    for bad in ("4GB", "-1Gi", "lots", "4096", "1Mi"):
        with pytest.raises(SettingsError) as info:
            OperatorSettings.from_env({"MLMS_OPERATOR_DEFAULT_MEMORY_LIMIT": bad})
        assert str(info.value).endswith(
            f"MLMS_OPERATOR_DEFAULT_MEMORY_LIMIT={bad!r}: expected a memory quantity of at "
            "least 64Mi (e.g. 4Gi), or none"
        )
