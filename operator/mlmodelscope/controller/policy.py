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

A platform team narrows this per namespace with ``policy.mlmodelscope.io/*`` annotations on the
Namespace (:class:`NamespaceRules`, read by :mod:`.namespace_policy`): a spec must pass both the
operator's settings and its namespace's annotations, so an annotation can only narrow. Editing
a Namespace's annotations takes ``patch`` on ``namespaces``, a cluster-scoped right tenants do
not normally hold, which is what makes them a platform team's tool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from mlmodelscope.spec.uris import pvc_fields

if TYPE_CHECKING:
    from mlmodelscope.spec import ModelEvaluation

PREFIX: Final = "MLMS_OPERATOR_"
ANNOTATION_PREFIX: Final = "policy.mlmodelscope.io/"
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
    if any(item != ANY and not _image_text(item) for item in items):
        raise ValueError(raw)
    return items


def _image_text(item: str) -> bool:
    return len(item) <= 512 and all(c.isalnum() or c in "-._/:@" for c in item)


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
class Rule:
    """One policy field: its attribute, operator setting and namespace annotation."""

    attr: str
    setting: str
    annotation: str


def _rule(attr: str, setting: str, annotation: str) -> Rule:
    return Rule(attr, PREFIX + setting, ANNOTATION_PREFIX + annotation)


IMAGES: Final = _rule("image_prefixes", "ALLOWED_IMAGE_PREFIXES", "allowed-image-prefixes")
SECRET_REFS: Final = _rule("secret_refs", "ALLOW_SECRET_REFS", "allow-secret-refs")
PVCS: Final = _rule("pvcs", "ALLOW_PVCS", "allow-pvcs")
TOLERATIONS: Final = _rule("tolerations", "ALLOWED_TOLERATIONS", "allowed-tolerations")
RULES: Final = (IMAGES, SECRET_REFS, PVCS, TOLERATIONS)


@dataclass(frozen=True)
class NamespaceRules:
    """What one Namespace's ``policy.mlmodelscope.io/*`` annotations narrow; None: that field
    is not narrowed there. ``problems`` (a malformed annotation, a Namespace the operator
    cannot read) deny every evaluation of the namespace: a policy that cannot be read must not
    read as no policy."""

    namespace: str
    image_prefixes: tuple[str, ...] | None = None
    secret_refs: Allowance | None = None
    pvcs: Allowance | None = None
    tolerations: Allowance | None = None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class Policy:
    """The operator-wide policy (``MLMS_OPERATOR_ALLOWED_IMAGE_PREFIXES``,
    ``..._ALLOW_SECRET_REFS``, ``..._ALLOW_PVCS``, ``..._ALLOWED_TOLERATIONS``), narrowed by
    one namespace's annotations when ``namespace`` is set (the effective policy there)."""

    image_prefixes: tuple[str, ...] = ()
    """Where ``spec.framework.image`` may come from, besides the repositories of the operator's
    own agent images (always allowed)."""
    secret_refs: Allowance = field(default=NONE)
    pvcs: Allowance = field(default=ALL)
    tolerations: Allowance = field(default=ALL)
    """Taint keys a spec's ``hardware.tolerations`` may name (a toleration without a key
    tolerates every taint: only allowed with ``true``)."""
    namespace: NamespaceRules | None = None
    """The evaluation's namespace's annotations; None: the operator-wide policy alone."""


def denials(evaluation: ModelEvaluation, policy: Policy, agent_images: Iterable[str]) -> list[str]:
    """Why the policy refuses this evaluation: one message per field and value, naming the
    setting (or the namespace annotation) that would allow it; empty when it may run. A
    value must pass the operator's setting and then its namespace's annotation, so the
    effective policy is their intersection."""
    rules = policy.namespace
    if rules is not None and rules.problems:
        return list(rules.problems)
    spec = evaluation.spec
    problems = []
    image = spec.framework.image
    if image:
        problem = _image_problem(image, policy, sorted({repository(i) for i in agent_images}))
        problems += [problem] if problem else []
    secret = spec.model.credentials_secret_ref
    if secret is not None:
        subject = f"spec.model.credentialsSecretRef {secret.name!r} is"
        problems += _name_problems(subject, secret.name, policy, SECRET_REFS)
    for claim, fields in pvc_fields(spec).items():
        subject = (
            f"pvc://{claim} ({', '.join(fields)}) mounts PersistentVolumeClaim {claim!r}, which is"
        )
        problems += _name_problems(subject, claim, policy, PVCS)
    for index, toleration in enumerate(spec.hardware.tolerations):
        key = toleration.key or ""
        shown = repr(key) if key else "every taint (no key)"
        subject = f"spec.hardware.tolerations[{index}] tolerates {shown}, which is"
        problems += _name_problems(subject, key, policy, TOLERATIONS)
    return problems


def _permits(allowance: Allowance, name: str) -> bool:
    """An empty name (a toleration without a key: every taint) needs ``true``."""
    return allowance.allows(name) if name else allowance.everything


def _name_problems(subject: str, name: str, policy: Policy, rule: Rule) -> list[str]:
    operator: Allowance = getattr(policy, rule.attr)
    rules = policy.namespace
    narrowed: Allowance | None = getattr(rules, rule.attr) if rules is not None else None
    fix = f"set {{}} to true or add {name!r} to it" if name else "set {} to true"
    if not _permits(operator, name):
        message = (
            f"{subject} not allowed ({rule.setting}={operator.describe()}); an administrator "
            f"may {fix.format('it')}"
        )
        if rules is not None and narrowed is not None and _permits(narrowed, name):
            message += _cannot_widen(rule, rules.namespace)
        return [message]
    if rules is not None and narrowed is not None and not _permits(narrowed, name):
        return [
            f"{subject} not allowed in namespace {rules.namespace!r} (its annotation "
            f"{rule.annotation}={narrowed.describe()!r} narrows {rule.setting}="
            f"{operator.describe()}); whoever may edit Namespace {rules.namespace!r} may "
            f"{fix.format('the annotation')}"
        ]
    return []


def _image_problem(image: str, policy: Policy, own: list[str]) -> str | None:
    """The operator's agent repositories are allowed in every namespace: a namespace narrows
    only the images a spec names beyond them."""
    allowed = [*policy.image_prefixes, *own]
    rules = policy.namespace or NamespaceRules("")
    prefixes = rules.image_prefixes
    if not image_allowed(image, allowed):
        more = ", ..." if len(allowed) > 6 else ""
        message = (
            f"spec.framework.image {image!r} is not under an allowed image prefix "
            f"({', '.join(allowed[:6])}{more}); an administrator may add its prefix to "
            f"{IMAGES.setting}"
        )
        if prefixes is not None and image_allowed(image, prefixes):
            message += _cannot_widen(IMAGES, rules.namespace)
        return message
    if prefixes is not None and not image_allowed(image, [*prefixes, *own]):
        return (
            f"spec.framework.image {image!r} is not under an image prefix allowed in "
            f"namespace {rules.namespace!r} (its annotation {IMAGES.annotation}="
            f"{','.join(prefixes)!r} narrows {IMAGES.setting}; the operator's agent "
            f"repositories stay allowed); whoever may edit Namespace {rules.namespace!r} may "
            "add its prefix to the annotation"
        )
    return None


def _cannot_widen(rule: Rule, namespace: str) -> str:
    return (
        f" (the annotation {rule.annotation} on Namespace {namespace!r} allows it, but an "
        "annotation only narrows the operator's setting)"
    )
