"""Kubernetes quantities as exact numbers (what comparing a default limit with a request needs)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from mlmodelscope.spec.quantity import quantity_value


def test_suffixes_exponents_and_plain_numbers() -> None:
    assert quantity_value("4Gi") == 4 * 2**30
    assert quantity_value("512Mi") == 512 * 2**20
    assert quantity_value(".5Ki") == 512
    assert quantity_value("1.5G") == Decimal("1.5e9")
    assert quantity_value("500m") == Decimal("0.5")
    assert quantity_value("1E") == Decimal("1e18")  # exa, not an exponent
    assert quantity_value("129e6") == 129_000_000
    assert quantity_value("+2") == quantity_value(2) == 2
    assert quantity_value("4Gi") > quantity_value("4G") > quantity_value("3814Mi")


@pytest.mark.parametrize("bad", ["4GB", "-1", "", "Gi", "4 Gi", "1e", True])
def test_what_is_no_quantity_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity_value(bad)  # type: ignore[arg-type]
