"""Operator settings: one typed object, read once at startup from ``MLMS_OPERATOR_*`` variables.

The Helm chart maps its values to these variables (docs/operator.md lists every one). A bad
value stops the operator at startup with a message naming the variable and what it accepts,
instead of failing later inside a handler; all bad values are reported together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar, cast

from mlmodelscope import __version__
from mlmodelscope.contract.fetch import (
    CLUSTER_DENY,
    DEFAULT_DEADLINE_S,
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    FetchPolicy,
    HostList,
    parse_host_list,
    parse_max_bytes,
)
from mlmodelscope.controller.policy import (
    ALL,
    NONE,
    Allowance,
    Policy,
    parse_allowance,
    parse_prefixes,
)
from mlmodelscope.controller.pricing import (
    DEFAULT_POOL_LABEL,
    PoolPrices,
    parse_pool_prices,
)
from mlmodelscope.spec.evaluation import Device, FrameworkName
from mlmodelscope.spec.labels import is_label_key
from mlmodelscope.spec.quantity import quantity_value

PREFIX: Final = "MLMS_OPERATOR_"
DEFAULT_IMAGE_REPOSITORY: Final = "ghcr.io/mlmodelscope"
DEFAULT_PEERING_NAME: Final = "mlmodelscope"
PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
PER_EVALUATION: Final = "per-evaluation"
SERVICE_ACCOUNT: Final = "service-account"
ResultsAccess = Literal["per-evaluation", "service-account"]
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_NAMESPACE_PATTERN = re.compile(r"^!?[a-z0-9*?]([-a-z0-9*?]*[a-z0-9*?])?$")
_STORE_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "sqlite")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
DEFAULT_MEMORY_LIMIT: Final = "4Gi"
MIN_MEMORY_LIMIT: Final = "64Mi"
"""Below this a default memory limit is a typo (``4096`` meant as MiB is 4096 bytes): the agent
could not even start under it."""
T = TypeVar("T")


class SettingsError(ValueError):
    """One or more ``MLMS_OPERATOR_*`` variables hold a value the operator cannot use."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid operator settings:\n{lines}")


def default_image(framework: FrameworkName, device: Device, version: str = __version__) -> str:
    """The agent image published for a framework and device, e.g.
    ``ghcr.io/mlmodelscope/agent-onnxruntime:0.1.0-cpu``."""
    return f"{DEFAULT_IMAGE_REPOSITORY}/agent-{framework.value}:{version}-{device.value}"


def image_variable(framework: FrameworkName, device: Device) -> str:
    """The variable that overrides one image, e.g. ``MLMS_OPERATOR_IMAGE_ONNXRUNTIME_GPU``."""
    return f"{PREFIX}IMAGE_{framework.value.upper()}_{device.value.upper()}"


@dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator reads from its environment (defaults suit a dev cluster)."""

    images: Mapping[tuple[FrameworkName, Device], str] = field(
        default_factory=lambda: {(f, d): default_image(f, d) for f in FrameworkName for d in Device}
    )
    """Agent image per (framework, device); spec.framework.image overrides it per evaluation."""
    image_pull_policy: PullPolicy = "IfNotPresent"
    max_running: int = 0
    """Evaluation Jobs allowed to run at once in the whole cluster; 0 = no limit."""
    max_running_per_namespace: int = 0
    """Evaluation Jobs allowed to run at once per namespace; 0 = no limit."""
    results_access: ResultsAccess = PER_EVALUATION
    """How an evaluation pod gets the right to publish its result. ``per-evaluation``: it runs
    as the evaluation's own ServiceAccount, whose Role lets it patch its own results ConfigMap
    and nothing else (:mod:`.agent_access`). ``service-account``: every pod runs as
    ``job_service_account``, which may patch every ConfigMap of the namespace, so one
    evaluation can overwrite another's results (for a shared cloud identity). Unset: the
    latter when ``MLMS_OPERATOR_JOB_SERVICE_ACCOUNT`` is set, so existing installs keep it."""
    job_service_account: str | None = None
    """ServiceAccount of evaluation pods with ``service-account`` results access (needs patch
    on ConfigMaps); None = namespace default, in which case results travel only through the
    termination message."""
    otlp_endpoint: str | None = None
    pushgateway_url: str | None = None
    runtime_class: str | None = None
    """RuntimeClass for GPU evaluations that set none in hardware.runtimeClassName."""
    namespaces: tuple[str, ...] = ()
    """Namespaces (or glob patterns) to watch; empty = the whole cluster."""
    peering: str | None = None
    """Kopf peering object name for leader election; None = standalone."""
    peering_priority: int | None = None
    """This replica's Kopf peering priority; None = one of its own from its start time
    (:mod:`.peering`: the oldest live replica acts)."""
    peering_lifetime_seconds: int = 60
    """How long this replica's peering keep-alive counts: a replica that died without saying
    so (SIGKILL, a lost node) is replaced by a standby at most this long after."""
    pod_failure_policy: bool = True
    """Fail a Job at once (no retries) when the agent exits with the spec-error code."""
    job_ttl_seconds: int | None = 86400
    """ttlSecondsAfterFinished when spec.ttlAfterFinished is unset; None = keep Jobs."""
    run_as_user: int = 65532
    """UID of the agent container (the images' non-root user)."""
    metrics_port: int = 9090
    """Port of the operator's Prometheus endpoint (/metrics, all interfaces); 0 = off."""
    store_url: str | None = field(default=None, repr=False)
    """Results store (SQLAlchemy URL, e.g. ``postgresql://user:pw@db:5432/results``) in which
    every finished run is recorded; None = record nothing. Never logged: it may hold a
    password (the store shows its URL with the password hidden)."""
    record_retry_seconds: float = 30.0
    """How often results the store could not take are tried again."""
    kueue_poll_seconds: float = 5.0
    """How often the Workloads of Jobs waiting for Kueue are read, to show Kueue's reason in
    their evaluations' status (nothing is read while no Job waits)."""
    start_timeout_seconds: float = 300.0
    """How long an evaluation pod may fail to start (a missing Secret or ServiceAccount, an
    image that cannot be pulled) before the evaluation ends Failed with the reason; a pod that
    merely waits for a node (Unschedulable) is not a start failure."""
    reconcile_workers: int = 16
    """Threads that reconcile evaluations (create their children and Job). Each spends nearly
    all its time waiting on the API server, so this, not the CPU, bounds how many evaluations a
    second become Jobs."""
    price_per_node_hour: float | None = None
    """What a node costs per hour (USD), passed to every evaluation pod so its result says the
    cost per 1,000 inferences; None: not measured. A pool's own price wins (``pool_prices``)."""
    pool_prices: PoolPrices = field(default_factory=PoolPrices)
    """What a node of each pool costs per hour, for evaluations whose nodeSelector selects
    that pool (:mod:`.pricing`)."""
    resync_seconds: float = 30.0
    """How often evaluations whose run has not ended are reconciled against their Jobs (Job
    events that were lost, Jobs deleted while the operator was away, pods that never start)."""
    default_memory_limit: str | None = DEFAULT_MEMORY_LIMIT
    """Memory limit of evaluation pods whose spec sets none (raised to the spec's memory
    request when that is larger), so a runaway agent is OOM-killed in its own cgroup instead of
    pressing its node's memory; None = no default (the pod may use all its node's memory)."""
    fetch: FetchPolicy = field(
        default_factory=lambda: FetchPolicy(deny=parse_host_list(CLUSTER_DENY, "default"))
    )
    """What evaluation Jobs may download from (``MLMS_OPERATOR_FETCH_*``, passed to the agent
    as ``MLMS_FETCH_*``): by default loopback is blocked besides the agent's own list."""
    policy: Policy = field(default_factory=Policy)
    """What a spec may ask its Job to use (images, Secrets, claims, tolerations): see
    :mod:`.policy`; checked before anything is created for an evaluation."""

    def image_for(self, framework: FrameworkName, device: Device) -> str:
        return self.images[(framework, device)]

    def agent_images(self) -> list[str]:
        """The operator's own agent images (their repositories are always allowed)."""
        return list(self.images.values())

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OperatorSettings:
        """Read and check every ``MLMS_OPERATOR_*`` variable; raises :class:`SettingsError`."""
        reader = _Reader(environ)
        version = reader.text("IMAGE_VERSION") or __version__
        images = {}
        for framework in FrameworkName:
            for device in Device:
                name = image_variable(framework, device).removeprefix(PREFIX)
                images[(framework, device)] = reader.text(name) or default_image(
                    framework, device, version
                )
        known = {f"{PREFIX}{k}" for k in KNOWN_VARIABLES} | {
            image_variable(f, d) for f in FrameworkName for d in Device
        }
        for name in sorted(environ):
            if name.startswith(PREFIX) and name not in known:
                close = [k for k in sorted(known) if k.startswith(name[: len(PREFIX) + 4])]
                hint = f"; did you mean {close[0]}?" if close else ""
                reader.problems.append(f"{name} is not an operator setting{hint}")
        settings = cls(
            images=images,
            image_pull_policy=reader.choice("IMAGE_PULL_POLICY", PULL_POLICIES, "IfNotPresent"),
            max_running=reader.count("MAX_RUNNING", 0),
            max_running_per_namespace=reader.count("MAX_RUNNING_PER_NAMESPACE", 0),
            results_access=reader.results_access(),
            job_service_account=reader.name("JOB_SERVICE_ACCOUNT", _DNS_SUBDOMAIN),
            otlp_endpoint=reader.url("OTLP_ENDPOINT"),
            pushgateway_url=reader.url("PUSHGATEWAY_URL"),
            runtime_class=reader.name("RUNTIME_CLASS", _DNS_SUBDOMAIN),
            namespaces=reader.namespaces("NAMESPACES"),
            peering=reader.peering("PEERING"),
            peering_priority=reader.integer("PEERING_PRIORITY"),
            peering_lifetime_seconds=reader.count("PEERING_LIFETIME_SECONDS", 60, minimum=5),
            pod_failure_policy=reader.flag("POD_FAILURE_POLICY", True),
            job_ttl_seconds=reader.optional_count("JOB_TTL_SECONDS", 86400),
            run_as_user=reader.count("RUN_AS_USER", 65532, minimum=1),
            metrics_port=reader.port("METRICS_PORT", 9090),
            store_url=reader.store_url("STORE_URL"),
            record_retry_seconds=reader.seconds("RECORD_RETRY_SECONDS", 30.0),
            kueue_poll_seconds=reader.seconds("KUEUE_POLL_SECONDS", 5.0),
            start_timeout_seconds=reader.seconds("START_TIMEOUT_SECONDS", 300.0),
            resync_seconds=reader.seconds("RESYNC_SECONDS", 30.0),
            reconcile_workers=reader.count("RECONCILE_WORKERS", 16, minimum=1),
            price_per_node_hour=reader.price("PRICE_PER_NODE_HOUR"),
            pool_prices=reader.pool_prices(),
            default_memory_limit=reader.memory("DEFAULT_MEMORY_LIMIT", DEFAULT_MEMORY_LIMIT),
            fetch=reader.fetch_policy(),
            policy=reader.policy(),
        )
        if reader.problems:
            raise SettingsError(reader.problems)
        return settings


KNOWN_VARIABLES: Final = (
    "IMAGE_VERSION",
    "IMAGE_PULL_POLICY",
    "MAX_RUNNING",
    "MAX_RUNNING_PER_NAMESPACE",
    "JOB_SERVICE_ACCOUNT",
    "RESULTS_ACCESS",
    "OTLP_ENDPOINT",
    "PUSHGATEWAY_URL",
    "RUNTIME_CLASS",
    "NAMESPACES",
    "PEERING",
    "PEERING_PRIORITY",
    "PEERING_LIFETIME_SECONDS",
    "POD_FAILURE_POLICY",
    "JOB_TTL_SECONDS",
    "RUN_AS_USER",
    "METRICS_PORT",
    "STORE_URL",
    "RECORD_RETRY_SECONDS",
    "KUEUE_POLL_SECONDS",
    "START_TIMEOUT_SECONDS",
    "RESYNC_SECONDS",
    "RECONCILE_WORKERS",
    "PRICE_PER_NODE_HOUR",
    "POOL_LABEL",
    "POOL_PRICES",
    "DEFAULT_MEMORY_LIMIT",
    "FETCH_ALLOW",
    "FETCH_DENY",
    "FETCH_MAX_BYTES",
    "FETCH_TIMEOUT_SECONDS",
    "FETCH_DEADLINE_SECONDS",
    "ALLOWED_IMAGE_PREFIXES",
    "ALLOW_SECRET_REFS",
    "ALLOW_PVCS",
    "ALLOWED_TOLERATIONS",
)
"""Every setting besides the per-framework images (unknown MLMS_OPERATOR_* names are errors,
so a typo in a Helm value cannot silently fall back to a default)."""


class _Reader:
    """Parses variables, collecting one readable problem per bad value."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.problems: list[str] = []

    def text(self, name: str) -> str | None:
        value = self.environ.get(PREFIX + name, "").strip()
        return value or None

    def _parse(self, name: str, default: T, parse: Callable[[str], T], accepts: str) -> T:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            return parse(raw)
        except ValueError:
            self.problems.append(f"{PREFIX}{name}={raw!r}: expected {accepts}")
            return default

    def count(self, name: str, default: int, minimum: int = 0) -> int:
        def parse(raw: str) -> int:
            value = int(raw)
            if value < minimum:
                raise ValueError
            return value

        accepts = f"a whole number >= {minimum}" + (" (0 = no limit)" if minimum == 0 else "")
        return self._parse(name, default, parse, accepts)

    def integer(self, name: str) -> int | None:
        return self._parse(name, None, int, "a whole number (negative allowed)")

    def port(self, name: str, default: int) -> int:
        def parse(raw: str) -> int:
            value = int(raw)
            if not 0 <= value <= 65535:
                raise ValueError
            return value

        return self._parse(name, default, parse, "a port number 1-65535, or 0 (off)")

    def optional_count(self, name: str, default: int | None) -> int | None:
        raw = (self.text(name) or "").lower()
        if raw in ("none", "never"):
            return None
        return self.count(name, 0) if raw else default

    def flag(self, name: str, default: bool) -> bool:
        def parse(raw: str) -> bool:
            if raw.lower() in _TRUE:
                return True
            if raw.lower() in _FALSE:
                return False
            raise ValueError

        return self._parse(name, default, parse, "true or false")

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> PullPolicy:
        def parse(raw: str) -> str:
            if raw not in choices:
                raise ValueError
            return raw

        return cast(PullPolicy, self._parse(name, default, parse, f"one of {', '.join(choices)}"))

    def results_access(self) -> ResultsAccess:
        """``RESULTS_ACCESS``; unset, it follows ``JOB_SERVICE_ACCOUNT`` (an explicit account
        keeps working as before). Both explicit and contradictory is an error: which account
        the pods run as would otherwise be a guess."""
        raw = self.text("RESULTS_ACCESS")
        account = self.text("JOB_SERVICE_ACCOUNT")
        if raw is None:
            return SERVICE_ACCOUNT if account else PER_EVALUATION
        if raw not in (PER_EVALUATION, SERVICE_ACCOUNT):
            accepts = f"{PER_EVALUATION} or {SERVICE_ACCOUNT}"
            self.problems.append(f"{PREFIX}RESULTS_ACCESS={raw!r}: expected {accepts}")
            return PER_EVALUATION
        if raw == PER_EVALUATION and account:
            self.problems.append(
                f"{PREFIX}RESULTS_ACCESS={PER_EVALUATION} runs each evaluation pod as its own "
                f"ServiceAccount: unset {PREFIX}JOB_SERVICE_ACCOUNT, or set "
                f"{PREFIX}RESULTS_ACCESS={SERVICE_ACCOUNT} to use that account"
            )
        return cast(ResultsAccess, raw)

    def name(self, name: str, pattern: re.Pattern[str]) -> str | None:
        def parse(raw: str) -> str:
            if len(raw) > 253 or not pattern.match(raw):
                raise ValueError
            return raw

        return self._parse(name, None, parse, "a Kubernetes object name (lower-case, '-', '.')")

    def url(self, name: str) -> str | None:
        def parse(raw: str) -> str:
            if not re.match(r"^https?://[^\s/]+", raw):
                raise ValueError
            return raw

        return self._parse(name, None, parse, "an http:// or https:// URL")

    def seconds(self, name: str, default: float) -> float:
        def parse(raw: str) -> float:
            value = float(raw)
            if not 0 < value < float("inf"):
                raise ValueError
            return value

        return self._parse(name, default, parse, "a number of seconds > 0")

    def price(self, name: str) -> float | None:
        """A price of at least 0; unset or empty = None."""

        def parse(raw: str) -> float | None:
            value = float(raw)
            if not 0 <= value < float("inf"):
                raise ValueError
            return value

        return self._parse(name, None, parse, "a price per node-hour in USD >= 0")

    def pool_prices(self) -> PoolPrices:
        """``POOL_LABEL`` (a label key) and ``POOL_PRICES`` (``POOL=PRICE,...``)."""

        def label(raw: str) -> str:
            if not is_label_key(raw):
                raise ValueError
            return raw

        key = self._parse("POOL_LABEL", DEFAULT_POOL_LABEL, label, "a node label key")
        accepts = "comma-separated POOL=PRICE (a label value, USD per node-hour >= 0)"
        none: tuple[tuple[str, float], ...] = ()
        prices = self._parse("POOL_PRICES", none, parse_pool_prices, accepts)
        return PoolPrices(key, prices)

    def memory(self, name: str, default: str | None) -> str | None:
        """A memory quantity of at least :data:`MIN_MEMORY_LIMIT`; ``none`` or ``0`` = None."""
        if (self.text(name) or "").lower() == "none":
            return None

        def parse(text: str) -> str | None:
            value = quantity_value(text)
            if value == 0:
                return None
            if value < quantity_value(MIN_MEMORY_LIMIT):
                raise ValueError
            return text

        accepts = f"a memory quantity of at least {MIN_MEMORY_LIMIT} (e.g. 4Gi), or none"
        return self._parse(name, default, parse, accepts)

    def hosts(self, name: str, default: str) -> HostList:
        accepts = "comma-separated CIDRs (10.0.0.0/8), addresses (::1) or host names"
        parsed = self._parse(name, None, lambda raw: parse_host_list(raw, PREFIX + name), accepts)
        return parsed if parsed is not None else parse_host_list(default, PREFIX + name)

    def fetch_policy(self) -> FetchPolicy:
        """The ``FETCH_*`` settings, parsed by the agent's own parsers."""
        max_bytes = self._parse(
            "FETCH_MAX_BYTES",
            DEFAULT_MAX_BYTES,
            lambda raw: parse_max_bytes(raw, PREFIX + "FETCH_MAX_BYTES"),
            "a whole number of bytes >= 0 (0 = no limit)",
        )
        return FetchPolicy(
            allow=self.hosts("FETCH_ALLOW", ""),
            deny=self.hosts("FETCH_DENY", CLUSTER_DENY),
            max_bytes=max_bytes,
            timeout_s=self.seconds("FETCH_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_S),
            deadline_s=self.seconds("FETCH_DEADLINE_SECONDS", DEFAULT_DEADLINE_S),
        )

    def allowance(self, name: str, default: Allowance) -> Allowance:
        accepts = "true, false, or comma-separated names"
        return self._parse(name, default, parse_allowance, accepts)

    def policy(self) -> Policy:
        """The ``ALLOWED_*``/``ALLOW_*`` settings (see :mod:`.policy` for the defaults)."""
        none: tuple[str, ...] = ()
        prefixes = self._parse(
            "ALLOWED_IMAGE_PREFIXES",
            none,
            parse_prefixes,
            "comma-separated image prefixes (e.g. ghcr.io/acme/), or *",
        )
        return Policy(
            image_prefixes=prefixes,
            secret_refs=self.allowance("ALLOW_SECRET_REFS", NONE),
            pvcs=self.allowance("ALLOW_PVCS", ALL),
            tolerations=self.allowance("ALLOWED_TOLERATIONS", ALL),
        )

    def store_url(self, name: str) -> str | None:
        """A database URL; a bad one is reported without its text (it may hold a password)."""
        raw = self.text(name)
        if raw is None:
            return None
        scheme = raw.split("://", 1)[0] if "://" in raw else ""
        if scheme not in _STORE_SCHEMES or not raw.split("://", 1)[1]:
            shown = f"scheme {scheme!r}" if scheme else "no scheme"
            self.problems.append(
                f"{PREFIX}{name}: expected a database URL, postgresql://user:password@host:5432/db"
                f" or sqlite:///path/runs.db (got {shown})"
            )
            return None
        return raw

    def namespaces(self, name: str) -> tuple[str, ...]:
        def parse(raw: str) -> tuple[str, ...]:
            items = tuple(part.strip() for part in raw.split(",") if part.strip())
            if not all(_NAMESPACE_PATTERN.match(item) for item in items):
                raise ValueError
            return items

        accepts = "comma-separated namespace names or globs (e.g. 'team-a,ml-*'), empty = all"
        return self._parse(name, (), parse, accepts)

    def peering(self, name: str) -> str | None:
        def parse(raw: str) -> str | None:
            if raw.lower() in _TRUE:
                return DEFAULT_PEERING_NAME
            if raw.lower() in _FALSE:
                return None
            if not _DNS_LABEL.match(raw):
                raise ValueError
            return raw

        accepts = "true (peering object 'mlmodelscope'), false, or a peering object name"
        return self._parse(name, None, parse, accepts)
