"""What the kit writes: one record per step, the results document that holds them, its check.

Standard library only (the driver runs before the bundle is unpacked). A step's record says
what ran (``status``), why not (``reason``), the machine it ran on (``environment``: device,
driver, CUDA, cuDNN and torch versions) and what it measured (``data``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

KIT: Final = "mlmodelscope-gpukit"
FORMAT: Final = 1
Status = Literal["ok", "skipped", "failed", "timeout", "not_run"]
STATUSES: Final = frozenset({"ok", "skipped", "failed", "timeout", "not_run"})
ENVIRONMENT_KEYS: Final = ("device", "driver", "cuda", "cudnn", "torch", "python")
"""Every step's environment has these keys (None where there is no GPU or no torch)."""
NO_GPU: Final = "no GPU"

NOT_YET: Final[tuple[tuple[str, str], ...]] = ()
"""Issue 29's GPU measurements this kit does not make yet: listed in every results document."""


@dataclass
class StepRecord:
    """One step's outcome; ``data`` holds what it measured (partial when it timed out)."""

    name: str
    status: Status
    seconds: float = 0.0
    timeout_s: float = 0.0
    reason: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def results_document(
    *,
    started_at: str,
    finished_at: str | None,
    gpu: bool,
    install: dict[str, Any],
    steps: list[StepRecord],
) -> dict[str, Any]:
    """The results document (``results.json``): the run, the bundle install and every step."""
    facts = next((s for s in steps if s.name == "facts" and s.environment), None)
    return {
        "kit": KIT,
        "format": FORMAT,
        "started_at": started_at,
        "finished_at": finished_at,
        "gpu": gpu,
        "environment": facts.environment if facts else {},
        "install": install,
        "steps": [s.to_dict() for s in steps],
        "not_yet": [{"name": n, "what": w, "status": "not_run"} for n, w in NOT_YET],
    }


def problems(document: dict[str, Any]) -> list[str]:
    """What is wrong with a results document ([] when it is well formed)."""
    found: list[str] = []
    if document.get("kit") != KIT or document.get("format") != FORMAT:
        found.append(f"kit/format: expected {KIT} {FORMAT}")
    for key in ("started_at", "gpu", "install", "steps", "not_yet"):
        if key not in document:
            found.append(f"{key}: missing")
    for i, step in enumerate(document.get("steps", [])):
        where = f"steps[{i}] ({step.get('name')})"
        status = step.get("status")
        if status not in STATUSES:
            found.append(f"{where}.status: {status!r} is not one of {sorted(STATUSES)}")
        if status != "ok" and not step.get("reason"):
            found.append(f"{where}.reason: a {status} step says why")
        if status in ("ok", "skipped"):
            missing = [k for k in ENVIRONMENT_KEYS if k not in step.get("environment", {})]
            if missing:
                found.append(f"{where}.environment: missing {missing}")
        if not isinstance(step.get("data"), dict):
            found.append(f"{where}.data: not an object")
    return found
