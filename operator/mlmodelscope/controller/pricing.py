"""The price per node-hour an evaluation pod is given, for its cost per 1,000 inferences.

The price of the node pool the evaluation's ``hardware.nodeSelector`` selects (its value of
the pool label, ``MLMS_OPERATOR_POOL_LABEL``, priced in ``MLMS_OPERATOR_POOL_PRICES``), else
the operator's one price (``MLMS_OPERATOR_PRICE_PER_NODE_HOUR``), else none: the cost is then
not measured. The choice is made from the spec when the Job is built, before a node is
picked, so it needs no read of Nodes and no right on them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from mlmodelscope.controller.policy import PREFIX
from mlmodelscope.spec.labels import is_label_value

DEFAULT_POOL_LABEL: Final = "mlmodelscope.io/pool"
"""The node label that names a node's pool (the dev cluster's nodes carry it)."""
POOL_PRICES_SETTING: Final = f"{PREFIX}POOL_PRICES"
PRICE_SETTING: Final = f"{PREFIX}PRICE_PER_NODE_HOUR"


@dataclass(frozen=True)
class PoolPrices:
    """What a node of each pool costs per hour (USD); a pool is a value of ``label``."""

    label: str = DEFAULT_POOL_LABEL
    prices: tuple[tuple[str, float], ...] = ()

    def price_of(self, pool: str) -> float | None:
        return dict(self.prices).get(pool)


@dataclass(frozen=True)
class JobPrice:
    """The price an evaluation pod is given, and where it came from (recorded in its result)."""

    per_node_hour: float
    source: str


def parse_price(text: str) -> float:
    """A finite price of at least 0; ValueError otherwise."""
    value = float(text)
    if not 0 <= value < math.inf:
        raise ValueError(f"{text!r} is not a price >= 0")
    return value


def parse_pool_prices(text: str) -> tuple[tuple[str, float], ...]:
    """``a100=4.10,cpu=0.40`` as ``(("a100", 4.1), ("cpu", 0.4))``; ValueError for an entry
    that is not ``POOL=PRICE``, a pool that is no label value, or a pool named twice."""
    found: dict[str, float] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        pool, sep, price = (s.strip() for s in entry.partition("="))
        if not sep or not pool or not is_label_value(pool):
            raise ValueError(f"{entry!r} is not POOL=PRICE with POOL a label value")
        if pool in found:
            raise ValueError(f"pool {pool!r} is priced twice")
        found[pool] = parse_price(price)
    return tuple(sorted(found.items()))


def choose_price(
    node_selector: Mapping[str, str], pools: PoolPrices, price: float | None
) -> JobPrice | None:
    """The selected pool's price, else ``price`` (the operator's one price), else None."""
    pool = node_selector.get(pools.label)
    if pool is not None:
        pool_price = pools.price_of(pool)
        if pool_price is not None:
            source = f"operator setting {POOL_PRICES_SETTING}, pool {pools.label}={pool}"
            return JobPrice(pool_price, source)
    if price is not None:
        return JobPrice(price, f"operator setting {PRICE_SETTING}")
    return None
