"""Issue 10, item 1 and 3: a submit never runs a cycle in its request; cycles coalesce; a cycle writes
only meaningful changes."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.jobs.models import Job
from apps.scheduling import cycle_loop
from apps.scheduling.adapter import ESTIMATE_SLACK_S, schedule_cycle

from ..factories import spec


@pytest.mark.django_db(transaction=True)
def test_a_submit_request_only_asks_for_a_cycle_which_runs_after_it(api, pool, cycles):
    ran_before = cycles.ran
    resp = api.post("/api/v1/jobs/", spec(), format="json")
    assert resp.status_code == 201
    assert cycles.during_request == 0  # nothing ran inside the request
    assert cycles.ran == ran_before + 1  # the harness ran it once the response was built
    assert Job.objects.get(pk=resp.json()["id"]).state == "rented"


@pytest.mark.django_db(transaction=True)
def test_without_a_runner_the_eager_ask_goes_to_a_loop_thread_not_the_caller(settings):
    previous = cycle_loop.set_runner(None)
    calls = []
    started = threading.Event()
    try:
        loop = cycle_loop.CycleLoop(run=lambda: (calls.append(threading.get_ident()), started.set()))
        cycle_loop.set_runner(loop.wake)
        loop.start()
        cycle_loop.cycle_wanted()
        assert started.wait(5)
        assert calls and threading.get_ident() not in calls
        loop.stop()
    finally:
        cycle_loop.set_runner(previous)


def test_the_loop_coalesces_asks_that_come_while_a_cycle_runs():
    gate = threading.Event()
    runs = []

    def slow_cycle():
        runs.append(1)
        gate.wait(5)

    loop = cycle_loop.CycleLoop(run=slow_cycle)
    loop.start()
    loop.wake()
    deadline = time.monotonic() + 5
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(100):  # a burst during the first cycle: one more cycle, not a hundred
        loop.wake()
    gate.set()
    deadline = time.monotonic() + 5
    while len(runs) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    loop.stop()
    assert len(runs) == 2


@pytest.mark.django_db
def test_an_estimate_moving_less_than_a_minute_is_not_rewritten(owner, pool):
    from apps.jobs.services.submit import job_submit

    whole = {"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"}
    job_submit(owner=owner, document=spec(compute=whole))
    schedule_cycle()
    waiting = job_submit(owner=owner, document=spec(compute=whole))
    schedule_cycle()
    before = Job.objects.get(pk=waiting.pk).estimated_start_at
    assert before is not None
    later = timezone.now() + timedelta(seconds=ESTIMATE_SLACK_S - 20)
    assert schedule_cycle(now=later)["written"] == 0  # the estimate moved < 60 s: kept as it was
    assert Job.objects.get(pk=waiting.pk).estimated_start_at == before
