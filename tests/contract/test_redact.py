"""Credentials in URIs are replaced wherever a URI is repeated: the rules, free text, JSON-like
documents and log records (whichever logger makes them)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from mlmodelscope.contract.redact import (
    REDACTED,
    install_log_redaction,
    redact_text,
    redact_tree,
    redact_uri,
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
