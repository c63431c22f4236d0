"""The lease's one door (issue 22 item 2, :mod:`apps.metering.lease`): each service moves the lease
through its states on the frozen clock, a move not in the table is refused, a move from a state
the row has left is refused, and migration 0010 gives old rows the state their stamps say."""
from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps

from apps.core.choices import LEASE_MOVES, LeaseState
from apps.jobs.services.attempts import attempt_accept
from apps.metering.lease import (
    LeaseMoveError,
    fences_confirm,
    fences_lift,
    lease_move,
    leases_end_lost,
    leases_release,
    leases_seen,
    leases_stop,
)
from apps.metering.models import Lease, LeaseGpu

from ..drive import rented_job

pytestmark = pytest.mark.django_db


def _lease(job) -> Lease:
    return Lease.objects.get(job=job, attempt=job.attempt)


def test_it_moves_opening_held_stopping_closed_through_the_services(frozen_clock, owner, pool):
    job = rented_job(owner)
    lease = _lease(job)
    assert lease.state == LeaseState.OPENING and lease.rented_at == frozen_clock.now()

    accepted = frozen_clock.advance(2)
    attempt_accept(job=job, lease=lease, now=accepted)
    lease = _lease(job)
    assert (lease.state, lease.accepted_at) == (LeaseState.HELD, accepted)
    attempt_accept(job=job, lease=lease, now=frozen_clock.advance(5))  # a second accept changes nothing
    assert _lease(job).accepted_at == accepted

    seen = frozen_clock.advance(10)
    assert leases_seen(node=lease.node, running=[{"job_id": job.pk, "attempt": 1}], now=seen) == 1
    leases_stop(job=job, attempt=1, end=frozen_clock.advance(3), reason="exit")
    lease = _lease(job)
    assert (lease.state, lease.end_reason, lease.billed_seconds) == (LeaseState.STOPPING, "exit", 20)
    assert leases_seen(node=lease.node, running=[{"job_id": job.pk, "attempt": 1}], now=seen) == 0  # run over
    leases_stop(job=job, attempt=1, end=frozen_clock.advance(60), reason="exit")  # a duplicate bills nothing twice
    assert _lease(job).billed_seconds == 20

    assert leases_release(job=job, attempt=1, now=frozen_clock.advance(4)) == 1
    lease = _lease(job)
    assert lease.state == LeaseState.CLOSED and lease.released_at == frozen_clock.now()
    assert not LeaseGpu.objects.filter(lease=lease, open=True).exists()
    assert leases_release(job=job, attempt=1) == 0  # released once


def test_a_fenced_lease_holds_its_gpus_until_the_fence_lifts(frozen_clock, owner, pool):
    job = rented_job(owner)
    lease = _lease(job)
    leases_release(job=job, attempt=1, now=frozen_clock.advance(30), fence=True)
    lease = _lease(job)
    assert lease.state == LeaseState.FENCED and lease.fenced_at == frozen_clock.now()
    assert lease.end_reason == "released" and lease.billed_seconds == 30  # released without a run end
    assert LeaseGpu.objects.filter(lease=lease, open=True).exists()
    # a heartbeat that still lists the attempt confirms nothing; one that does not, after the age, lifts it
    assert fences_confirm(node=lease.node, listed={(job.pk, 1)}, min_age_s=0, now=frozen_clock.advance(5)) == []
    assert fences_confirm(node=lease.node, listed=set(), min_age_s=10, now=frozen_clock.now()) == []
    lifted = fences_confirm(node=lease.node, listed=set(), min_age_s=5, now=frozen_clock.advance(1))
    assert [x.pk for x in lifted] == [lease.pk]
    lease = _lease(job)
    assert lease.state == LeaseState.CLOSED and lease.fence_lifted_at == frozen_clock.now()
    assert not LeaseGpu.objects.filter(lease=lease, open=True).exists()
    assert fences_lift(node=lease.node) == []


def test_a_lost_node_ends_its_leases_uncharged(frozen_clock, owner, pool):
    job = rented_job(owner)
    lease = _lease(job)
    at = frozen_clock.advance(40)
    frozen_clock.advance(100)
    [ended] = leases_end_lost(node=lease.node, at=at)
    lease = _lease(job)
    assert ended.pk == lease.pk
    assert (lease.state, lease.charged, lease.end_reason, lease.billed_seconds) == (
        LeaseState.CLOSED, False, "node_lost", 40)
    assert lease.released_at == at


def test_a_move_not_in_the_table_is_refused(frozen_clock, owner, pool):
    job = rented_job(owner)
    lease = _lease(job)
    for to in (LeaseState.CLOSED, LeaseState.FENCED, LeaseState.OPENING):
        assert to not in LEASE_MOVES[LeaseState.OPENING]
        with pytest.raises(LeaseMoveError, match="not allowed"):
            lease_move(lease, to, released_at=frozen_clock.now())
    assert _lease(job).state == LeaseState.OPENING and _lease(job).released_at is None
    leases_release(job=job, attempt=1, now=frozen_clock.advance(1))
    closed = _lease(job)
    for to in LeaseState:
        with pytest.raises(LeaseMoveError, match="not allowed"):
            lease_move(closed, to)
    assert LEASE_MOVES[LeaseState.CLOSED] == frozenset()


def test_a_move_from_a_state_the_row_left_is_refused(frozen_clock, owner, pool):
    job = rented_job(owner)
    stale = _lease(job)  # read while opening
    attempt_accept(job=job, lease=_lease(job), now=frozen_clock.advance(1))  # another process moved it
    with pytest.raises(LeaseMoveError, match="no longer opening"):
        lease_move(stale, LeaseState.HELD, accepted_at=frozen_clock.now())
    assert _lease(job).accepted_at == frozen_clock.now()


def test_migration_0010_derives_each_state_from_the_stamps(frozen_clock, owner, pool):
    opening = rented_job(owner)
    held = rented_job(owner)
    attempt_accept(job=held, lease=_lease(held), now=frozen_clock.advance(1))
    stopping = rented_job(owner)
    leases_stop(job=stopping, attempt=1, end=frozen_clock.advance(1), reason="exit")
    fenced = rented_job(owner)
    leases_release(job=fenced, attempt=1, now=frozen_clock.advance(1), fence=True)
    closed = rented_job(owner)
    leases_release(job=closed, attempt=1, now=frozen_clock.advance(1))
    want = {j.pk: s for j, s in ((opening, "opening"), (held, "held"), (stopping, "stopping"), (fenced, "fenced"),
                                 (closed, "closed"))}
    assert dict(Lease.objects.values_list("job_id", "state")) == want
    Lease.objects.update(state="opening")  # forged on purpose: the rows as they stood before migration 0010
    migration = importlib.import_module("apps.metering.migrations.0010_lease_state")
    migration.derive_states(django_apps, None)
    assert dict(Lease.objects.values_list("job_id", "state")) == want
