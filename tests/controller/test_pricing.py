"""The price per node-hour an evaluation pod gets: its selected pool's, else the operator's
one price, else none; and the pool prices as the operator reads them."""

from __future__ import annotations

import pytest

from mlmodelscope.controller.pricing import (
    DEFAULT_POOL_LABEL,
    JobPrice,
    PoolPrices,
    choose_price,
    parse_pool_prices,
)

POOLS = PoolPrices(DEFAULT_POOL_LABEL, (("a100", 4.1), ("cpu", 0.4)))
POOL_SOURCE = "operator setting MLMS_OPERATOR_POOL_PRICES, pool mlmodelscope.io/pool="
GLOBAL_SOURCE = "operator setting MLMS_OPERATOR_PRICE_PER_NODE_HOUR"


def test_the_selected_pools_price_wins_over_the_global_one() -> None:
    selector = {DEFAULT_POOL_LABEL: "a100", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert choose_price(selector, POOLS, 3.2) == JobPrice(4.1, POOL_SOURCE + "a100")
    assert choose_price({DEFAULT_POOL_LABEL: "cpu"}, POOLS, None) == JobPrice(
        0.4, POOL_SOURCE + "cpu"
    )


def test_no_pool_or_an_unpriced_pool_falls_back_to_the_global_price_or_none() -> None:
    for selector in ({}, {DEFAULT_POOL_LABEL: "t4"}, {"pool": "a100"}):
        assert choose_price(selector, POOLS, 3.2) == JobPrice(3.2, GLOBAL_SOURCE)
        assert choose_price(selector, POOLS, None) is None
    assert choose_price({DEFAULT_POOL_LABEL: "a100"}, PoolPrices(), None) is None


def test_the_pool_label_is_the_one_configured() -> None:
    gke = PoolPrices("cloud.google.com/gke-nodepool", (("a100", 4.1),))
    got = choose_price({"cloud.google.com/gke-nodepool": "a100"}, gke, None)
    assert got == JobPrice(
        4.1, "operator setting MLMS_OPERATOR_POOL_PRICES, pool cloud.google.com/gke-nodepool=a100"
    )
    assert choose_price({DEFAULT_POOL_LABEL: "a100"}, gke, None) is None


def test_pool_prices_parse_and_refuse_what_is_not_a_price_list() -> None:
    assert parse_pool_prices(" a100=4.10, cpu = 0.4 ,") == (("a100", 4.1), ("cpu", 0.4))
    assert parse_pool_prices("") == ()
    for bad in ("a100", "a100=", "=4", "a100=-1", "a100=inf", "a b=1", "a100=1,a100=2"):
        with pytest.raises(ValueError):
            parse_pool_prices(bad)
