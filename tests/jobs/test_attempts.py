"""The attempt's one owner (issue 22 item 1, :mod:`apps.jobs.services.attempts`), driven directly on
the frozen clock with plain values, as the agent protocol calls it: accept, staging, running,
exited, finished, the outcome and lost output, every rank finished, and a heartbeat."""
from __future__ import annotations

from datetime import timedelta

import pytest

from apps.core.choices import LeaseState
from apps.jobs.models import Job
from apps.jobs.services.attempts import (
    RankFinished,
    attempt_accept,
    attempt_every_rank_finished,
    attempt_exited,
    attempt_finished,
    attempt_outcome,
    attempt_output_not_delivered,
    attempt_running,
    attempt_staging,
    attempts_heartbeat,
)
from apps.metering.lease import leases_release
from apps.metering.models import Lease

from ..drive import Agent, rented_job

pytestmark = pytest.mark.django_db


def _fresh(job: Job) -> tuple[Job, Lease]:
    job = Job.objects.get(pk=job.pk)
    return job, Lease.objects.select_related("node").get(job=job, attempt=job.attempt)


def _run(job: Job, clock, *, run_s: float = 30) -> tuple[Job, Lease]:
    """Accept now, start 5 s later, exit 0 ``run_s`` s after that."""
    job, lease = _fresh(job)
    attempt_accept(job=job, lease=lease, now=clock.now())
    attempt_running(job=job, lease=lease, elapsed_s=None, now=clock.advance(5))
    job, lease = _fresh(job)
    attempt_exited(job=job, lease=lease, reason="exit", exit_code=0, message="", elapsed_s=None,
                   now=clock.advance(run_s))
    return _fresh(job)


def test_it_runs_an_attempt_from_accept_to_release(frozen_clock, owner, pool):
    job = rented_job(owner, output={"paths": []})
    rented = frozen_clock.now()
    job, lease = _run(job, frozen_clock)
    assert (job.state, job.run_started_at, job.run_ended_at) == ("output", rented + timedelta(seconds=5),
                                                                 rented + timedelta(seconds=35))
    assert (lease.state, lease.billed_seconds, lease.end_reason) == (LeaseState.STOPPING, 35, "exit")
    attempt_finished(job=job, lease=lease, exit_code=0, finished=[RankFinished(rank=0)], now=frozen_clock.advance(2))
    job, lease = _fresh(job)
    assert (job.state, job.outcome, job.status_message) == ("released", "succeeded", "")
    assert lease.state == LeaseState.CLOSED and lease.released_at == frozen_clock.now()
    assert [e.to_state for e in job.events.order_by("seq")] == ["queued", "rented", "running", "output", "released"]


def test_staging_counts_its_rate_and_the_seconds_it_downloaded(frozen_clock, owner, pool):
    job = rented_job(owner)
    job, lease = _fresh(job)
    attempt_accept(job=job, lease=lease, now=frozen_clock.now())
    attempt_staging(job=job, lease=lease, bytes_done=0, bytes_total=1000, bytes_fetched=0, message="",
                    now=frozen_clock.advance(1))
    job, lease = _fresh(job)
    attempt_staging(job=job, lease=lease, bytes_done=800, bytes_total=1000, bytes_fetched=800,
                    message="fetching data.bin", now=frozen_clock.advance(4))
    job, lease = _fresh(job)
    assert (job.staging_bytes_done, job.staging_rate_bps, job.status_message) == (800, 200.0, "fetching data.bin")
    assert lease.staging_seconds == 5  # from the accept, on the meter


def test_an_exit_after_a_cancel_is_cancelled_and_ends_at_the_limit_at_most(frozen_clock, owner, pool):
    from apps.jobs.services.cancel import job_cancel

    job = rented_job(owner, compute={"gpus": 1, "time_limit": "1m"}, output={"paths": []})
    job, lease = _fresh(job)
    attempt_accept(job=job, lease=lease, now=frozen_clock.now())
    attempt_running(job=job, lease=lease, elapsed_s=None, now=frozen_clock.advance(1))
    job_cancel(job=job)
    job, lease = _fresh(job)
    attempt_exited(job=job, lease=lease, reason="exit", exit_code=143, message="", elapsed_s=None,
                   now=frozen_clock.advance(300))
    job, lease = _fresh(job)
    assert (job.end_reason, job.exit_code) == ("cancelled", 143)
    assert job.run_ended_at == job.rented_at + timedelta(seconds=60)
    assert lease.billed_seconds == 60
    assert job.events.get(to_state="output").detail == "stopped: cancelled"
    outcome, lost = attempt_outcome(job=job, finished=[RankFinished(rank=0)])
    assert (outcome, lost) == ("cancelled", "")


def test_lost_output_fails_a_clean_exit_with_the_agents_word(frozen_clock, owner, pool):
    job = rented_job(owner)  # declares out/**
    job, lease = _run(job, frozen_clock)
    said = [RankFinished(rank=0, code="bundle_upload_failed", message="upload failed: disk full")]
    assert attempt_output_not_delivered(job=job, finished=said) == "upload failed: disk full"
    assert attempt_output_not_delivered(job=job, finished=[RankFinished(rank=0, code="packing_failed")]) == \
        "output not delivered (packing_failed)"
    # no word from the agent, and no verified bundle: still not a success
    assert attempt_output_not_delivered(job=job, finished=[RankFinished(rank=0)]) == \
        "output not delivered: no verified bundle was received"
    attempt_finished(job=job, lease=lease, exit_code=0, finished=said, now=frozen_clock.advance(1))
    job = Job.objects.get(pk=job.pk)
    assert (job.outcome, job.status_message) == ("failed", "upload failed: disk full")
    assert job.events.get(to_state="released").detail == "released: failed (upload failed: disk full)"


def test_a_verified_bundle_is_delivered_output(frozen_clock, owner, pool):
    job = rented_job(owner)
    agent = Agent(job, frozen_clock)
    agent.start()
    agent.say("exited", exit_code=0, reason="exit")
    agent.bundle({"out/a.txt": b"a"})
    job, lease = _fresh(job)
    assert attempt_output_not_delivered(job=job, finished=[RankFinished(rank=0)]) == ""
    assert attempt_outcome(job=job, finished=[RankFinished(rank=0)]) == ("succeeded", "")


def test_every_rank_finished_waits_for_each_open_rank(frozen_clock, owner, pool):
    job = rented_job(owner)
    job, lease = _run(job, frozen_clock)
    assert not attempt_every_rank_finished(job=job, finished=[])
    assert not attempt_every_rank_finished(job=job, finished=[RankFinished(rank=1)])
    assert attempt_every_rank_finished(job=job, finished=[RankFinished(rank=0)])
    leases_release(job=job, attempt=1, now=frozen_clock.advance(1))
    assert attempt_every_rank_finished(job=job, finished=[])  # no rank is open any more


def test_finished_without_exited_stops_the_meter_now(frozen_clock, owner, pool):
    job = rented_job(owner, output={"paths": []})
    job, lease = _fresh(job)
    attempt_accept(job=job, lease=lease, now=frozen_clock.now())
    attempt_running(job=job, lease=lease, elapsed_s=None, now=frozen_clock.advance(3))
    job, lease = _fresh(job)
    attempt_finished(job=job, lease=lease, exit_code=2, finished=[RankFinished(rank=0)],
                     now=frozen_clock.advance(7))
    job, lease = _fresh(job)
    assert (job.state, job.outcome, job.exit_code, lease.billed_seconds) == ("released", "failed", 2, 10)


def test_a_heartbeat_stamps_the_node_sees_the_runs_and_reconciles_the_lost(frozen_clock, owner, pool, settings):
    kept, dropped = rented_job(owner), rented_job(owner)
    kept, kept_lease = _fresh(kept)
    dropped, dropped_lease = _fresh(dropped)
    assert kept_lease.node_id == dropped_lease.node_id
    node = kept_lease.node
    attempt_accept(job=kept, lease=kept_lease, now=frozen_clock.now())
    attempt_accept(job=dropped, lease=dropped_lease, now=frozen_clock.now())
    beat = frozen_clock.advance(3 * settings.E31_HEARTBEAT_S)
    health = {"source": "nvml", "gpus": []}
    after = attempts_heartbeat(node=node, health=health, cached_inputs=None,
                               running=[{"job_id": kept.pk, "attempt": 1}], now=beat)
    assert after.last_heartbeat_at == beat and after.health["at"] == beat.isoformat()
    assert Lease.objects.get(pk=kept_lease.pk).seen_at == beat
    dropped = Job.objects.get(pk=dropped.pk)  # its agent no longer runs it: requeued, attempt 2
    assert (dropped.attempt, Lease.objects.get(pk=dropped_lease.pk).state) == (2, LeaseState.CLOSED)
    assert Job.objects.get(pk=kept.pk).state == "rented"
    # an agent that does not say what runs reconciles nothing
    attempts_heartbeat(node=node, health=None, cached_inputs=None, running=None, now=frozen_clock.advance(60))
    assert Job.objects.get(pk=kept.pk).attempt == 1
