"""Credentials in URIs are replaced wherever a URI is repeated: the rules, free text, JSON-like
documents and log records (whichever logger makes them)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from mlmodelscope.contract.redact import (
    REDACTED,
    forget_secrets,
    install_log_redaction,
    redact_text,
    redact_tree,
    redact_uri,
    remember_secrets,
    secrets_in_tree,
    secrets_in_uri,
)


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        # userinfo, with and without a password (a lone user name may be a token)
        ("https://alice:s3cret@models.example/m.onnx", "https://REDACTED@models.example/m.onnx"),
        ("https://ghp_token@host:8443/m.onnx", "https://REDACTED@host:8443/m.onnx"),
        ("http://u:p%40ss@127.0.0.1:9/x", "http://REDACTED@127.0.0.1:9/x"),
        # S3 presigned, signature version 4 and 2; other parameters kept as written
        (
            "https://b.s3.amazonaws.com/m.onnx?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=AKIAEXAMPLE%2F20240101%2Fus-east-1&X-Amz-Date=20240101T000000Z"
            "&X-Amz-Expires=3600&X-Amz-Security-Token=FwoGZX&X-Amz-Signature=abc123",
            "https://b.s3.amazonaws.com/m.onnx?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=REDACTED&X-Amz-Date=20240101T000000Z"
            "&X-Amz-Expires=3600&X-Amz-Security-Token=REDACTED&X-Amz-Signature=REDACTED",
        ),
        (
            "https://b.s3.amazonaws.com/m?AWSAccessKeyId=AKIA&Expires=1&Signature=xyz%3D",
            "https://b.s3.amazonaws.com/m?AWSAccessKeyId=REDACTED&Expires=1&Signature=REDACTED",
        ),
        # Google Cloud Storage, Azure SAS, generic tokens and API keys
        (
            "https://storage.googleapis.com/b/m?X-Goog-Credential=sa%40p&X-Goog-Signature=0f",
            "https://storage.googleapis.com/b/m?X-Goog-Credential=REDACTED&X-Goog-Signature=REDACTED",
        ),
        (
            "https://acct.blob.core.windows.net/c/m.onnx?sv=2022-11-02&sp=r&sig=AbC%2B",
            "https://acct.blob.core.windows.net/c/m.onnx?sv=2022-11-02&sp=r&sig=REDACTED",
        ),
        (
            "https://h/m?token=t&access_token=a&key=k&v=2",
            "https://h/m?token=REDACTED&access_token=REDACTED&key=REDACTED&v=2",
        ),
        ("https://h/m#access_token=abc&state=1", "https://h/m#access_token=REDACTED&state=1"),
        # nothing to hide: unchanged, byte for byte
        ("https://models.example/a%20b/m.onnx?v=2&x", "https://models.example/a%20b/m.onnx?v=2&x"),
        ("s3://bucket/key/model.tar.gz", "s3://bucket/key/model.tar.gz"),
        ("pvc://claim/models/m.onnx", "pvc://claim/models/m.onnx"),
        ("models/m.onnx", "models/m.onnx"),
        ("https://h/m?token=", "https://h/m?token="),
    ],
)
def test_redact_uri(uri: str, shown: str) -> None:
    assert redact_uri(uri) == shown


def test_redact_text_finds_every_uri_in_a_message() -> None:
    message = (
        "GET 'https://a:b@one.example/m.onnx' failed; redirected to "
        "http://two.example/m?sig=zzz (was https://three.example/ok)"
    )
    assert redact_text(message) == (
        "GET 'https://REDACTED@one.example/m.onnx' failed; redirected to "
        "http://two.example/m?sig=REDACTED (was https://three.example/ok)"
    )
    assert redact_text("no uri here: a:b@c") == "no uri here: a:b@c"


def test_redact_tree_copies_and_keeps_structure() -> None:
    spec = {
        "model": {"uri": "https://u:pw@h/m.onnx", "inputs": [{"shape": [-1, 3]}]},
        "postprocessing": [{"labels": {"uri": "https://h/l.txt?X-Amz-Signature=s"}}],
        "scenario": {"batchSizes": (1, 8), "seed": 0, "stable": True, "x": None},
    }
    clean = redact_tree(spec)
    assert clean["model"]["uri"] == "https://REDACTED@h/m.onnx"
    assert clean["postprocessing"][0]["labels"]["uri"] == "https://h/l.txt?X-Amz-Signature=REDACTED"
    assert clean["scenario"] == spec["scenario"]
    assert spec["model"]["uri"] == "https://u:pw@h/m.onnx", "the original is not modified"


@pytest.fixture
def redacting_logs() -> Iterator[None]:
    previous = logging.getLogRecordFactory()
    install_log_redaction()
    install_log_redaction()  # idempotent: one wrapper, not two
    yield
    logging.setLogRecordFactory(previous)


def test_log_records_are_redacted_whichever_logger_makes_them(
    redacting_logs: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    uri = "https://alice:s3cret@h/m.onnx?X-Amz-Signature=topsecret"
    logging.getLogger("kopf.objects").warning("Handler failed: %s", uri)
    logging.getLogger("mlmodelscope.agent").info(f"fetching {uri}")
    try:
        raise RuntimeError(f"GET {uri} failed")
    except RuntimeError:
        logging.getLogger("urllib3").exception("boom")
    text = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "s3cret" not in text and "topsecret" not in text
    assert caplog.records[0].getMessage() == (
        f"Handler failed: https://{REDACTED}@h/m.onnx?X-Amz-Signature={REDACTED}"
    )
    assert "RuntimeError: GET https://REDACTED@h/m.onnx" in caplog.text


# ----------------------------------------------------------------------------- by value


@pytest.fixture
def remembered() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


def test_the_credential_parts_of_a_uri_are_found_as_written_and_decoded() -> None:
    assert secrets_in_uri("s3://AKIAEXAMPLE:secretkey@bucket/m.onnx") == {
        "AKIAEXAMPLE:secretkey",
        "AKIAEXAMPLE",
        "secretkey",
        "QUtJQUVYQU1QTEU6c2VjcmV0a2V5",  # the Basic header an HTTP client would send
    }
    found = secrets_in_uri("https://h/m?X-Amz-Signature=a%2Bb&v=2#token=t0k3n")
    assert found == {"a%2Bb", "a+b", "t0k3n"}
    assert secrets_in_uri("https://h/m.onnx?v=2") == set() == secrets_in_uri("models/m.onnx")
    spec = {"model": {"uri": "https://u:pw-1234@h/m"}, "labels": ["see s3://b/k?sig=s1g-99"]}
    assert {"pw-1234", "s1g-99"} <= secrets_in_tree(spec)


def test_a_remembered_secret_is_replaced_in_every_form_a_library_quotes_it(
    remembered: None,
) -> None:
    remember_secrets(secrets_in_uri("s3://AKIAEXAMPLE:secretkey@bucket/m.onnx"))
    boto = 'Invalid bucket name "AKIAEXAMPLE:secretkey@bucket": Bucket name must match'
    assert redact_text(boto) == 'Invalid bucket name "REDACTED@bucket": Bucket name must match'
    remember_secrets(["tok en/+\nline2\n"])
    for quoted in ("b'tok en/+\\nline2\\n'", "tok%20en%2F%2B%0Aline2", "tok+en%2F%2B%0Aline2"):
        assert "tok" not in redact_text(f"header {quoted} refused"), quoted
    assert (
        redact_text("a stripped value: tok en/+\nline2 here") == "a stripped value: REDACTED here"
    )


def test_short_values_are_left_to_the_uri_rules_and_forgetting_stops_replacing(
    remembered: None,
) -> None:
    remember_secrets(["pw", "", "longer-secret"])
    assert redact_text("pw stays; longer-secret goes") == "pw stays; REDACTED goes"
    assert redact_text("https://u:pw@h/m") == "https://REDACTED@h/m"
    forget_secrets()
    assert redact_text("longer-secret") == "longer-secret"


def test_remembered_secrets_reach_log_records_and_trees(
    remembered: None, caplog: pytest.LogCaptureFixture, redacting_logs: None
) -> None:
    remember_secrets(["hunter22"])
    logging.getLogger("some.library").error("auth failed for %s", "hunter22")
    assert "hunter22" not in caplog.text and "auth failed for REDACTED" in caplog.text
    assert redact_tree({"k": ["x hunter22"]}) == {"k": ["x REDACTED"]}


def test_every_span_is_redacted_before_it_is_kept_or_exported(remembered: None) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from mlmodelscope.contract.otel import redacting

    remember_secrets(["tok-SECRET-9"])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(redacting(SimpleSpanProcessor(exporter)))
    tracer = provider.get_tracer("test")
    with pytest.raises(ValueError), tracer.start_as_current_span("fetch", attributes={
        "uri": "https://u:pw@h/m", "tags": ["tok-SECRET-9", "x"], "n": 3,
    }):  # fmt: skip
        raise ValueError("Invalid header value b'tok-SECRET-9'")
    with tracer.start_as_current_span("clean", attributes={"n": 1}):
        pass
    failed, clean = exporter.get_finished_spans()
    shown = str(
        (failed.attributes, [e.attributes for e in failed.events], failed.status.description)
    )
    assert "tok-SECRET-9" not in shown and "pw@" not in shown and "REDACTED" in shown
    assert failed.attributes["n"] == 3 and failed.attributes["tags"] == ("REDACTED", "x")
    assert clean.attributes == {"n": 1}
