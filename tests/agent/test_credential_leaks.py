"""No credential of a run is repeated. Each kind (URI userinfo, a presigned query, the values
of ``credentialsSecretRef``) is forced into a server's or a library's error text, and the
secret must then appear in no sink a namespace reader or the store can see: the result
document and its summary (the ConfigMap's content and the termination message, from which the
operator writes status, conditions and Events), the status the operator writes from them,
every log line, the stored run, the metrics in a real Pushgateway and the spans in a real
Jaeger."""

from __future__ import annotations

import hashlib
import http.server
import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from loopback import Route, Site, redirect, self_signed_context
from s3_server import S3Server, isolated_aws_environment, running_s3_server

from mlmodelscope.agent.digits import digits_evaluation
from mlmodelscope.agent.pod import run_agent
from mlmodelscope.contract.redact import REDACTED, forget_secrets
from mlmodelscope.contract.wire import RESULT_KEY
from mlmodelscope.controller import status as evaluation_status
from mlmodelscope.controller.results import outcome_from_configmap
from mlmodelscope.controller.status import Observed
from mlmodelscope.devtools.telemetry_servers import Jaeger, Pushgateway, http_get
from mlmodelscope.store.store import open_store
from mlmodelscope.telemetry.agent import AgentTelemetry

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

PARENT_SPAN = "00f067aa0ba902b7"


def echoing(code: int) -> Route:
    """Answer ``code`` with a reason phrase that repeats the request target and its
    Authorization header, as some servers' error pages do."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(code, f"denied {h.path} for {h.headers.get('Authorization')}")
        h.send_header("Content-Length", "0")
        h.end_headers()

    return route


@pytest.fixture(params=["http", "https"])
def site(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Site]:
    """The echoing server, over plain HTTP and over TLS with a certificate the agent trusts."""
    context = None
    if request.param == "https":
        context, cert_file = self_signed_context(tmp_path)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    server = Site(context)
    server.routes["/private/m.onnx"] = echoing(401)
    server.routes["/signed/m.onnx"] = echoing(403)
    server.routes["/moved/m.onnx"] = redirect("/gone/m.onnx?token=tok-SECRET-moved-3")
    server.routes["/gone/m.onnx"] = echoing(404)
    yield server
    server.close()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3_server() as server:
        yield server


@dataclass
class Sinks:
    """Everything one run of the Job's entrypoint left where others can read it."""

    document: dict[str, Any]
    texts: dict[str, str]


@pytest.fixture
def job(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    jaeger: Jaeger,
    pushgateway: Pushgateway,
    digits_models: Path,
) -> Iterator[Any]:
    """``job(uri, name)``: run ``mlms agent`` on a digits evaluation of ``uri`` with telemetry
    on, record the result as the operator does, and return every sink's text."""
    isolated_aws_environment(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("MLMS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MLMS_SECRET_DIR", str(tmp_path / "no-secret"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", jaeger.otlp_endpoint)
    monkeypatch.setenv("MLMS_PUSHGATEWAY_URL", pushgateway.url)
    monkeypatch.setenv("MLMS_NAMESPACE", "leaks")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    forget_secrets()

    def run(uri: str, name: str, **model: Any) -> Sinks:
        trace_id = hashlib.sha256(f"{name}{time.time()}".encode()).hexdigest()[:32]
        monkeypatch.setenv("TRACEPARENT", f"00-{trace_id}-{PARENT_SPAN}-01")
        document = digits_evaluation(digits_models, "onnxruntime", name)
        document["metadata"]["namespace"] = "leaks"
        document["spec"]["model"].update(uri=uri, **model)
        document["spec"]["scenario"] = {"batchSizes": [1], "minQueryCount": 5}
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(yaml.safe_dump(document))
        published: list[dict[str, Any]] = []
        code = run_agent(
            str(spec),
            str(tmp_path / f"{name}.json"),
            results_configmap=f"{name}-results",
            termination_log=str(tmp_path / f"{name}.termination"),
            patcher=lambda _ns, _name, body: published.append(body),
            hooks=AgentTelemetry.start,
        )
        assert code != 0
        [patch] = published
        written = tmp_path / f"{name}.json"  # none for a spec the agent could not read
        raw = written.read_text() if written.exists() else patch["data"][RESULT_KEY]
        result = json.loads(raw)
        outcome = outcome_from_configmap(patch, generation=1)
        assert outcome is not None and outcome.error is not None
        running = {"observedGeneration": 1, "jobName": name, "phase": "Running"}
        change = evaluation_status.failed(
            Observed.of(running),
            1,
            name,
            "EvaluationFailed",
            outcome.error,
            evaluation_status.now(),
            outcome,
        )
        out, err = capfd.readouterr()
        texts = {
            "result document": raw,
            "termination message": (tmp_path / f"{name}.termination").read_text(),
            "results ConfigMap": json.dumps(patch),
            "status, conditions and Event": json.dumps([change.patch, str(change.event)]),
            "log lines": caplog.text + out + err,
        }
        if result["run_id"] is not None:  # a spec the agent could not read runs nothing
            with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
                assert store.record(result)
            with sqlite3.connect(tmp_path / "runs.db") as db:
                rows = [list(row) for row in db.execute("SELECT * FROM runs")]
            texts["stored run"] = json.dumps(rows, default=str)
            texts["pushed metrics"] = http_get(f"{pushgateway.url}/metrics").decode()
            texts["spans in Jaeger"] = json.dumps(jaeger.trace(trace_id, min_spans=2))
        return Sinks(result, texts)

    yield run
    forget_secrets()


def assert_nowhere(sinks: Sinks, *secrets: str) -> None:
    for secret in secrets:
        leaked = [sink for sink, text in sinks.texts.items() if secret in text]
        assert not leaked, f"{secret!r} leaked into {leaked}"


def test_uri_userinfo_echoed_by_a_server_is_redacted_everywhere(job: Any, site: Site) -> None:
    uri = site.url("/private/m.onnx", userinfo="alice:pw-SECRET-userinfo-1@")
    sinks = job(uri, "leak-userinfo")
    error = sinks.document["error"]
    assert error["field"] == "spec.model.uri"
    assert "HTTP 401 denied /private/m.onnx for Basic REDACTED" in error["message"]
    assert_nowhere(sinks, "pw-SECRET-userinfo-1", "YWxpY2U6cHctU0VDUkVULXVzZXJpbmZvLTE=")


def test_a_presigned_query_echoed_by_a_server_is_redacted_everywhere(job: Any, site: Site) -> None:
    uri = site.url("/signed/m.onnx?X-Amz-Signature=sig-SECRET-2&X-Amz-Expires=60")
    sinks = job(uri, "leak-presigned")
    message = sinks.document["error"]["message"]
    assert "HTTP 403 denied /signed/m.onnx?X-Amz-Signature=REDACTED&X-Amz-Expires=60" in message
    assert_nowhere(sinks, "sig-SECRET-2")


def test_a_redirect_target_a_server_echoes_is_redacted_everywhere(job: Any, site: Site) -> None:
    """The secret is in no spec: the server redirects to a URL with a token, then echoes it
    without its scheme in a 404. Redacting by shape still finds it in the URL it logged."""
    sinks = job(site.url("/moved/m.onnx"), "leak-redirect")
    message = sinks.document["error"]["message"]
    assert "HTTP 404" in message and "token=REDACTED" in message
    assert_nowhere(sinks, "tok-SECRET-moved-3")


def test_secret_values_a_library_quotes_are_redacted_everywhere(
    job: Any, s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``credentialsSecretRef``'s Secret as the Job gives it (variables and files): a session
    token with a line break makes the HTTP library refuse the header, quoting the token."""
    token = "tok-SECRET-session-4\nsecond-line"
    secret = {**s3.secret_data, "AWS_SESSION_TOKEN": token}
    folder = tmp_path / "secret"
    folder.mkdir()
    for key, value in secret.items():
        monkeypatch.setenv(key, value)
        (folder / key).write_text(value)
    monkeypatch.setenv("MLMS_SECRET_DIR", str(folder))
    bucket = s3.put(s3.new_bucket(), "m.onnx", b"not a model")
    sinks = job(bucket, "leak-secret-values", credentialsSecretRef={"name": "s3-credentials"})
    assert REDACTED in sinks.document["error"]["message"]
    assert_nowhere(
        sinks,
        "tok-SECRET-session-4",
        s3.secret_access_key,
    )


def test_s3_userinfo_is_refused_before_anything_runs(job: Any, digits_models: Path) -> None:
    """The issue's hostile URI: refused by the spec, naming the field; the secret shown
    nowhere (userinfo in an s3:// URI can never be valid)."""
    sinks = job("s3://AKIAEXAMPLE:secretkey@bucket/m.onnx", "leak-s3-userinfo")
    error = sinks.document["error"]
    assert error["field"] == "spec.model.uri"
    assert "credentialsSecretRef" in error["message"]
    assert_nowhere(sinks, "secretkey", "AKIAEXAMPLE")
