"""Kubernetes resource quantities as exact numbers, to compare them as the API server does.

The spec keeps quantities as written ('4Gi', '500m', '1e3'); only where two must be compared
(a default memory limit against the spec's memory request) is one turned into a number.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

from mlmodelscope.spec.base import quoted
from mlmodelscope.spec.evaluation import QUANTITY_PATTERN

BINARY: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
"""Binary suffixes: powers of 1024."""
DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
"""Decimal suffixes: powers of ten."""
_NUMBER = re.compile(r"^\+?([0-9]*\.?[0-9]*)(.*)$")


def quantity_value(value: int | str) -> Decimal:
    """The exact value of a quantity ('4Gi' is 4294967296, '500m' is 0.5); raises ValueError
    for text that is no non-negative Kubernetes quantity."""
    text = str(value).strip()
    if isinstance(value, bool) or not re.match(QUANTITY_PATTERN, text):
        raise ValueError(f"{quoted(value)} is not a Kubernetes quantity")
    match = _NUMBER.match(text)
    assert match is not None  # the pattern above admits only such text
    number, suffix = match.groups()
    if suffix in BINARY:
        return Decimal(number) * (1 << 10 * BINARY[suffix])
    if suffix in DECIMAL:
        return Decimal(number).scaleb(DECIMAL[suffix])
    return Decimal(number + suffix)  # no suffix, or an exponent: 1e3
