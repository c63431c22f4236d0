"""Live job pages over WebSockets: one job's page, and "My jobs" (issue 5; issue 10, item 2).

Routed in ``e31site/asgi.py``: ``/ws/jobs/<id>/`` and ``/ws/jobs/``. Every
read goes through :func:`apps.jobs.selectors.jobs_of`, so a user only ever
joins the groups of their own jobs, and only their own jobs are rendered.
"""
from __future__ import annotations

from apps.jobs.arrays import jobs_grouped_of
from apps.jobs.selectors import jobs_of
from apps.live.consumers.base import LiveConsumer
from apps.live.push import job_group, project_group, shared_project_ids, user_group
from apps.web.jobs.fragments import render_job_fragments, render_row, stamp_ms

LIST_SNAPSHOT_ROWS = 50  # the first page of "My jobs" (apps.web.jobs.views.JOBS_PER_PAGE)


class JobConsumer(LiveConsumer):
    """``/ws/jobs/<id>/``: the owner's job page. Anyone else's id is refused with no data."""

    def groups_for(self, user, pk: str) -> list[str] | None:
        job = jobs_of(user).filter(pk=int(pk)).values("owner_id", "project_id", "project__personal_of_id").first()
        if job is None:
            return None
        # The user group brings every change of the user's jobs (this one's included); a teammate's
        # job's changes come through its project's group.
        groups = [job_group(int(pk)), user_group(user.pk)]
        if job["owner_id"] != user.pk and job["project_id"] and job["project__personal_of_id"] is None:
            groups.append(project_group(job["project_id"]))
        return groups

    def snapshot(self, user, pk: str) -> str:
        stamp = stamp_ms()
        job = jobs_of(user).filter(pk=int(pk)).first()
        return render_job_fragments(job, with_log=True, stamp=stamp) if job else ""

    def render_change(self, user, event: dict, pk: str) -> str:
        jobs = event.get("jobs")
        if event.get("page") != "user" or (jobs is not None and int(pk) not in jobs):
            return ""  # another job of the user's changed
        stamp = stamp_ms()
        job = jobs_of(user).filter(pk=int(pk)).first()
        if job is None:
            return ""
        return render_job_fragments(job, with_log=False, stamp=stamp)


class JobListConsumer(LiveConsumer):
    """``/ws/jobs/``: every row of the user's "My jobs"."""

    def groups_for(self, user) -> list[str] | None:
        return [user_group(user.pk), *(project_group(p) for p in shared_project_ids(user.pk))]

    def snapshot(self, user) -> str:
        stamp = stamp_ms()
        # An array is one row (its task 0 stands for it: render_row renders the array's row).
        jobs = jobs_grouped_of(user).select_related("project", "owner").prefetch_related("leases")[:LIST_SNAPSHOT_ROWS]
        return "".join(render_row(job, stamp=stamp) for job in jobs)

    def render_change(self, user, event: dict) -> str:
        """The rows of the jobs named; for "any job" (None), the rows of the first page."""
        if event.get("page") != "user":
            return ""
        stamp = stamp_ms()
        ids = event.get("jobs")
        listed = jobs_of(user).select_related("project", "owner").prefetch_related("leases")
        jobs = list(listed[:LIST_SNAPSHOT_ROWS] if ids is None else listed.filter(pk__in=ids))
        return "".join(render_row(job, stamp=stamp) for job in jobs)
