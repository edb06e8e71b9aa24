"""Credentials are never repeated: what we echo has them replaced by ``REDACTED``.

A model URI may carry credentials: ``https://user:pass@host/m.onnx`` (userinfo) or a presigned
query (``?X-Amz-Signature=...``, ``?sig=...``), and ``credentialsSecretRef`` hands the agent
more (``AWS_SECRET_ACCESS_KEY``, a session token). The spec the user submitted keeps them: the
agent needs them to download. Everything the operator and the agent *repeat* (status messages,
conditions, Events, log lines, error messages, the result document, spans) passes through
:func:`redact_text`, which works two ways:

- by shape: every URI in the text keeps its host and path but not its userinfo or secret
  query values;
- by value: every secret this process was told of (:func:`remember_secrets`) is replaced
  wherever it appears, in the forms a library may quote it (as written, percent-encoded,
  escaped as ``repr`` writes it), because a library's error text repeats what it was given
  without its URI (``Invalid bucket name "AKIA...:secret@bucket"``).

Both sides import it (the agent redacts what it writes, the operator what it writes into
status and Events, and both install :func:`install_log_redaction`), so the rules are one.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
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
    """Free text (an error message, a log line) with every URI in it redacted and every
    remembered secret replaced."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda match: redact_uri(match.group(0)), text)
    known = _known.pattern
    return text if known is None else known.sub(REDACTED, text)


# --------------------------------------------------------------------------- known secrets

MIN_SECRET_LENGTH: Final = 4
"""Shorter values are not replaced by value (every ``"ab"`` in every message would go);
inside a URI they are still redacted by shape."""


def secrets_in_uri(uri: str) -> set[str]:
    """The credential-bearing parts of one URI: its userinfo (whole, user, password) and the
    values of its secret query or fragment parameters, as written and decoded."""
    _, sep, rest = uri.partition("://")
    if not sep:
        return set()
    found: set[str] = set()
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        userinfo = authority.rpartition("@")[0]
        user, _, password = userinfo.partition(":")
        found |= {userinfo, user, password}
        plain_user, plain_password = urllib.parse.unquote(user), urllib.parse.unquote(password)
        found |= {plain_user, plain_password, f"{plain_user}:{plain_password}"}
        basic = f"{plain_user}:{plain_password}".encode()
        found.add(base64.b64encode(basic).decode("ascii"))  # as an Authorization header
    before_fragment, _, fragment = tail.partition("#")
    query = before_fragment.partition("?")[2]
    for parameters in (query, fragment):
        for part in parameters.split("&"):
            name, equals, value = part.partition("=")
            if equals and value and is_secret_parameter(name):
                found |= {value, urllib.parse.unquote_plus(value)}
    return found


def secrets_in_tree(value: Any) -> set[str]:
    """The credential-bearing parts of every URI among the strings of a JSON-like value (a
    spec as submitted, before any redaction)."""
    found: set[str] = set()
    for text in _strings(value):
        if "://" in text:
            for match in _URL_IN_TEXT.finditer(text):
                found |= secrets_in_uri(match.group(0))
    return found


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def quoted_forms(secret: str) -> set[str]:
    """``secret`` as a library may repeat it: as written, without surrounding whitespace,
    percent-encoded (path or form style) and escaped as ``repr`` of text or bytes writes it."""
    forms = {secret, secret.strip()}
    for value in list(forms):
        forms.add(urllib.parse.quote(value, safe=""))
        forms.add(urllib.parse.quote_plus(value, safe=""))
        forms.add(repr(value)[1:-1])
        forms.add(repr(value.encode())[2:-1])
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


class _Known:
    """The secrets this process was told of, and one pattern that finds any of them."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.lock = threading.Lock()

    def add(self, secrets: Iterable[str]) -> None:
        forms = set().union(*(quoted_forms(s) for s in secrets if s))
        with self.lock:
            if forms <= self.values:
                return
            self.values |= forms
            # longest first, so a secret containing another is replaced whole
            ordered = sorted(self.values, key=lambda v: (-len(v), v))
            self.pattern = re.compile("|".join(re.escape(v) for v in ordered))

    def clear(self) -> None:
        with self.lock:
            self.values, self.pattern = set(), None


_known = _Known()


def remember_secrets(secrets: Iterable[str]) -> None:
    """From now on, replace each of ``secrets`` (and the forms a library may quote it in)
    wherever this process redacts text. Values shorter than :data:`MIN_SECRET_LENGTH` are
    ignored."""
    _known.add(secrets)


def forget_secrets() -> None:
    """Replace no remembered value any more (a new run in the same process, tests)."""
    _known.clear()


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
