"""Job events become deliveries: queued, running, released and array finished, once each, sent after the
commit by the side queue, never holding the core."""
from __future__ import annotations

import json
import time

import pytest

from apps.hooks import tasks
from apps.hooks.models import WebhookDelivery
from apps.hooks.services import webhook_create
from apps.jobs.arrays import array_cancel, array_submit
from apps.jobs.models import Job
from apps.jobs.services.cancel import job_cancel
from e31site.celery import app

from ..drive import Agent, placed, pool_drain, queued_job, spec_doc

pytestmark = pytest.mark.django_db

ALL = ["queued", "running", "released", "array_finished"]


def _events(receiver) -> list[tuple[str, dict]]:
    return [(s.headers["e31-webhook-event"], json.loads(s.body)) for s in receiver.seen]


def test_a_job_announces_queued_running_and_released_once_each(frozen_clock, team, receiver, pool,
                                                               django_capture_on_commit_callbacks):
    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=ALL)
    with django_capture_on_commit_callbacks(execute=True):
        job = queued_job(team.member, project="ml-team")
    agent = Agent(Job.objects.get(pk=job.pk), frozen_clock)
    with django_capture_on_commit_callbacks(execute=True):
        agent.start(staging_s=5)
    with django_capture_on_commit_callbacks(execute=True):
        agent.log(b"hello\n")
        agent.end(exit_code=0, run_s=60)
    events = _events(receiver)
    assert [e for e, _ in events] == ["queued", "running", "released"]
    for name, body in events:
        assert body["event"] == name and body["project"] == "ml-team"
        assert body["job"]["id"] == job.pk and body["job"]["owner"] == "member-user"
    released = events[-1][1]["job"]
    assert (released["state"], released["outcome"], released["end_reason"], released["exit_code"]) == \
        ("released", "succeeded", "exit", 0)
    assert released["released_at"] and released["run_started_at"] and released["url"].endswith(f"/jobs/{job.pk}/")
    assert {d.status for d in WebhookDelivery.objects.all()} == {"delivered"}
    assert WebhookDelivery.objects.count() == 3  # every timeline event sent job_changed: no duplicates


def test_a_webhook_hears_only_its_events_and_only_its_projects_jobs(frozen_clock, team, receiver, pool,
                                                                    django_capture_on_commit_callbacks):
    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=["released"])
    with django_capture_on_commit_callbacks(execute=True):
        mine = queued_job(team.member, project="ml-team")
        queued_job(team.member)  # the member's personal project: not ml-team's
        job_cancel(job=Job.objects.get(pk=mine.pk), by=team.member)
    events = _events(receiver)
    assert [(e, b["job"]["id"]) for e, b in events] == [("released", mine.pk)]


def test_a_cancelled_job_says_why(frozen_clock, team, receiver, pool, django_capture_on_commit_callbacks):
    pool_drain()
    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=["released"])
    with django_capture_on_commit_callbacks(execute=True):
        job = queued_job(team.member, project="ml-team")
        job_cancel(job=job, by=team.owner)
    (_, body), = _events(receiver)
    assert body["job"]["outcome"] == "cancelled" and body["job"]["status_message"]


def test_an_array_announces_array_finished_once(frozen_clock, team, receiver, pool,
                                                django_capture_on_commit_callbacks):
    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=["array_finished", "released"])
    with django_capture_on_commit_callbacks(execute=True):
        made = array_submit(owner=team.member, document=spec_doc(array=2, project="ml-team"))
    first, second = (Job.objects.get(pk=pk) for pk in made.job_ids)
    with django_capture_on_commit_callbacks(execute=True):
        Agent(first if first.state == "rented" else placed(first), frozen_clock).run(exit_code=0, run_s=10)
    assert [e for e, _ in _events(receiver)] == ["released"]  # one task is not the array
    second = Job.objects.get(pk=second.pk)
    with django_capture_on_commit_callbacks(execute=True):
        Agent(second if second.state == "rented" else placed(second), frozen_clock).run(exit_code=3, run_s=10)
    with django_capture_on_commit_callbacks(execute=True):
        tasks.webhook_array_check_task(made.array.pk)  # a second check (a task delivered twice): no second event
    events = _events(receiver)
    assert [e for e, _ in events] == ["released", "released", "array_finished"]
    array = events[-1][1]["array"]
    assert (array["id"], array["size"], array["outcomes"]) == (made.array.pk, 2, {"succeeded": 1, "failed": 1})
    assert array["finished_at"] and array["project"] == "ml-team"


def test_an_array_cancelled_while_queued_finishes_too(frozen_clock, team, receiver, pool,
                                                      django_capture_on_commit_callbacks):
    pool_drain()
    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=["array_finished"])
    made = array_submit(owner=team.member, document=spec_doc(array=3, project="ml-team"))
    with django_capture_on_commit_callbacks(execute=True):
        array_cancel(array=made.array, by=team.member)
    (event, body), = _events(receiver)
    assert event == "array_finished" and body["array"]["outcomes"] == {"cancelled": 3}


def test_a_hanging_receiver_never_holds_the_core(frozen_clock, team, receiver, pool,
                                                 django_capture_on_commit_callbacks, monkeypatch):
    """The submit and the release only write rows; the tries go to the side queue after the commit."""
    receiver.hang = True
    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=ALL)
    pool_drain()
    queued_to = []
    monkeypatch.setattr(tasks.webhook_deliver_task, "delay", lambda pk: queued_to.append(pk))
    started = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        job = queued_job(team.member, project="ml-team")
        job_cancel(job=job, by=team.member)
    assert time.monotonic() - started < 1.0  # well under one try's timeout
    assert receiver.seen == []
    rows = list(WebhookDelivery.objects.order_by("pk"))
    assert [d.event for d in rows] == ["queued", "released"] and queued_to == [d.pk for d in rows]
    assert all(d.status == "pending" and d.attempts == 0 for d in rows)
    route = app.amqp.router.route({}, tasks.webhook_deliver_task.name, (), {})
    assert route["queue"].name == "side"


def test_no_webhook_costs_the_core_one_query_per_signal(frozen_clock, team, pool, django_assert_max_num_queries):
    from apps.hooks.receivers import on_job_changed

    job = queued_job(team.member, project="ml-team")
    with django_assert_max_num_queries(1):
        on_job_changed(job_id=job.pk)


def test_a_rolled_back_change_is_never_announced(frozen_clock, team, receiver, pool,
                                                 django_capture_on_commit_callbacks):
    from django.db import transaction

    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=["queued"])
    with django_capture_on_commit_callbacks(execute=True):
        try:
            with transaction.atomic():
                queued_job(team.member, project="ml-team")
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
    assert receiver.seen == [] and not WebhookDelivery.objects.exists()


def test_a_failure_to_record_never_fails_the_jobs_change(frozen_clock, team, receiver, pool, monkeypatch,
                                                         django_capture_on_commit_callbacks):
    from apps.hooks import events

    webhook_create(actor=team.owner, project=team.project, url=receiver.url(), events=["queued", "released"])
    pool_drain()

    def broken(*args, **kwargs):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")  # a database error inside the savepoint: the transaction is aborted

    monkeypatch.setattr(events, "_record", broken)
    with django_capture_on_commit_callbacks(execute=True):
        job = queued_job(team.member, project="ml-team")
        job = job_cancel(job=job, by=team.member)
    assert Job.objects.get(pk=job.pk).outcome == "cancelled"
    assert receiver.seen == [] and not WebhookDelivery.objects.exists()
