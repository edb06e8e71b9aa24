"""Operator policy: what a ModelEvaluation may ask its Job to use (issue #15, defect 9).

Whoever may create a ModelEvaluation acts through the operator, which creates the Job: without a
policy, the spec could run any image, read any Secret of its namespace into the agent's
environment (``credentialsSecretRef``), mount any PersistentVolumeClaim (``pvc://`` URIs) and
tolerate any taint. The operator checks every evaluation against these settings before it
creates anything for it; a denied one ends Failed/PolicyDenied with a message naming the field,
the value and the setting that would allow it.

Defaults: images only from the repositories of the operator's own agent images (a spec's
``framework.image`` elsewhere is refused until an administrator widens
``MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES``); no Secret references; any claim; any toleration (the
dev cluster and the GPU pool examples need them). The GPU toleration the operator adds itself is
not the spec's, so it is never checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from mlmodelscope.spec import ModelEvaluation

PREFIX: Final = "MLMS_OPERATOR_"
ANY: Final = "*"
_TRUE: Final = ("true", "yes", "on", "1", ANY)
_FALSE: Final = ("false", "no", "off", "0", "none")


@dataclass(frozen=True)
class Allowance:
    """Which names (Secrets, claims, taint keys) a spec may use: all of them, or a set."""

    everything: bool = False
    names: frozenset[str] = frozenset()

    def allows(self, name: str) -> bool:
        return self.everything or name in self.names

    def describe(self) -> str:
        if self.everything:
            return "true"
        return ",".join(sorted(self.names)) or "false"


ALL: Final = Allowance(everything=True)
NONE: Final = Allowance()


def parse_allowance(raw: str) -> Allowance:
    """``true``/``*`` (all), ``false``/``none``/empty (none), or comma-separated names."""
    text = raw.strip()
    if text.lower() in _TRUE:
        return ALL
    if text.lower() in _FALSE or not text:
        return NONE
    items = [part.strip() for part in text.split(",") if part.strip()]
    if any(not _plain_name(item) for item in items):
        raise ValueError(raw)
    return Allowance(names=frozenset(items))


def _plain_name(item: str) -> bool:
    return len(item) <= 253 and all(c.isalnum() or c in "-._/" for c in item)


def parse_prefixes(raw: str) -> tuple[str, ...]:
    """Comma-separated image prefixes (``ghcr.io/acme/``, ``registry.local/agents``) or ``*``."""
    items = tuple(part.strip() for part in raw.split(",") if part.strip())
    if any(" " in item for item in items):
        raise ValueError(raw)
    return items


def repository(image: str) -> str:
    """The image without its digest and tag: ``ghcr.io/x/agent:1.0-cpu`` -> ``ghcr.io/x/agent``
    (a registry port, ``host:5000/agent``, is not a tag)."""
    name = image.partition("@")[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def image_allowed(image: str, prefixes: Iterable[str]) -> bool:
    """Whether ``image`` is under one of ``prefixes``. A prefix matches a whole path segment:
    ``ghcr.io/acme`` allows ``ghcr.io/acme/agent:1`` and ``ghcr.io/acme:1``, never
    ``ghcr.io/acme-evil/agent``; a prefix ending in ``/`` allows everything below it; ``*``
    allows every image; a prefix with a tag or digest allows exactly that image."""
    repo = repository(image)
    for prefix in prefixes:
        if prefix == ANY or image == prefix or repo == prefix:
            return True
        if prefix.endswith("/") and repo.startswith(prefix):
            return True
        if repo.startswith(prefix + "/"):
            return True
    return False


@dataclass(frozen=True)
class Policy:
    """The operator-wide policy (``MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES``,
    ``..._ALLOW_SECRET_REFS``, ``..._ALLOW_PVCS``, ``..._ALLOWED_TOLERATIONS``)."""

    image_prefixes: tuple[str, ...] = ()
    """Where ``spec.framework.image`` may come from, besides the repositories of the operator's
    own agent images (always allowed)."""
    secret_refs: Allowance = field(default=NONE)
    pvcs: Allowance = field(default=ALL)
    tolerations: Allowance = field(default=ALL)
    """Taint keys a spec's ``hardware.tolerations`` may name (a toleration without a key
    tolerates every taint: only allowed with ``true``)."""


def denials(evaluation: ModelEvaluation, policy: Policy, agent_images: Iterable[str]) -> list[str]:
    """Why the policy refuses this evaluation: one message per field and value, naming the
    setting that would allow it; empty when it may run."""
    from mlmodelscope.controller.builders import claims

    spec = evaluation.spec
    problems = []
    image = spec.framework.image
    if image:
        own = sorted({repository(i) for i in agent_images})
        if not image_allowed(image, [*policy.image_prefixes, *own]):
            allowed = ", ".join([*policy.image_prefixes, *own][:6])
            problems.append(
                f"spec.framework.image {image!r} is not under an allowed image prefix "
                f"({allowed}{', ...' if len(own) + len(policy.image_prefixes) > 6 else ''}); "
                f"an administrator may add its prefix to {PREFIX}ALLOWED_IMAGE_PREFIXES"
            )
    secret = spec.model.credentials_secret_ref
    if secret is not None and not policy.secret_refs.allows(secret.name):
        problems.append(
            f"spec.model.credentialsSecretRef {secret.name!r} is not allowed "
            f"({PREFIX}ALLOW_SECRET_REFS={policy.secret_refs.describe()}); an administrator "
            f"may set it to true or add {secret.name!r} to it"
        )
    for claim in claims(evaluation):
        if not policy.pvcs.allows(claim):
            problems.append(
                f"pvc://{claim} (spec.model.uri or spec.dataset.uri) mounts PersistentVolumeClaim "
                f"{claim!r}, which is not allowed ({PREFIX}ALLOW_PVCS={policy.pvcs.describe()}); "
                f"an administrator may set it to true or add {claim!r} to it"
            )
    for index, toleration in enumerate(spec.hardware.tolerations):
        key = toleration.key or ""
        if not (policy.tolerations.allows(key) if key else policy.tolerations.everything):
            shown = repr(key) if key else "every taint (no key)"
            problems.append(
                f"spec.hardware.tolerations[{index}] tolerates {shown}, which is not allowed "
                f"({PREFIX}ALLOWED_TOLERATIONS={policy.tolerations.describe()}); an "
                "administrator may add the taint key to it"
            )
    return problems
