"""Kubernetes label syntax, for the spec fields that become a pod's nodeSelector and tolerations.

The API server checks these only when the Job's pod is created, long after the spec was
accepted; here they are checked where the spec is: by pydantic (``mlms validate``, ``mlms
run``, the dashboard's launch API) and by the CRD (a pattern, or a CEL rule over a map's keys,
which a structural schema cannot constrain otherwise). The regular expressions are written
for both engines: no backslashes (CEL string literals would need them escaped) and whole-string
anchors, matched with ``re.fullmatch`` here as RE2 matches ``$`` only at the end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field

from mlmodelscope.spec.base import Rule, quoted

MAX_LABEL_VALUE: Final = 63
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
"""A Kubernetes label value (at most 63 characters, may be empty): what a nodeSelector value
and a toleration's value must be."""
MAX_LABEL_KEY: Final = 253 + 1 + 63
"""The longest label key: a 253-character prefix, '/' and a 63-character name."""
LABEL_KEY_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
"""The shape of a label key (a qualified name): an optional DNS subdomain and '/', then a name."""
LABEL_KEY_LENGTHS: Final = r"^([^/]{1,253}/)?[^/]{1,63}$"
"""The lengths of a label key's parts: a prefix of at most 253 characters, a name of at most 63."""

LABEL_KEY_FIX: Final = (
    "write a name of at most 63 characters (letters, digits, '-', '_' and '.', beginning and "
    "ending with a letter or digit), optionally after a DNS subdomain prefix of at most 253 "
    "characters (lower-case letters, digits, '-' and '.') and '/', e.g. nvidia.com/gpu.product"
)
LABEL_VALUE_FIX: Final = (
    "write at most 63 characters (letters, digits, '-', '_' and '.', beginning and ending "
    "with a letter or digit), or nothing"
)


def is_label_key(key: str) -> bool:
    """Whether ``key`` is a label key the API server accepts (its IsQualifiedName)."""
    return (
        len(key) <= MAX_LABEL_KEY
        and re.fullmatch(LABEL_KEY_PATTERN, key) is not None
        and re.fullmatch(LABEL_KEY_LENGTHS, key) is not None
    )


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a label value the API server accepts (its IsValidLabelValue)."""
    return len(value) <= MAX_LABEL_VALUE and re.fullmatch(LABEL_VALUE_PATTERN, value) is not None


def label_key_cel(expression: str) -> str:
    """CEL that is true when the string ``expression`` is a label key; the size test first, so
    a huge key costs one comparison at run time, not two regular expressions over it."""
    return (
        f"{expression}.size() <= {MAX_LABEL_KEY} && {expression}.matches('{LABEL_KEY_PATTERN}') "
        f"&& {expression}.matches('{LABEL_KEY_LENGTHS}')"
    )


def _label_value(value: str) -> str:
    if not is_label_value(value):
        raise ValueError(f"{quoted(value)} is not a label value: {LABEL_VALUE_FIX}")
    return value


LabelValue = Annotated[
    str,
    AfterValidator(_label_value),
    Field(json_schema_extra={"maxLength": MAX_LABEL_VALUE, "pattern": LABEL_VALUE_PATTERN}),
]
"""A label value: refused locally with the fix, by the CRD with its pattern and maxLength."""


def label_keys_rule(field: str, attribute: str) -> Rule:
    """Every key of the map ``field`` (attribute ``attribute``) is a label key. The CRD cannot
    constrain a map's keys in its schema, so this is a CEL rule over them; the map's
    maxProperties bounds its cost."""

    def bad_keys(m: Any) -> list[str]:
        keys: Mapping[str, Any] = getattr(m, attribute)
        return [k for k in keys if not is_label_key(k)]

    return Rule(
        cel=f"!has(self.{field}) || self.{field}.all(k, {label_key_cel('k')})",
        message=f"a key is not a label key: {LABEL_KEY_FIX}",
        field=field,
        check=lambda m: not bad_keys(m),
        explain=lambda m: f"key {quoted(bad_keys(m)[0])} is not a label key: {LABEL_KEY_FIX}",
    )
