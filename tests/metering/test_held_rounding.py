"""Held and billed seconds round the same way (issue 16: "held 8 s, billed 9 s" read as overcharging)."""
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.metering.statements import statement_of

from ..drive import Agent, placed, queued_job
from ..factories import node_with_gpus

pytestmark = pytest.mark.django_db


def test_a_short_run_is_never_held_for_less_than_it_is_billed(frozen_clock, owner):
    node_with_gpus("n1", count=1)
    job = placed(queued_job(owner, compute={"gpus": 1, "time_limit": "10m"}))
    Agent(job, frozen_clock).run(run_s=8.4, output_s=0)
    lease = job.leases.get()
    line = statement_of([lease], timezone.now()).lines[0]
    assert line.billed_seconds == 9 and line.held_seconds == 9


def test_the_held_parts_of_two_periods_add_up_to_the_whole(frozen_clock, owner):
    node_with_gpus("n1", count=1)
    job = placed(queued_job(owner, compute={"gpus": 1, "time_limit": "10m"}))
    Agent(job, frozen_clock).run(run_s=100.5, output_s=0)
    lease = job.leases.get()
    cut = lease.rented_at + timedelta(seconds=40.2)
    whole = statement_of([lease], timezone.now()).lines[0].held_seconds
    before = statement_of([lease], timezone.now(), (None, cut)).lines[0].held_seconds
    after = statement_of([lease], timezone.now(), (cut, None)).lines[0].held_seconds
    assert (before, after, whole) == (41, 60, 101)
