"""The ledger (SPEC §4): closed once, server clock, never negative, GPUs held = GPUs billed, Decimal money."""
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.agent_api.reports import agent_report
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.metering.lease import leases_end_lost, leases_release, leases_stop
from apps.metering.models import GpuRate, Lease, LeaseGpu
from apps.metering.receipts import job_receipt
from apps.scheduling.adapter import schedule_cycle

from ..clock import T0 as T
from ..drive import Agent, placed, pool_drain
from ..factories import node_with_gpus, spec

pytestmark = pytest.mark.django_db


def _job(owner, *, gpus=1, time_limit="1h") -> Job:
    """A job submitted at the frozen clock's now (queued until a node that fits exists)."""
    return job_submit(owner=owner, document=spec(compute={"gpus": gpus, "time_limit": time_limit}))


def _rent(job, clock, at) -> Lease:
    """Place ``job`` by a scheduling cycle at ``at`` (the clock moved there); its lease."""
    clock.set(at)
    return placed(job).leases.get()


def test_it_bills_rent_to_run_end_and_shows_the_queue_at_no_cost(frozen_clock, owner):
    node_with_gpus("n1", count=2)
    pool_drain()
    job = _job(owner)  # at T, the node draining: it waits 20 minutes
    frozen_clock.set(T + timedelta(minutes=20))
    pool_drain(False)
    job = placed(job)
    job = Agent(job, frozen_clock).run(run_s=570, output_s=35)  # ends at 29:30, released at 30:05
    assert (job.state, job.released_at) == ("released", T + timedelta(minutes=30, seconds=5))
    lease = job.leases.get()
    assert lease.billed_seconds == 570
    assert lease.cost == Decimal("0.394250")  # 570 s x 1 GPU x 2.49 / 3600
    receipt = job_receipt(job, now=T + timedelta(hours=1))
    queue = receipt.parts[0]
    assert (queue.label, queue.seconds, queue.billed, queue.cost) == ("Queue", 1200, False, Decimal("0.00"))
    output = receipt.parts[2]
    assert (output.label, output.seconds, output.billed, output.cost) == ("Output", 35, False, Decimal("0.00"))
    assert receipt.billed == 570 and receipt.cost_cents == Decimal("0.39")
    assert receipt.total == 1200 + 605 == receipt.billed + receipt.not_billed


def test_it_rounds_once_on_the_total_61_4_seconds_bill_62(frozen_clock, owner):
    node_with_gpus("n1", count=1)
    job = _job(owner)
    _rent(job, frozen_clock, T)
    for _ in range(3):  # the agent reports progress several times; the meter rounds only at the end
        leases_stop(job=job, attempt=1, end=T + timedelta(seconds=61.4), reason="exit")
    assert job.leases.get().billed_seconds == 62


def test_a_duplicate_job_ended_report_closes_nothing_twice(owner):
    node_with_gpus("n1", count=1)
    job = job_submit(owner=owner, document=spec())
    schedule_cycle()
    job.refresh_from_db()
    lease = job.leases.get()
    report = {"attempt": 1, "seq": 1, "type": "exited", "exit_code": 0, "reason": "exit"}
    assert agent_report(node=lease.node, job_id=job.pk, report=report) is True
    lease.refresh_from_db()
    first = (lease.run_ended_at, lease.billed_seconds, lease.cost)
    assert agent_report(node=lease.node, job_id=job.pk, report=report) is False  # same report delivered twice
    later = {**report, "seq": 2}  # the same "ended" news under a new sequence number, later
    agent_report(node=lease.node, job_id=job.pk, report=later)
    lease.refresh_from_db()
    assert (lease.run_ended_at, lease.billed_seconds, lease.cost) == first
    agent_report(node=lease.node, job_id=job.pk, report={"attempt": 1, "seq": 3, "type": "finished"})
    lease.refresh_from_db()
    released = lease.released_at
    assert leases_release(job=job, attempt=1) == 0  # a duplicate release task closes nothing
    lease.refresh_from_db()
    assert lease.released_at == released and not LeaseGpu.objects.filter(open=True).exists()


def test_a_cancel_50_ms_after_rent_never_yields_a_negative_duration(frozen_clock, owner):
    node_with_gpus("n1", count=2)
    job = _job(owner)
    _rent(job, frozen_clock, T)
    leases_stop(job=job, attempt=1, end=T + timedelta(milliseconds=50), reason="cancelled")
    leases_release(job=job, attempt=1, now=T + timedelta(milliseconds=20))  # a release stamped "earlier"
    lease = job.leases.get()
    assert lease.billed_seconds == 1 and lease.cost == Decimal("0.000692")
    assert lease.run_ended_at >= lease.rented_at and lease.released_at >= lease.run_ended_at


def test_an_end_before_the_rent_bills_zero_not_a_negative(frozen_clock, owner):
    node_with_gpus("n1", count=1)
    job = _job(owner)
    _rent(job, frozen_clock, T)
    leases_stop(job=job, attempt=1, end=T - timedelta(seconds=5), reason="cancelled")
    lease = job.leases.get()
    assert lease.billed_seconds == 0 and lease.run_ended_at == lease.rented_at


def test_it_bills_the_gpus_held_and_keeps_money_as_decimal(frozen_clock, owner):
    node_with_gpus("n1", count=4)
    job = _job(owner, gpus=2)
    lease = _rent(job, frozen_clock, T)
    assert lease.gpu_count == 2 == LeaseGpu.objects.filter(lease=lease).count()
    leases_stop(job=job, attempt=1, end=T + timedelta(hours=1), reason="exit")
    lease.refresh_from_db()
    assert isinstance(lease.cost, Decimal) and lease.cost == Decimal("4.980000")


def test_the_rate_in_force_at_rent_applies_to_the_whole_lease(frozen_clock, owner):
    GpuRate.objects.create(gpu_model="H100-80GB", rate_per_gpu_hour=Decimal("3.00"), valid_from=T)
    GpuRate.objects.create(gpu_model="H100-80GB", rate_per_gpu_hour=Decimal("9.00"),
                           valid_from=T + timedelta(minutes=30))
    node_with_gpus("n1", count=1)
    pool_drain()
    job = _job(owner)  # at T, queued: the node is draining
    frozen_clock.set(T + timedelta(minutes=10))
    pool_drain(False)
    _rent(job, frozen_clock, T + timedelta(minutes=10))
    leases_stop(job=job, attempt=1, end=T + timedelta(hours=1, minutes=10), reason="exit")
    lease = job.leases.get()
    assert lease.rate_per_gpu_hour == Decimal("3.00") and lease.cost == Decimal("3.000000")


def test_the_meter_uses_the_servers_clock_not_the_agents(owner):
    node_with_gpus("n1", count=1)
    job = job_submit(owner=owner, document=spec())
    schedule_cycle()
    job.refresh_from_db()
    lease = job.leases.get()
    agent_report(node=lease.node, job_id=job.pk, report={
        "attempt": 1, "seq": 1, "type": "exited", "exit_code": 0, "reason": "exit",
        "at": "1999-01-01T00:00:00Z", "ended_at": "2099-01-01T00:00:00Z"})
    lease.refresh_from_db()
    assert lease.rented_at <= lease.run_ended_at <= datetime.now(UTC)
    assert lease.billed_seconds <= 5


def test_a_node_lost_twice_ends_its_leases_once_and_charges_nothing(frozen_clock, owner):
    node = node_with_gpus("n1", count=1)
    job = _job(owner)
    _rent(job, frozen_clock, T)
    assert len(leases_end_lost(node=node, at=T + timedelta(seconds=90))) == 1
    assert leases_end_lost(node=node, at=T + timedelta(seconds=300)) == []
    lease = job.leases.get()
    assert (lease.charged, lease.billed_seconds, lease.end_reason) == (False, 90, "node_lost")
    assert lease.released_at == T + timedelta(seconds=90)
    receipt = job_receipt(job, now=T + timedelta(hours=1))
    assert receipt.cost_cents == 0 and receipt.parts[-1].label == "Node lost" and receipt.parts[-1].seconds == 90
