"""Folded reports and report batches (protocol v2) through the agent's HTTP calls.

A folded sequence (``running`` without ``accepted``; ``finished`` carrying ``exited``) must leave
the same timeline, outcome and bill as the four reports it stands for; a batch applies each
report once, in seq order per attempt, and answers each on its own.
"""
import time
from datetime import timedelta

import pytest

from apps.agent_api import reports
from apps.agent_api.models import AgentReport
from apps.jobs.models import Job
from apps.jobs.services.recovery import jobs_reconcile_heartbeat
from apps.jobs.services.submit import job_submit
from apps.metering.models import Lease

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


def submit(owner, gpus=1, limit="10m"):
    # No declared output: what an agent folds ``exited`` into ``finished`` for (nothing to pack).
    return job_submit(owner=owner, document=spec(compute={"gpus": gpus, "time_limit": limit, "gpu_model": ["H100"]},
                                                 output={"paths": []}))


def batch(agent, *items):
    resp = agent.post("/api/v1/agent/reports/", {"reports": list(items)}, format="json")
    assert resp.status_code == 200, resp.json()
    return resp.json()["results"]


def item(job, seq, type_, **extra):
    return {"job_id": job.pk, "attempt": 1, "seq": seq, "type": type_, **extra}


def _story(job):
    """What a job's run leaves, relative to when it was rented."""
    job = Job.objects.get(pk=job.pk)
    lease = Lease.objects.get(job=job)
    t0 = job.rented_at
    return {
        "events": [(e.from_state, e.to_state, e.detail, e.at - t0) for e in job.events.order_by("seq")
                   if e.from_state],  # from the rent on (the submit happened at the real time)
        "job": (job.state, job.outcome, job.exit_code, job.end_reason, job.status_message,
                job.run_started_at - t0, job.run_ended_at - t0, job.released_at - t0),
        "lease": (lease.accepted_at - t0, lease.run_ended_at - t0, lease.released_at - t0, lease.billed_seconds,
                  lease.cost, lease.end_reason, lease.charged, lease.staging_seconds),
    }


@pytest.mark.parametrize(("exit_code", "reason"), [(0, "exit"), (3, "exit"), (None, "time_limit")])
def test_folded_reports_leave_the_same_timeline_and_bill_as_the_four(frozen_clock, owner, agent, exit_code,
                                                                     reason):
    limit = "1m"
    four, two = submit(owner, limit=limit), submit(owner, limit=limit)  # both rented at once
    t0 = Job.objects.get(pk=four.pk).rented_at
    assert Job.objects.get(pk=two.pk).rented_at == t0 == frozen_clock.now()
    end = timedelta(seconds=75.5 if reason == "time_limit" else 41.25)
    exited = {"exit_code": exit_code, "reason": reason}

    frozen_clock.set(t0 + timedelta(seconds=2))
    batch(agent, item(four, 1, "accepted"))
    frozen_clock.set(t0 + timedelta(seconds=3))
    batch(agent, item(four, 2, "running", pid=9), item(two, 1, "running", pid=9))  # two: accepted folded in
    frozen_clock.set(t0 + end)
    batch(agent, item(four, 3, "exited", **exited), item(four, 4, "finished"),
          item(two, 2, "finished", exited=exited))
    # the accept of "four" came a second earlier: everything else is the same
    a, b = _story(four), _story(two)
    assert a["lease"][0] == timedelta(seconds=2) and b["lease"][0] == timedelta(seconds=3)
    assert a["events"] == b["events"] and a["job"] == b["job"] and a["lease"][1:] == b["lease"][1:]
    assert [e[1] for e in b["events"]] == ["rented", "running", "output", "released"]
    outcome = {0: "succeeded", 3: "failed", None: "timed_out"}[exit_code]
    assert b["job"][:3] == ("released", outcome, exit_code)
    if reason == "time_limit":
        assert b["lease"][3] == 60  # billed exactly the limit


def test_a_folded_running_takes_the_assignment_off_the_work_answer(owner, agent):
    job = submit(owner)
    assert [a["job_id"] for a in agent.get("/api/v1/agent/work/?wait=0").json()["assignments"]] == [job.pk]
    resp = agent.post(f"/api/v1/agent/jobs/{job.pk}/report/", {"attempt": 1, "seq": 1, "type": "running"},
                      format="json")  # the single-report call still works, folded or not
    assert resp.json() == {"duplicate": False}
    assert agent.get("/api/v1/agent/work/?wait=0").json()["assignments"] == []
    assert Lease.objects.get(job=job).accepted_at is not None
    assert Job.objects.get(pk=job.pk).state == "running"


def test_exited_folds_only_into_finished(owner, agent):
    job = submit(owner)
    [answer] = batch(agent, item(job, 1, "running", exited={"exit_code": 0, "reason": "exit"}))
    assert answer["status"] == 400 and "exited" in answer["errors"]
    resp = agent.post(f"/api/v1/agent/jobs/{job.pk}/report/",
                      {"attempt": 1, "seq": 1, "type": "finished", "exited": {"exit_code": 0, "reason": "nope"}},
                      format="json")
    assert resp.status_code == 400 and "exited" in resp.json()


def test_a_batch_applies_each_report_once_in_seq_order(owner, agent):
    one, two = submit(owner), submit(owner)
    items = [item(one, 2, "finished", exited={"exit_code": 0, "reason": "exit"}), item(two, 1, "running"),
             item(one, 1, "running")]  # out of order for job one: applied by seq
    answers = batch(agent, *items)
    assert [(a["job_id"], a["seq"], a["status"], a["duplicate"]) for a in answers] == [
        (one.pk, 2, 200, False), (two.pk, 1, 200, False), (one.pk, 1, 200, False)]
    assert [e.to_state for e in Job.objects.get(pk=one.pk).events.order_by("seq")] == [
        "queued", "rented", "running", "output", "released"]
    again = batch(agent, *items)  # the answer was lost: the agent sends the same batch again
    # job one is released (its attempt is over on this node, as on the single call); two's is a repeat
    assert [(a["status"], a.get("duplicate")) for a in again] == [(409, None), (200, True), (409, None)]
    assert AgentReport.objects.filter(job__in=[one, two]).count() == 3
    assert Job.objects.get(pk=one.pk).events.count() == 5


def test_a_batch_that_partly_fails_loses_and_doubles_nothing(frozen_clock, owner, agent, monkeypatch):
    one, two, three = submit(owner), submit(owner), submit(owner)
    stranger = submit(owner)  # the fourth GPU of node-a; then the server moves on to attempt 2:
    batch(agent, item(stranger, 1, "accepted"))
    frozen_clock.advance(1)
    node = Lease.objects.get(job=stranger).node  # its agent restarted and no longer lists it
    assert jobs_reconcile_heartbeat(node=node, running=[], min_age_s=0) == 1
    assert Job.objects.get(pk=stranger.pk).attempt == 2
    real = reports._HANDLERS["running"]
    calls = {"n": 0}

    def flaky(job, lease, report, now):
        if job.pk == two.pk and calls["n"] == 0:
            calls["n"] += 1
            raise RuntimeError("database hiccup")
        real(job, lease, report, now)

    monkeypatch.setitem(reports._HANDLERS, "running", flaky)
    items = [item(one, 1, "running"), item(two, 1, "running"), item(two, 2, "finished", exited={
        "exit_code": 0, "reason": "exit"}), item(three, 1, "running", pid="x"), {**item(stranger, 2, "running")},
        {"job_id": 999999, "attempt": 1, "seq": 1, "type": "running"}, item(three, 2, "running")]
    answers = batch(agent, *items)
    assert [a["status"] for a in answers] == [200, 500, 503, 400, 409, 404, 200]
    assert Job.objects.get(pk=one.pk).state == "running" and Job.objects.get(pk=three.pk).state == "running"
    assert Job.objects.get(pk=two.pk).state == "rented"  # its failed report left nothing behind
    assert not AgentReport.objects.filter(job=two).exists()
    answers = batch(agent, *items[:3])  # the agent sends what was not applied again (and more)
    assert [(a["status"], a["duplicate"]) for a in answers] == [(200, True), (200, False), (200, False)]
    assert Job.objects.get(pk=two.pk).outcome == "succeeded"
    assert [e.to_state for e in Job.objects.get(pk=two.pk).events.order_by("seq")] == [
        "queued", "rented", "running", "output", "released"]


def test_a_bad_batch_is_refused_naming_reports(agent):
    for body in ({}, {"reports": []}, {"reports": "x"}, {"reports": [{"job_id": 1}] * 101}):
        resp = agent.post("/api/v1/agent/reports/", body, format="json")
        assert resp.status_code == 400 and "reports" in resp.json()


def test_the_long_poll_waits_on_assignments_the_agent_already_holds(owner, agent):
    job = submit(owner)
    started = time.monotonic()
    work = agent.get(f"/api/v1/agent/work/?wait=1&have={job.pk}.1").json()
    assert time.monotonic() - started >= 0.9  # not answered at once for what it holds...
    assert [a["job_id"] for a in work["assignments"]] == [job.pk]  # ...but still listed
    started = time.monotonic()
    assert agent.get(f"/api/v1/agent/work/?wait=1&have={job.pk}.2").json()["assignments"]
    assert time.monotonic() - started < 0.9  # another attempt is new work
    resp = agent.get("/api/v1/agent/work/?wait=0&have=12;1")
    assert resp.status_code == 400 and "have" in resp.json()["detail"]


def test_a_release_places_the_next_job_and_its_node_hears_at_once(owner, agent):
    first, second = submit(owner, gpus=4), submit(owner, gpus=4)
    assert Job.objects.get(pk=second.pk).state == "queued"
    batch(agent, item(first, 1, "running"), item(first, 2, "finished", exited={"exit_code": 0, "reason": "exit"}))
    assert Job.objects.get(pk=second.pk).state == "rented"  # in the cycle the release asked for
    work = agent.get(f"/api/v1/agent/work/?wait=0&have={first.pk}.1").json()
    assert [a["job_id"] for a in work["assignments"]] == [second.pk]
