"""How the meter's numbers are written on pages."""
from __future__ import annotations

from decimal import Decimal


def rate_text(rate: Decimal) -> str:
    """A rate for display: at least the cents, more places only where the rate has them
    (``2.4900`` -> ``2.49``, ``3`` -> ``3.00``, ``0.0125`` -> ``0.0125``)."""
    text = f"{Decimal(rate).normalize():f}"
    whole, _, cents = text.partition(".")
    return f"{whole}.{cents.ljust(2, '0')}"
