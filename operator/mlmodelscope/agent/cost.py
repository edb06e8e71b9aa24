"""Cost per 1,000 inferences from a price per node-hour the platform team gives: the node's
price spread over the samples it served per second at the measured throughput.

The price comes from ``mlms run --price-per-node-hour`` or, in a cluster Job, from
``MLMS_PRICE_PER_NODE_HOUR`` in the agent's environment; without one the cost is recorded as
not measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mlmodelscope.contract.wire import PRICE_ENV, PRICE_SOURCE_ENV

CURRENCY: Final = "USD"
NO_PRICE: Final = (
    f"not measured: no price per node-hour given (mlms run --price-per-node-hour, or {PRICE_ENV})"
)


@dataclass(frozen=True)
class NodePrice:
    """What one node costs per hour, in :data:`CURRENCY`, and where that figure came from."""

    per_node_hour: float
    source: str

    def __post_init__(self) -> None:
        if not math.isfinite(self.per_node_hour) or self.per_node_hour < 0:
            raise ValueError(f"a price per node-hour must be >= 0, not {self.per_node_hour!r}")


def cost_per_1000(price: NodePrice | None, throughput: float | None) -> float | None:
    """price / 3600 s / (samples/s) * 1000; None without a price or a positive throughput."""
    if price is None or throughput is None or not throughput > 0:
        return None
    return price.per_node_hour / 3600.0 / throughput * 1000.0


def cost_section(price: NodePrice | None) -> dict[str, Any]:
    """The result document's ``cost``: the price used and its source, or why there is none."""
    if price is None:
        return {
            "price_per_node_hour": None,
            "currency": CURRENCY,
            "source": None,
            "reason": NO_PRICE,
        }
    return {
        "price_per_node_hour": price.per_node_hour,
        "currency": CURRENCY,
        "source": price.source,
        "reason": None,
    }


def price_from_environment(environ: Mapping[str, str]) -> NodePrice | None:
    """The price in ``MLMS_PRICE_PER_NODE_HOUR`` (None when unset or empty); ValueError for
    a value that is not a price."""
    text = environ.get(PRICE_ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{PRICE_ENV}={text!r} is not a number (USD per node-hour)") from None
    source = environ.get(PRICE_SOURCE_ENV, "").strip() or f"${PRICE_ENV}"
    return NodePrice(value, source)
