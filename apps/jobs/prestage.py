"""Pre-staging: a queued job's inputs fetched into its planned node's cache, meter off.

The scheduling cycle plans every queued job onto named nodes and picks, bounded, the
ones to pre-stage (the reserved job(s), and each job whose likely start is within its
staging time: :func:`apps.scheduling.core.prestage.prestage_targets`, issue 14 item 5);
:func:`prestage_plan` keeps one :class:`JobPrestage` row per (such job with inputs,
planned node) and drops the rest (the plan moved, the job started or left). The node's agent finds the rows in its
work answer (:func:`prestage_offers`), fetches the inputs into its cache
and reports progress (:func:`prestage_report`). When the job is rented
there, inputs already cached are linked in at once; only the rest is
staged on the meter (``Lease.staging_seconds``).

Also here: the staging and pre-staging progress the job page and the API
show (:func:`staging_progress`).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from e31_protocol.redact import redact_text

from apps.artifacts.models import upload_jobs_q
from apps.core import clock
from apps.core.choices import JobState

from . import signals
from .inputs import input_scope
from .models import Job, JobPrestage

MESSAGE_MAX = 300


def prestage_plan(reservations: Iterable[tuple[int, list[int]]], *, now: datetime) -> set[int]:
    """Make the pre-stage rows equal to the plan: ``[(job_id, [node_id by rank])]`` of the jobs to pre-stage.

    Only jobs that are still queued and have something to fetch get rows: inputs (``spec.data``) or
    an image pulled without a login (:func:`prepull_image`). Writes only what changed; runs inside
    the cycle's transaction.

    Returns:
        The ids of nodes given a new row (to be woken so their agent hears at once).
    """
    wanted: dict[tuple[int, int], int] = {}
    job_ids = set()
    for job_id, node_ids in reservations:
        job_ids.add(job_id)
        for rank, node_id in enumerate(node_ids):
            wanted[(job_id, node_id)] = rank
    # E31_PRESTAGE_PER_CYCLE jobs at most: their specs are read here rather than with a JSON lookup SQLite lacks
    with_data = {pk for pk, spec in Job.objects.filter(pk__in=job_ids, state=JobState.QUEUED)
                 .values_list("pk", "spec") if spec.get("data") or prepull_image(spec)} if job_ids else set()
    wanted = {k: r for k, r in wanted.items() if k[0] in with_data}
    existing = {(p.job_id, p.node_id): p for p in JobPrestage.objects.all()}
    gone = [p.pk for k, p in existing.items() if k not in wanted]
    if gone:
        JobPrestage.objects.filter(pk__in=gone).delete()
    new = [JobPrestage(job_id=j, node_id=n, node_rank=r, planned_at=now)
           for (j, n), r in wanted.items() if (j, n) not in existing]
    if new:
        JobPrestage.objects.bulk_create(new)
    return {p.node_id for p in new}


def prepull_image(spec: dict[str, Any]) -> str | None:
    """The image of a job's spec that a planned node may pull while the job waits: ``work.image``
    when the spec names no ``work.image_credentials`` (a registry login is a secret, and a secret
    reaches only a node holding the job's attempt: such an image is pulled after the rent), else None."""
    work = spec.get("work") or {}
    image = work.get("image")
    return str(image) if image and not work.get("image_credentials") else None


def prestage_offers(node) -> list[dict[str, Any]]:
    """What ``node`` should pre-stage: ``[{"job_id", "data": [spec data items], "new": bool, "input_scope",
    "image"?}]``.

    ``new`` marks rows not yet handed out, which end a long poll at once; ``input_scope``
    (:func:`apps.jobs.inputs.input_scope`) says whose inputs they are, so the agent's cache keys
    them as the job's own staging will look them up; ``image`` (issue 23) is the job's image to
    pull anonymously (:func:`prepull_image`), when it has one.
    """
    rows = (JobPrestage.objects.filter(node=node, job__state=JobState.QUEUED)
            .select_related("job").order_by("planned_at", "job_id"))
    # An input read with the owner's credentials is not pre-staged: a secret reaches only a node
    # holding the job's attempt (issue 23), never one that merely plans to.
    offers = []
    for p in rows:
        data = [d for d in p.job.spec.get("data") or [] if not d.get("credentials")]
        offer = {"job_id": p.job_id, "data": data, "new": p.offered_at is None,
                 "input_scope": input_scope(owner_id=p.job.owner_id, data=data)}
        image = prepull_image(p.job.spec)
        if image:
            offer["image"] = image
        offers.append(offer)
    return offers


def prestage_mark_offered(node, job_ids: Iterable[int], *, now: datetime | None = None) -> None:
    """Note that ``node``'s agent was handed these pre-stages (so a poll waits again)."""
    ids = list(job_ids)
    if ids:
        JobPrestage.objects.filter(node=node, job_id__in=ids, offered_at__isnull=True).update(
            offered_at=now or clock.now())


def prestage_report(*, node, items: list[dict[str, Any]], now: datetime | None = None) -> list[int]:
    """Store ``node``'s pre-stage progress: ``[{"job_id", "state", "bytes_done", "bytes_total", "message"}]``.

    Rows that no longer exist (the plan moved, the job started) are ignored.

    Returns:
        The job ids ``node`` should still pre-stage.
    """
    now = now or clock.now()
    changed: list[int] = []
    with transaction.atomic():
        rows = {p.job_id: p for p in JobPrestage.objects.select_for_update().filter(
            node=node, job_id__in=[i["job_id"] for i in items])}
        for item in items:
            row = rows.get(item["job_id"])
            if row is None:
                continue
            row.state = item.get("state") or JobPrestage.State.FETCHING
            row.bytes_done = max(0, int(item.get("bytes_done") or 0))
            row.bytes_total = item.get("bytes_total")
            row.message = redact_text(str(item.get("message") or ""))[:MESSAGE_MAX]
            row.updated_at = now
            row.offered_at = row.offered_at or now
            row.save(update_fields=["state", "bytes_done", "bytes_total", "message", "updated_at", "offered_at"])
            changed.append(row.job_id)
        wanted = list(JobPrestage.objects.filter(node=node, job__state=JobState.QUEUED)
                      .values_list("job_id", flat=True))
        for job_id in changed:
            signals.job_changed.send(sender=Job, job_id=job_id)  # the job page's pre-stage line
    return wanted


def node_may_prestage_upload(node, upload) -> bool:
    """True when ``node`` has a pre-stage of a queued job that may use the upload
    (:func:`apps.artifacts.models.upload_jobs_q`) and names it."""
    specs = JobPrestage.objects.filter(upload_jobs_q(upload, "job__"), node=node,
                                       job__state=JobState.QUEUED).values_list("job__spec", flat=True)
    return any(item.get("source") == upload.source for spec in specs for item in spec.get("data") or [])


@dataclass(frozen=True)
class StagingProgress:
    """Progress of a job's inputs: ``phase`` is ``prestage`` (queued, meter off) or ``staging``
    (rented, meter on); sizes in bytes, ``rate_bps`` in bytes per second (None: not known),
    ``percent`` 0..100 (None without a total); ``nodes`` the node names; ``state`` of a pre-stage."""

    phase: str
    bytes_done: int
    bytes_total: int | None
    rate_bps: float | None
    nodes: tuple[str, ...]
    state: str = ""
    message: str = ""

    @property
    def percent(self) -> int | None:
        if not self.bytes_total:
            return None if self.bytes_total is None else 100
        return min(100, int(100 * self.bytes_done / self.bytes_total))

    @property
    def complete(self) -> bool:
        return self.bytes_total is not None and self.bytes_done >= self.bytes_total

    @property
    def title(self) -> str:
        """The row's heading on the job page."""
        return "Staging" if self.phase == "staging" else "Inputs"

    @property
    def verb(self) -> str:
        """What is happening, in words: "pre-staged on", "pre-staging on", ... (then the node names)."""
        if self.phase == "staging":
            return "staging"
        return {JobPrestage.State.DONE: "pre-staged on", JobPrestage.State.FAILED: "pre-staging failed on",
                JobPrestage.State.FETCHING: "pre-staging on"}.get(self.state, "to be pre-staged on")

    @property
    def node_names(self) -> str:
        return ", ".join(self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "bytes_done": self.bytes_done, "bytes_total": self.bytes_total,
                "rate_bytes_per_s": None if self.rate_bps is None else round(self.rate_bps, 1),
                "percent": self.percent, "nodes": list(self.nodes), "state": self.state, "message": self.message}


def staging_progress(job: Job) -> StagingProgress | None:
    """The job's staging progress while rented, its pre-staging while queued, else None.

    Pre-staging sums the planned nodes' rows (a gang pre-stages on every node);
    its rate is not measured (it costs nothing).
    """
    if job.state == JobState.RENTED and (job.staging_bytes_total or job.staging_bytes_done):
        return StagingProgress("staging", job.staging_bytes_done, job.staging_bytes_total, job.staging_rate_bps, ())
    if job.state != JobState.QUEUED:
        return None
    rows = list(job.prestages.select_related("node").order_by("node_rank"))
    if not rows:
        return None
    totals = [r.bytes_total for r in rows]
    total = None if any(t is None for t in totals) else sum(t for t in totals if t is not None)
    failed = next((r for r in rows if r.state == JobPrestage.State.FAILED), None)
    state = (failed.state if failed else JobPrestage.State.DONE if all(r.state == JobPrestage.State.DONE for r in rows)
             else JobPrestage.State.FETCHING if any(r.updated_at for r in rows) else JobPrestage.State.PLANNED)
    # The words of a failed node's row, else of one still fetching ("pulling image ..."), if any.
    fetching = next((r for r in rows if r.state == JobPrestage.State.FETCHING and r.message), None)
    message = failed.message if failed else fetching.message if fetching else ""
    return StagingProgress("prestage", sum(r.bytes_done for r in rows), total, None,
                           tuple(r.node.name for r in rows), state, message)
