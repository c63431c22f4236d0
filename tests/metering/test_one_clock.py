"""Issue 12 item 5: one clock, fair under outages (SPEC §4). A run's end is the earliest of the
report's arrival, the last heartbeat that listed the run plus one interval, and ``rented_at`` plus
the run length the agent measured. Driven through the services with a frozen clock."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent_api.reports import agent_report
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.metering import billing
from apps.metering.lease import leases_seen
from apps.metering.models import Lease
from apps.scheduling.adapter import schedule_cycle

from ..factories import spec

pytestmark = pytest.mark.django_db
T0 = timezone.now() - timedelta(hours=1)


def at(seconds: float):
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def placed(owner, pool, settings, monkeypatch):
    """A job rented at T0 (a frozen cycle), heartbeats every 10 s."""
    settings.E31_HEARTBEAT_S = 10
    monkeypatch.setattr("apps.scheduling.tasks._send_cycle", lambda: None)
    job = job_submit(owner=owner, document=spec(compute={"gpus": 1, "time_limit": "1h"}, output={"paths": []}))
    schedule_cycle(now=T0)
    lease = Lease.objects.get(job=job)
    assert lease.rented_at == T0
    return job, lease


def report(lease, seq: int, type_: str, arrived: float, **fields) -> None:
    agent_report(node=lease.node, job_id=lease.job_id, report={"attempt": 1, "seq": seq, "type": type_, **fields},
                 now=at(arrived))


def test_the_rule_takes_the_earliest_evidence():
    rent = at(0)
    assert billing.evidenced_end(rented_at=rent, arrived_at=at(40)) == at(40)
    assert billing.evidenced_end(rented_at=rent, arrived_at=at(40), seen_at=at(2), heartbeat_s=10) == at(12)
    assert billing.evidenced_end(rented_at=rent, arrived_at=at(40), seen_at=at(2), heartbeat_s=10,
                                 measured_s=3.2) == at(3.2)
    assert billing.evidenced_end(rented_at=rent, arrived_at=at(1), measured_s=3.2) == at(1)  # never past arrival
    assert billing.evidenced_end(rented_at=rent, arrived_at=at(40), measured_s=-5) == rent  # never before rent


def test_a_report_delayed_by_an_outage_bills_the_measured_run(placed):
    job, lease = placed
    report(lease, 1, "running", 1.0, elapsed_s=0.4)
    leases_seen(node=lease.node, running=[{"job_id": job.pk, "attempt": 1}], now=at(2))
    # the run ended 3.2 s after the accept; the web was down; the report got through at 40 s
    report(lease, 2, "finished", 40.0, exited={"exit_code": 0, "reason": "exit", "elapsed_s": 3.2})
    lease.refresh_from_db()
    job.refresh_from_db()
    assert lease.run_ended_at == at(3.2)
    assert lease.billed_seconds == 4
    assert (job.state, job.outcome) == ("released", "succeeded")
    assert job.run_started_at == at(0.4)
    assert job.run_ended_at == at(3.2)
    assert lease.released_at == at(40)  # the GPUs were back when the server heard: not billed, still held


def test_without_a_measured_length_the_last_heartbeat_bounds_the_end(placed):
    job, lease = placed
    report(lease, 1, "running", 1.0)
    leases_seen(node=lease.node, running=[{"job_id": job.pk, "attempt": 1}], now=at(5))
    report(lease, 2, "exited", 60.0, exit_code=0, reason="exit")
    lease.refresh_from_db()
    assert lease.run_ended_at == at(15)  # last listing heartbeat + one interval, not the 60 s arrival
    assert lease.billed_seconds == 15


def test_a_heartbeat_after_the_end_was_reported_moves_nothing(placed):
    job, lease = placed
    report(lease, 1, "running", 1.0)
    report(lease, 2, "exited", 3.0, exit_code=0, reason="exit", elapsed_s=2.5)
    assert leases_seen(node=lease.node, running=[{"job_id": job.pk, "attempt": 1}], now=at(9)) == 0
    lease.refresh_from_db()
    assert (lease.run_ended_at, lease.seen_at) == (at(2.5), None)


def test_without_other_evidence_the_arrival_is_the_end(placed):
    job, lease = placed
    report(lease, 1, "running", 1.0)
    report(lease, 2, "exited", 7.5, exit_code=1, reason="exit")
    lease.refresh_from_db()
    assert lease.run_ended_at == at(7.5)
    assert Job.objects.get(pk=job.pk).run_ended_at == at(7.5)


def test_the_time_limit_still_caps_the_end(placed):
    job, lease = placed
    report(lease, 1, "running", 1.0)
    report(lease, 2, "exited", 7300.0, exit_code=137, reason="time_limit", elapsed_s=7200.0)
    lease.refresh_from_db()
    assert lease.billed_seconds == 3600


def test_elapsed_must_be_seconds(api, placed):
    from apps.agent_api.api.serializers import ReportSerializer

    bad = ReportSerializer(data={"attempt": 1, "seq": 1, "type": "exited", "exit_code": 0, "reason": "exit",
                                 "elapsed_s": -1})
    assert not bad.is_valid() and "elapsed_s" in bad.errors
    folded = ReportSerializer(data={"attempt": 1, "seq": 1, "type": "finished",
                                    "exited": {"exit_code": 0, "reason": "exit", "elapsed_s": "soon"}})
    assert not folded.is_valid() and "elapsed_s" in folded.errors["exited"]
