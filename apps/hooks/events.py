"""Job events into deliveries: what the receivers of the jobs app's signals do (:mod:`.receivers`).

:func:`jobs_changed_record` runs inside the transaction that changed the jobs (the signals are sent
there) and writes one :class:`~.models.WebhookDelivery` per matching webhook; its caller asks the side
queue to send them once the transaction commits (``transaction.on_commit``), so a rolled-back change is
never announced and the core never waits on a receiver.
A job's event is named by a ``dedupe_key`` (``job:41:running:2``: the job's id, the event, the attempt),
unique per webhook, so a job whose signals repeat (every timeline event sends ``job_changed``) makes one
delivery per event however often it is told.

An array's submit tells the jobs app's signals of its task 0 only, so it is one ``queued`` delivery (task
0's, with ``array_size``), not one per task; each task's ``running`` and ``released`` are their own, except
for queued tasks cancelled with their array at once (released in bulk, with no signal of their own), which
``array_finished`` covers. The cost for the core when no webhook listens: one query per signal
(:func:`_hooked_jobs`).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, Max, OuterRef, Subquery
from django.db.models.functions import Coalesce

from apps.core import clock
from apps.core.choices import JobState
from apps.jobs.models import Job, JobArray
from apps.projects.models import Project

from .models import Event, Webhook, WebhookDelivery

_EVENT_OF_STATE = {JobState.QUEUED: Event.QUEUED, JobState.RUNNING: Event.RUNNING,
                   JobState.RELEASED: Event.RELEASED}


def _iso(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when else None


def _site(path: str) -> str:
    return settings.E31_SITE_URL.rstrip("/") + path


def _project_id_expr():
    """A job's (or an array's) project id: its own, else its owner's personal project."""
    personal = Project.objects.filter(personal_of_id=OuterRef("owner_id")).values("pk")[:1]
    return Coalesce("project_id", Subquery(personal))


def _hooked_jobs(job_ids: Iterable[int]) -> list[dict]:
    """The jobs of ``job_ids`` whose project has an active webhook, with state, attempt and project id:
    one query."""
    hooks = Webhook.objects.filter(active=True, project_id=OuterRef("hook_project"))
    return list(Job.objects.filter(pk__in=list(job_ids)).annotate(hook_project=_project_id_expr())
                .annotate(hooked=Exists(hooks)).filter(hooked=True)
                .values("pk", "state", "attempt", "array_id", "hook_project"))


def _hooks_by_project(project_ids: Iterable[int]) -> dict[int, list[Webhook]]:
    out: dict[int, list[Webhook]] = defaultdict(list)
    for hook in Webhook.objects.filter(active=True, project_id__in=set(project_ids)).select_related("project"):
        out[hook.project_id].append(hook)
    return out


def job_payload(job: Job, project: Project) -> dict:
    """The ``job`` object of a job event's body (SPEC "Webhooks"): times ISO 8601 UTC, ``url`` its page."""
    return {"id": job.pk, "name": job.name, "project": project.name, "owner": job.owner.username,
            "state": job.state, "outcome": job.outcome, "end_reason": job.end_reason or None,
            "exit_code": job.exit_code, "status_message": job.status_message, "attempt": job.attempt,
            "array": job.array_id, "array_index": job.array_index, "array_size": job.array.size if job.array else None,
            "submitted_at": _iso(job.submitted_at), "rented_at": _iso(job.rented_at),
            "run_started_at": _iso(job.run_started_at), "run_ended_at": _iso(job.run_ended_at),
            "released_at": _iso(job.released_at), "url": _site(job.get_absolute_url())}


def _envelope(delivery: WebhookDelivery, project: Project, **body: object) -> dict:
    return {"id": str(delivery.delivery_id), "event": delivery.event, "created_at": _iso(delivery.created_at),
            "project": project.name, **body}


def _record(rows: list[tuple[Webhook, str, str, dict]], now: datetime) -> list[int]:
    """Write the deliveries ``(webhook, event, dedupe_key, body)`` that do not exist yet; returns the ids
    written (their sending is the caller's to ask for, after the commit)."""
    if not rows:
        return []
    keys = {r[2] for r in rows}
    seen = set(WebhookDelivery.objects.filter(webhook_id__in={r[0].pk for r in rows}, dedupe_key__in=keys)
               .values_list("webhook_id", "dedupe_key"))
    fresh = []
    for hook, event, key, body in rows:
        if (hook.pk, key) in seen:
            continue
        d = WebhookDelivery(webhook=hook, event=event, dedupe_key=key, created_at=now, next_try_at=now)
        d.payload = _envelope(d, hook.project, **body)
        fresh.append(d)
    if not fresh:
        return []
    # ignore_conflicts: a concurrent transaction telling the same event (two signals at once) wrote it first.
    WebhookDelivery.objects.bulk_create(fresh, ignore_conflicts=True)
    return list(WebhookDelivery.objects.filter(delivery_id__in=[d.delivery_id for d in fresh])
                .values_list("pk", flat=True))


def jobs_changed_record(job_ids: Iterable[int], *, now: datetime | None = None) -> tuple[list[int], list[int]]:
    """Record the events of ``job_ids`` as they stand now (queued, running or released, by state) for
    the webhooks that want them; call inside the transaction that changed them.

    Returns:
        ``(delivery_ids, array_ids)``: the deliveries written, and the arrays of released tasks whose
        project wants ``array_finished``, to be checked after the commit (:func:`array_finished_record`).

    Raises:
        DatabaseError: as the database raises it; the writes are rolled back to their savepoint, so the
            caller's transaction goes on.
    """
    jobs = _hooked_jobs(job_ids)
    if not jobs:
        return [], []
    # A savepoint: should writing the deliveries fail, it is rolled back alone and the change that sent
    # the signal (a release, an agent's report) goes on (the receiver logs the error).
    with transaction.atomic():
        return _hooked_record(jobs, now or clock.now())


def _hooked_record(jobs: list[dict], now: datetime) -> tuple[list[int], list[int]]:
    hooks = _hooks_by_project(j["hook_project"] for j in jobs)
    wanted = [j for j in jobs if _EVENT_OF_STATE.get(j["state"]) is not None
              and any(_EVENT_OF_STATE[j["state"]] in h.events for h in hooks[j["hook_project"]])]
    arrays = {j["array_id"] for j in jobs if j["state"] == JobState.RELEASED and j["array_id"] is not None
              and any(Event.ARRAY_FINISHED in h.events for h in hooks[j["hook_project"]])}
    if not wanted:
        return [], sorted(arrays)
    full = {j.pk: j for j in Job.objects.filter(pk__in=[j["pk"] for j in wanted]).select_related("owner", "array")}
    projects = {p.pk: p for p in Project.objects.filter(pk__in={j["hook_project"] for j in wanted})}
    rows = []
    for j in wanted:
        event = _EVENT_OF_STATE[j["state"]]
        key = f"job:{j['pk']}:{event}" + ("" if event == Event.RELEASED else f":{j['attempt']}")
        body = {"job": job_payload(full[j["pk"]], projects[j["hook_project"]])}
        rows += [(h, event, key, body) for h in hooks[j["hook_project"]] if event in h.events]
    return _record(rows, now), sorted(arrays)


def array_payload(array: JobArray, project: Project) -> dict:
    """The ``array`` object of an ``array_finished`` body: tasks counted by outcome, ``finished_at``
    the last task's release."""
    tasks = Job.objects.filter(array=array)
    outcomes = dict(tasks.values("outcome").annotate(n=Count("id")).order_by().values_list("outcome", "n"))
    finished = tasks.aggregate(at=Max("released_at"))["at"]
    return {"id": array.pk, "name": array.name, "project": project.name, "owner": array.owner.username,
            "size": array.size, "outcomes": {str(k): v for k, v in outcomes.items()},
            "submitted_at": _iso(array.submitted_at), "finished_at": _iso(finished),
            "url": _site(array.get_absolute_url())}


def array_finished_record(array_id: int, *, now: datetime | None = None) -> list[int]:
    """Record ``array_finished`` for array ``array_id`` when every task is released; returns the ids of
    the deliveries written (none when a task is still active or it was recorded already).

    Called by the side queue after the commit of a task's release, never inside it: of tasks released at
    once in several transactions, the check after the last commit sees them all (a check inside each
    would see none of the others), and the ``dedupe_key`` keeps it to one delivery per webhook.
    """
    array = (JobArray.objects.filter(pk=array_id).annotate(hook_project=_project_id_expr())
             .select_related("owner").first())
    if array is None or array.hook_project is None:
        return []
    if Job.objects.filter(array_id=array_id).exclude(state=JobState.RELEASED).exists():
        return []
    hooks = [h for h in _hooks_by_project([array.hook_project])[array.hook_project]
             if Event.ARRAY_FINISHED in h.events]
    if not hooks:
        return []
    body = {"array": array_payload(array, hooks[0].project)}
    with transaction.atomic():
        return _record([(h, Event.ARRAY_FINISHED, f"array:{array_id}:finished", body) for h in hooks],
                       now or clock.now())
