"""``manage.py meter_check`` finds each kind of violation and passes on a clean ledger (SPEC §4).

Jobs reach their leases through the services on a frozen clock; then each test breaks a lease's
columns on purpose (``# forged on purpose``) into what no service would write, for the check to find."""
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from apps.metering.checks import meter_violations
from apps.metering.models import Lease, LeaseGpu

from ..clock import T0 as T
from ..drive import Agent, finished_job, placed, queued_job
from ..factories import node_with_gpus

pytestmark = pytest.mark.django_db


def _check() -> tuple[bool, str]:
    err = io.StringIO()
    try:
        call_command("meter_check", stdout=io.StringIO(), stderr=err)
    except CommandError:
        return False, err.getvalue()
    return True, err.getvalue()


def _lease(owner, clock, node, start, seconds=60, *, gpus=1, release=True) -> Lease:
    """A job of ``gpus`` GPUs placed at ``start`` by a scheduling cycle (on ``node`` when it is the only
    one with room); with ``release``, its command runs ``seconds`` and it is released one second
    later, as its agent reports it. The tests then break the ledger on purpose, lease columns only."""
    clock.set(start)
    job = placed(queued_job(owner, compute={"gpus": gpus, "time_limit": "1h"}))
    lease = job.leases.get()
    if release:
        Agent(job, clock).run(run_s=seconds, output_s=1)
    lease.refresh_from_db()
    return lease


def _kinds() -> set[str]:
    return {v.kind for v in meter_violations()}


def test_a_clean_ledger_passes(frozen_clock, owner):
    node = node_with_gpus("n1", count=2)
    finished_job(owner)  # on its own node
    node = node_with_gpus("n2", count=2)
    _lease(owner, frozen_clock, node, T, gpus=2)
    _lease(owner, frozen_clock, node, T + timedelta(minutes=5), gpus=1, release=False)
    ok, text = _check()
    assert ok, text


def test_it_finds_a_gpu_in_two_overlapping_leases(frozen_clock, owner):
    node = node_with_gpus("n1", count=1)
    first = _lease(owner, frozen_clock, node, T, 600)
    second = _lease(owner, frozen_clock, node, T + timedelta(minutes=20), 60)
    Lease.objects.filter(pk=second.pk).update(rented_at=T + timedelta(minutes=5))  # forged on purpose
    ok, text = _check()
    assert not ok and "[gpu-overlap]" in text and f"lease {first.pk} and lease {second.pk}" in text


def test_it_finds_negative_and_open_ended_closed_leases(frozen_clock, owner):
    node = node_with_gpus("n1", count=2)
    backwards = _lease(owner, frozen_clock, node, T)
    Lease.objects.filter(pk=backwards.pk).update(released_at=T - timedelta(seconds=1))  # forged on purpose
    unended = _lease(owner, frozen_clock, node, T + timedelta(hours=1))
    Lease.objects.filter(pk=unended.pk).update(run_ended_at=None, billed_seconds=None, cost=None)  # forged on purpose
    ok, text = _check()
    assert not ok and f"lease {backwards.pk}" in text and "released before it was rented" in text
    assert f"lease {unended.pk}" in text and "released but its run has no end" in text
    assert {"negative", "open-ended"} <= _kinds()


def test_it_finds_an_open_lease_of_a_released_job_and_a_gpu_still_held(frozen_clock, owner):
    node = node_with_gpus("n1", count=2)
    left_open = _lease(owner, frozen_clock, node, T)  # released through the services, then its lease reopened
    Lease.objects.filter(pk=left_open.pk).update(released_at=None)  # forged on purpose
    closed = _lease(owner, frozen_clock, node, T + timedelta(hours=1))
    LeaseGpu.objects.filter(lease=closed).update(open=True)
    LeaseGpu.objects.filter(lease=left_open).update(open=False)
    ok, text = _check()
    assert not ok and "still holds GPUs but its job is released" in text
    assert f"lease {closed.pk} is released but still marks a GPU as held" in text


def test_it_finds_billed_gpus_that_were_not_held(frozen_clock, owner):
    node = node_with_gpus("n1", count=2)
    lease = _lease(owner, frozen_clock, node, T)
    Lease.objects.filter(pk=lease.pk).update(gpu_count=2, cost=Decimal("0.083000"))
    ok, text = _check()
    assert not ok and f"lease {lease.pk} bills 2 GPUs but holds 1" in text


def test_it_finds_a_node_leased_beyond_its_capacity(frozen_clock, owner):
    node = node_with_gpus("n1", count=1)
    lease = _lease(owner, frozen_clock, node, T, 600)
    extra = Lease.objects.create(  # forged on purpose
        job=lease.job, attempt=2, node=node, gpu_count=1, gpu_model="H100-80GB",
        rate_per_gpu_hour=Decimal("2.49"), time_limit_s=3600, rented_at=T,
        run_ended_at=T + timedelta(seconds=600), released_at=T + timedelta(seconds=601),
        billed_seconds=600, cost=Decimal("0.415000"))
    ok, text = _check()
    assert not ok and "[capacity] node" in text and "more than its 1 GPUs allow" in text
    assert f"lease {extra.pk} bills 1 GPUs but holds 0" in text


def test_it_finds_billing_past_the_time_limit_and_a_cost_off_the_formula(frozen_clock, owner):
    node = node_with_gpus("n1", count=2)
    long = _lease(owner, frozen_clock, node, T, 600)
    Lease.objects.filter(pk=long.pk).update(billed_seconds=3700, cost=Decimal("2.559167"))  # forged on purpose
    wrong = _lease(owner, frozen_clock, node, T + timedelta(hours=2), 600)
    Lease.objects.filter(pk=wrong.pk).update(cost=Decimal("0.42"))
    ok, text = _check()
    assert not ok
    assert f"lease {long.pk} (job {long.job_id}) bills 3700 s, more than its time limit of 3600 s" in text
    assert f"lease {wrong.pk} (job {wrong.job_id}) costs 0.420000" in text
    assert {"time-limit", "formula"} <= _kinds()
