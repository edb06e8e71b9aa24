"""Building blocks shared by every spec model.

The pydantic models are the single source of truth for three consumers: the CRD (generated
by :mod:`mlmodelscope.spec.crd`), the CLI and the agent. Two things make that possible:

* every model forbids unknown fields and uses camelCase aliases, like Kubernetes APIs;
* every cross-field constraint is declared once, as a :class:`Rule` carrying both a CEL
  expression (for the API server) and a Python predicate (for ``mlms run``), with one message
  and one field path, so the cluster and the laptop reject the same spec with the same words.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Final

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")


SHOWN_CHARS: Final = 64
"""The most characters of a value a message repeats."""
NOT_SHOWN: Final = "this value (not repeated: it looks like a URI, which may hold credentials)"


def quoted(value: object) -> str:
    """``value`` as an error message repeats it: quoted, escaped and clipped to SHOWN_CHARS.

    A value with ``://`` or ``@`` is not repeated at all: it may carry credentials
    (``user:pass@``, a presigned query), and spec errors reach terminals, CI logs and Events.
    """
    text = value if isinstance(value, str) else repr(value)
    if "://" in text or "@" in text:
        return NOT_SHOWN
    clipped = text[:SHOWN_CHARS] + "..." if len(text) > SHOWN_CHARS else text
    return repr(clipped) if isinstance(value, str) else clipped


def parse_duration(value: str) -> float:
    """Seconds in a Go-style duration such as ``90s``, ``1m30s`` or ``250ms``.

    Kubernetes users write durations this way everywhere (Job TTLs, probes), so the spec does too.
    """
    text = value.strip()
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(
            f"{quoted(value)} is not a duration; "
            "write a number with a unit, e.g. '500ms', '30s', '1m30s'"
        )
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))


def _check_duration(value: Any) -> Any:
    if isinstance(value, str):
        parse_duration(value)
    elif value is not None:
        raise ValueError("must be a duration string with a unit, e.g. '500ms', '30s', '1m30s'")
    return value


Duration = Annotated[
    str,
    BeforeValidator(_check_duration),
    Field(json_schema_extra={"pattern": DURATION_PATTERN}),
]
"""A Go-style duration string, validated on input and kept as written (GitOps-friendly)."""


@dataclass(frozen=True)
class Rule:
    """A cross-field constraint, checked by pydantic locally and by CEL in the API server.

    ``field`` is the camelCase name the error points at, relative to the model the rule sits on;
    ``check`` receives the validated model and returns True when the constraint holds.
    ``explain``, when set, words the local error for the model that fails, naming the value at
    fault (a map key) where the CEL ``message``, a constant, can only describe it.
    """

    cel: str
    message: str
    field: str
    check: Callable[[Any], bool]
    reason: str = "FieldValueInvalid"
    explain: Callable[[Any], str] | None = None


class SpecError(ValueError):
    """A spec problem tied to one field path, so the message can name that path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


def _schema_with_rules(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """Expose a model's rules in its JSON schema, where the CRD generator turns them into
    ``x-kubernetes-validations``."""
    rules: tuple[Rule, ...] = getattr(cls, "rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [
            {
                "rule": r.cel,
                "message": r.message,
                **({"fieldPath": f".{r.field}"} if r.field else {}),
                "reason": r.reason,
            }
            for r in rules
        ]


class SpecModel(BaseModel):
    """Base of every spec model: camelCase aliases, unknown fields rejected, rules enforced."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_default=True,
        allow_inf_nan=False,  # YAML's .inf and .nan: no count, size or rate is infinite
        use_attribute_docstrings=True,
        json_schema_extra=_schema_with_rules,
    )

    rules: ClassVar[tuple[Rule, ...]] = ()
    """Cross-field constraints of this model; see :class:`Rule`."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """``field: null`` (or ``field:`` with nothing after it in YAML) means the field is
        not set, as the API server reads it (it drops nulls, of unknown fields too, before
        validating): a default applies, a required field is reported missing."""
        if not isinstance(data, dict) or not any(v is None for v in data.values()):
            return data
        return {k: v for k, v in data.items() if v is not None}

    @model_validator(mode="after")
    def _enforce_rules(self) -> SpecModel:
        for rule in type(self).rules:
            if not rule.check(self):
                message = rule.explain(self) if rule.explain else rule.message
                raise SpecError(rule.field, message)
        return self


def exactly_one_of(*fields: str) -> Rule:
    """The rule for a Kubernetes-style union: exactly one of the member fields is set."""
    joined = ", ".join(fields)
    cel = "[" + ", ".join(f"has(self.{f})" for f in fields) + "].exists_one(x, x)"
    return Rule(
        cel=cel,
        message=f"set exactly one of {joined}",
        field="",
        check=lambda m: sum(getattr(m, _to_snake(f)) is not None for f in fields) == 1,
    )


def _to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
