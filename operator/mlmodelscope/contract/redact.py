"""Credentials in a URI are never repeated: what we echo has them replaced by ``REDACTED``.

A model URI may carry credentials: ``https://user:pass@host/m.onnx`` (userinfo) or a presigned
query (``?X-Amz-Signature=...``, ``?sig=...``). The spec the user submitted keeps them: the
agent needs them to download. Everything the operator and the agent *repeat* (status messages,
conditions, Events, log lines, error messages, the result document) passes through this module,
so a URI shown anywhere keeps its host and path but not its secrets.

Both sides import it (the agent redacts what it writes, the operator what it writes into
status and Events, and both install :func:`install_log_redaction`), so the rules are one.
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from typing import Any, Final, TypeVar

REDACTED: Final = "REDACTED"

SECRET_PARAMETERS: Final = frozenset(
    {
        "sig",  # Azure SAS
        "key",  # Google API keys
        "auth",
        "authorization",
        "awsaccesskeyid",  # S3 presigned, signature version 2
        "key-pair-id",  # CloudFront signed URLs
        "access_key",
        "accesskey",
        "pass",
        "pwd",
    }
)
"""Query parameters whose value is a secret, by exact (case-insensitive) name."""

SECRET_WORDS: Final = (
    "signature",  # X-Amz-Signature, X-Goog-Signature, Signature
    "credential",  # X-Amz-Credential, X-Goog-Credential
    "token",  # token, access_token, X-Amz-Security-Token, id_token
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
)
"""Query parameters whose (case-insensitive) name contains one of these hold a secret."""

_URL_IN_TEXT: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
T = TypeVar("T")


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter's value is a credential (``X-Amz-Signature``, ``sig``, ...)."""
    lowered = urllib.parse.unquote_plus(name).lower()
    return lowered in SECRET_PARAMETERS or any(word in lowered for word in SECRET_WORDS)


def _redact_parameters(text: str) -> str:
    """``a=1&X-Amz-Signature=abc`` -> ``a=1&X-Amz-Signature=REDACTED``, other bytes untouched."""
    parts = []
    for part in text.split("&"):
        name, equals, value = part.partition("=")
        if equals and value and is_secret_parameter(name):
            part = f"{name}={REDACTED}"
        parts.append(part)
    return "&".join(parts)


def redact_uri(uri: str) -> str:
    """``uri`` with its userinfo and secret query (or fragment) parameters replaced.

    Works on the text, not a parsed-and-rebuilt URL, so everything else stays byte for byte
    as written (a path or a URI without credentials comes back unchanged).
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = f"{REDACTED}@{authority.rpartition('@')[2]}"
    before_fragment, hash_sign, fragment = tail.partition("#")
    path, question, query = before_fragment.partition("?")
    if query:
        query = _redact_parameters(query)
    if "=" in fragment:
        fragment = _redact_parameters(fragment)
    return f"{scheme}{sep}{authority}{path}{question}{query}{hash_sign}{fragment}"


def redact_text(text: str) -> str:
    """Free text (an error message, a log line) with every URI in it redacted."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: redact_uri(match.group(0)), text)


def redact_tree(value: T) -> T:
    """A copy of a JSON-like value (dicts, lists, strings) with every string redacted;
    keys, numbers and structure are kept."""
    result: Any
    if isinstance(value, str):
        result = redact_text(value)
    elif isinstance(value, dict):
        result = {key: redact_tree(item) for key, item in value.items()}
    elif isinstance(value, list | tuple):
        result = type(value)(redact_tree(item) for item in value)
    else:
        result = value
    return result  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------------ logging


def _redact_record(record: logging.LogRecord) -> None:
    """Redact a record's message (and traceback) as it is created, before any handler, filter
    or Kopf's event poster sees it."""
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: logging reports it, nothing to redact yet
        return
    clean = redact_text(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))


def install_log_redaction() -> None:
    """Redact URIs in every log record of this process, whichever logger made it (ours,
    Kopf's per-object loggers whose records become Events, libraries'). Idempotent."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "mlms_redacting", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _redact_record(record)
        return record

    factory.mlms_redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
