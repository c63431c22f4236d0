"""A job's receipt (issue 6, SPEC §4): the five steps' times, every held second split into
billed and not billed, the rates and the cost. Read-only; the template only prints it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from apps.core import clock

from . import billing
from .display import rate_text
from .models import Lease
from .pricing import lease_price

STEPS = (("Submitted", "submitted_at"), ("Rented", "rented_at"), ("Run started", "run_started_at"),
         ("Run ended", "run_ended_at"), ("Released", "released_at"))


@dataclass
class ReceiptLine:
    """One lease. Seconds are wall seconds of that lease (whole): ``held = billed + output + node_loss``.

    ``staging_seconds`` is the part of ``billed`` spent staging inputs missing from the node's
    cache; inputs pre-staged while the job waited cost nothing. ``running``: the meter still runs
    and ``billed``/``cost`` are so far.
    """

    lease: Lease
    rate: str
    held: int
    billed: int
    output: int
    node_loss: int
    staging_seconds: int
    cost: Decimal
    charged: bool
    running: bool
    cost_cents: Decimal = Decimal("0.00")


@dataclass
class Part:
    """One row of the receipt's breakdown: a kind of time, its seconds, whether billed, its cost."""

    label: str
    seconds: int
    billed: bool
    cost: Decimal
    note: str = ""


@dataclass
class Receipt:
    """Everything the receipt shows. Money in USD: ``cost`` exact (6 places), ``cost_cents`` rounded
    once; the lines' ``cost_cents`` add up to it. ``final`` is true once the job is released."""

    steps: list[tuple[str, datetime | None]]
    queue: int
    lines: list[ReceiptLine]
    parts: list[Part] = field(default_factory=list)
    held: int = 0
    billed: int = 0
    not_billed: int = 0
    cost: Decimal = Decimal(0)
    cost_cents: Decimal = Decimal("0.00")
    final: bool = False
    running: bool = False

    @property
    def total(self) -> int:
        """Every second from submit to release (to now): queue plus held; ``billed + not_billed``."""
        return self.queue + self.held


def _seconds(start: datetime, end: datetime) -> int:
    """Whole seconds from ``start`` to ``end``, per started second like the meter (never negative)."""
    return max(0, math.ceil(round((end - start).total_seconds(), 6)))


def queue_seconds(job, leases: list[Lease], now: datetime) -> int:
    """Seconds the job waited in the queue over all its attempts, never billed.

    Attempt 1 waits from submit to its first rent; a later attempt from the end of the
    previous one's leases (node loss) to its own rent; a job still queued waits up to now,
    one cancelled in the queue up to its release.
    """
    waited, since = 0.0, job.submitted_at
    for attempt in range(1, job.attempt + 1):
        mine = [lease for lease in leases if lease.attempt == attempt]
        if not mine:
            end = job.released_at or now
            waited += max(0.0, (end - since).total_seconds())
            since = end
            continue
        waited += max(0.0, (min(lease.rented_at for lease in mine) - since).total_seconds())
        since = max(lease.released_at or now for lease in mine)
    return round(waited)  # never billed, so to the nearest second


def job_receipt(job, now: datetime | None = None) -> Receipt:
    """The receipt of ``job`` (its leases over all attempts), priced at ``now`` while a run goes on."""
    now = now or clock.now()
    leases = list(Lease.objects.filter(job=job).select_related("node").order_by("attempt", "node_rank"))
    receipt = Receipt(steps=[(label, getattr(job, name)) for label, name in STEPS],
                      queue=queue_seconds(job, leases, now), lines=[], final=job.released_at is not None)
    for lease in leases:
        held = _seconds(lease.rented_at, lease.released_at or now)
        price = lease_price(lease, now)
        running, billed, cost = price.running, price.billed_seconds or 0, price.cost or Decimal(0)
        if lease.charged:
            line = ReceiptLine(lease, rate_text(lease.rate_per_gpu_hour), held, billed, max(0, held - billed), 0,
                               min(lease.staging_seconds, billed), cost, True, running)
        else:
            line = ReceiptLine(lease, rate_text(lease.rate_per_gpu_hour), held, 0, 0, held, 0, Decimal(0), False,
                               False)
        receipt.lines.append(line)
    cents, receipt.cost_cents = billing.cents_split([line.cost for line in receipt.lines])
    for line, share in zip(receipt.lines, cents, strict=True):
        line.cost_cents = share
    receipt.cost = sum((line.cost for line in receipt.lines), Decimal(0))
    receipt.held = sum(line.held for line in receipt.lines)
    receipt.billed = sum(line.billed for line in receipt.lines)
    receipt.running = any(line.running for line in receipt.lines)
    output = sum(line.output for line in receipt.lines)
    node_loss = sum(line.node_loss for line in receipt.lines)
    staging = sum(line.staging_seconds for line in receipt.lines)
    receipt.not_billed = receipt.queue + output + node_loss
    zero = Decimal("0.00")
    receipt.parts = [
        Part("Queue", receipt.queue, False, zero, "waiting for GPUs; pre-staging of inputs meanwhile is on us"),
        Part("Rent and run", receipt.billed, True, receipt.cost_cents,
             f"per started second; {staging} s of it staging inputs not yet on the node" if staging
             else "per started second"),
        Part("Output", output, False, zero, "packing and uploading the declared outputs"),
    ]
    if node_loss:
        receipt.parts.append(Part("Node lost", node_loss, False, zero, "the platform's fault: recorded, not charged"))
    return receipt
