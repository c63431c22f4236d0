"""The price of a lease at a moment: the one place for the rule (issue 13, one place per rule).

A lease whose run still goes (no run end, not released) is priced up to ``now`` by the meter's
formulas (:mod:`apps.metering.billing`, SPEC §4: per started second, capped at the time limit);
any other lease has the figures stored when its meter stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from . import billing
from .models import Lease


@dataclass(frozen=True, slots=True)
class LeasePrice:
    """``billed_seconds`` (whole seconds) and ``cost`` (USD, 6 places) of a lease at a moment.

    Both are None for a stopped lease whose figures were never stored (not expected: the meter
    stores both when it stops). ``running``: the meter still goes, the figures are up to ``now``.
    """

    billed_seconds: int | None
    cost: Decimal | None
    running: bool


def lease_running(lease: Lease) -> bool:
    """True while the lease's meter still goes: no run end reported and not released."""
    return lease.run_ended_at is None and lease.released_at is None


def lease_price(lease: Lease, now: datetime) -> LeasePrice:
    """The lease's billed seconds and cost at ``now`` (no query: the lease's own fields)."""
    if lease_running(lease):
        seconds = billing.billed_seconds(lease.rented_at, now, lease.time_limit_s)
        return LeasePrice(seconds, billing.cost(seconds, lease.gpu_count, lease.rate_per_gpu_hour), True)
    return LeasePrice(lease.billed_seconds, lease.cost, False)
