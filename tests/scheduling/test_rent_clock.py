"""Issue 12 item 1: the meter starts when the lease exists. A cycle blocked inside its writes (the
lease table locked by another connection) bills none of the wait: the lease's ``rented_at``, the
job's, its "rented" event and the agent's deadline basis are stamped once the writes are done."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from apps.agent_api.selectors import agent_work_for
from apps.jobs.models import JobEvent
from apps.jobs.services.submit import job_submit
from apps.metering.models import Lease
from apps.scheduling.adapter import schedule_cycle

from ..e2e.conftest import database_url
from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)
HOLD_S = 3.0


def hold_lease_table(ready: threading.Event, released: list) -> None:
    """Another session: lock the lease table against inserts for ``HOLD_S`` seconds."""
    with psycopg.connect(database_url()) as conn, conn.transaction():
        conn.execute(f"LOCK TABLE {Lease._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
        ready.set()
        time.sleep(HOLD_S)
        released.append(timezone.now())


def test_a_cycle_blocked_on_the_lease_table_bills_none_of_the_wait(owner, pool, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("the table lock is PostgreSQL's")
    monkeypatch.setattr("apps.scheduling.tasks._send_cycle", lambda: None)  # only our cycle runs
    job = job_submit(owner=owner, document=spec(compute={"gpus": 1, "time_limit": "1m"}))
    ready, released = threading.Event(), []
    locker = threading.Thread(target=hold_lease_table, args=(ready, released))
    locker.start()
    assert ready.wait(10)
    began = timezone.now()
    assert schedule_cycle()["placed"] == 1  # blocks on the lease insert until the lock goes
    locker.join()
    assert timezone.now() - began >= timedelta(seconds=HOLD_S - 0.5)  # it did wait

    lease = Lease.objects.get(job=job)
    job.refresh_from_db()
    assert lease.rented_at >= released[0]  # stamped after the wait, not when the cycle began
    assert job.rented_at == lease.rented_at
    rented = JobEvent.objects.get(job=job, to_state="rented")
    assert rented.at == lease.rented_at
    # the agent's deadline counts from the same stamp: the whole limit is still ahead
    work = agent_work_for(lease.node)
    assert work["assignments"][0]["deadline_in_s"] > 60 - 1.5
    # a 3 s run ending now bills its 3 s, not the wait too
    from apps.metering.lease import leases_stop

    leases_stop(job=job, attempt=1, end=lease.rented_at + timedelta(seconds=3), reason="exit")
    assert Lease.objects.get(pk=lease.pk).billed_seconds == 3


def test_a_cycle_given_a_clock_stamps_that_clock(owner, pool, monkeypatch):
    """Tests and the simulator drive cycles with a frozen clock: the rent is that clock's."""
    monkeypatch.setattr("apps.scheduling.tasks._send_cycle", lambda: None)
    job = job_submit(owner=owner, document=spec())
    at = timezone.now() - timedelta(seconds=5)
    schedule_cycle(now=at)
    assert Lease.objects.get(job=job).rented_at == at
