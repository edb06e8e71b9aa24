"""What every task's metrics record shares: the name of its primary metric, and a plain dict."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar


@dataclasses.dataclass(frozen=True)
class TaskMetrics:
    """A task's metrics; ``primary`` names the field a leaderboard sorts by."""

    primary: ClassVar[str]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
