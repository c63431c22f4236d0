"""Issue 12 case 1: the meter starts when the lease exists. With the lease table locked (a slow or
contended cycle) the core worker's cycle waits inside its writes; the user sees the job queued
the whole time, and the short run is billed its run, not the wait."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

from apps.jobs.models import Job
from apps.metering.models import Lease
from tests.e2e.conftest import database_url
from tests.e2e.test_faults import state_of, submit, wait_until
from tests.e2e.test_five_steps import check_meter, token_client
from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
LOCK_S = 10


def test_a_locked_lease_table_bills_none_of_the_wait(stack_with):
    stack = stack_with()
    client = token_client(stack.url, UserFactory(username="locked"))
    locked, done = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(database_url()) as conn, conn.transaction():
            conn.execute(f"LOCK TABLE {Lease._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
            locked.set()
            done.wait(LOCK_S)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        job_id = submit(client, "sleep 2")
        time.sleep(LOCK_S - 2)
        assert state_of(job_id) == "queued"  # what the user sees while the cycle waits
    finally:
        done.set()
        holder.join()
    assert wait_until(lambda: state_of(job_id) == "released", 60)
    job = Job.objects.get(pk=job_id)
    lease = Lease.objects.get(job_id=job_id)
    assert job.outcome == "succeeded"
    assert (lease.rented_at - job.submitted_at).total_seconds() >= LOCK_S - 3  # the wait was queue time
    assert 2 <= lease.billed_seconds <= 5, lease.billed_seconds  # the run, not the wait too
    check_meter(job_id)
