"""The live parts of the job pages, rendered the same way for a page load and for a push.

The job page and "My jobs" are cut into fragments, each one element with a
stable ``id`` and a ``data-version``. A page load renders them inside the
page; the WebSocket consumers send the same templates on connect (the
snapshot) and :mod:`apps.live.push` sends them after every committed change.
``static/js/live.js`` swaps a pushed fragment in only when its version is not
older than the one shown (docs/live.md).

Versions are lists of integers compared left to right, written
space-separated: ``[event_seq, stamp_ms]`` for a job's parts (``stamp_ms``,
the server's clock in milliseconds taken *before* the read, orders two
renders of the same event, e.g. staging progress), ``[event_seq, log_size]``
for the log.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.template.loader import render_to_string
from django.utils import timezone

from apps.artifacts.files import addressable
from apps.artifacts.services import bundles_latest
from apps.core import clock
from apps.core.choices import JobKind, JobState, Outcome
from apps.core.units import format_duration
from apps.jobs.arrays import array_counts
from apps.jobs.dependencies import dependents_of
from apps.jobs.logquery import LogQuery
from apps.jobs.models import Job, JobArray
from apps.jobs.prestage import staging_progress
from apps.jobs.quotes import model_quotes
from apps.jobs.retention import job_expires_at
from apps.jobs.selectors import end_detail
from apps.jobs.services.logs import LogLine, LogPage, LogPiece, lines_of, log_pieces
from apps.jobs.services.outputs import unmatched_where
from apps.metering.display import rate_text
from apps.metering.receipts import job_receipt
from apps.metering.selectors import arrays_money, job_money
from apps.projects.services import ProjectError, submit_project
from apps.web.jobs.outputs import file_rows

LOG_TAIL_BYTES = 64 * 1024

# Element ids shared by the templates, the consumers and static/js/live.js.
STATUS_ID = "job-{pk}-status"
FACTS_ID = "job-{pk}-facts"
LEASES_ID = "job-{pk}-leases"
LOG_ID = "job-{pk}-log"
BUNDLE_ID = "job-{pk}-bundle"
ROW_ID = "job-row-{pk}"


@dataclass(frozen=True)
class StartQuote:
    """One row of the New job page's "When it would start": a GPU model, its likely start and
    "no later than" as text ("now", "14:10", "Dec 8, 09:00", "not in this pool"), its worst case."""

    gpu_model: str
    likely: str
    latest: str
    worst_case: str | None


def _when(at: str | None, now: datetime, missing: str = "–") -> str:
    if at is None:
        return missing
    moment = datetime.fromisoformat(at)
    if (moment - now).total_seconds() < 60:
        return "now"
    local = timezone.localtime(moment)
    same_day = local.date() == timezone.localtime(now).date()
    return local.strftime("%H:%M" if same_day else "%b %-d, %H:%M")


def _quoted_project_id(user: Any, name: str | None) -> int | None:
    """The id of the project ``name`` that ``user`` may submit to, else None (their personal project:
    the form's picker offers only projects they may submit to, so another name is a stale page)."""
    if not name or name.startswith("~"):
        return None
    try:
        return submit_project(user, name).pk
    except ProjectError:
        return None


def estimate_context(user: Any, estimate: Any, project: str | None = None) -> dict[str, Any]:
    """What ``jobs/_estimate.html`` shows besides the prices: the price estimate and, for each
    GPU model it prices, when the job would start if sent now in ``project`` (the form's picker;
    None: the personal project) (:func:`apps.jobs.quotes.model_quotes`, CPUs, memory and image of
    the form not counted), while no more than ``E31_QUOTE_FORM_MAX_QUEUED`` jobs are queued (the
    panel asks as the user types)."""
    now = clock.now()
    quotes = []
    if (estimate is not None and estimate.rows and estimate.request is not None
            and Job.objects.filter(state=JobState.QUEUED).count() <= settings.E31_QUOTE_FORM_MAX_QUEUED):
        quotes = [StartQuote(q["gpu_model"], _when(q["estimated_start_at"], now, "cannot start here"),
                             _when(q["latest_start_at"], now),
                             q["worst_case"])
                  for q in model_quotes(owner=user, request=estimate.request, by_model=estimate.rows,
                                        project_id=_quoted_project_id(user, project), now=now)]
    return {"estimate": estimate, "quotes": quotes}


def stamp_ms() -> int:
    """The server's clock in whole milliseconds (the tie-break part of a version)."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Step:
    """One of the five steps on the job page: its name, when it happened, and where the job is.

    ``status`` is "done", "current", "todo", "skipped" (a released job never got there) or
    "ended" (the Released step of a job that did not succeed); ``icon`` names the mark drawn
    (templates/includes/icon.html): a check, the current dot, or the outcome's own icon.
    """

    label: str
    at: datetime | None
    status: str
    icon: str = ""


# (label, the job's time stamp, the state that step is current in)
STEP_FIELDS = (
    ("Submitted", "submitted_at", JobState.QUEUED),
    ("Rented", "rented_at", JobState.RENTED),
    ("Run started", "run_started_at", JobState.RUNNING),
    ("Run ended", "run_ended_at", JobState.OUTPUT),
    ("Released", "released_at", JobState.RELEASED),
)


def _step_at(job: Job, field: str) -> datetime | None:
    """When the job passed a step; a run that never started never ended (staging failed)."""
    if field == "run_ended_at" and not job.run_started_at:
        return None
    return getattr(job, field)


def job_steps(job: Job) -> list[Step]:
    """The five steps of SPEC §1 with their times and which one the job is in.

    A released job that did not succeed ends on its outcome (failed, timed out, cancelled,
    node lost) instead of a green check, so no failure reads as a success.
    """
    released = job.state == JobState.RELEASED
    steps = []
    for label, field, state in STEP_FIELDS:
        at = _step_at(job, field)
        if job.state == state and not released:
            steps.append(Step(label, at, "current", "dot"))
        elif state == JobState.RELEASED and released and job.outcome != Outcome.SUCCEEDED:
            steps.append(Step(f"{label} · {job.get_outcome_display()}", at, "ended", job.outcome or "failed"))
        elif at:
            steps.append(Step(label, at, "done", "check"))
        else:
            steps.append(Step(label, at, "skipped" if released else "todo"))
    return steps


def log_tail(job: Job) -> tuple[list[LogLine], bool]:
    """The last ~64 KB of the current attempt's log as lines (each with its stream and time),
    and whether earlier bytes were cut."""
    offset = max(0, job.log_size - LOG_TAIL_BYTES)
    pieces = []
    for piece in log_pieces(job, job.attempt, 0, start=offset, end=job.log_size):
        cut = max(0, offset - piece.offset)
        pieces.append(LogPiece(piece.offset + cut, piece.data[cut:job.log_size - piece.offset],
                               piece.stream, piece.at))
    if offset and pieces:  # start at a whole line
        first = pieces[0]
        nl = first.data.find(b"\n")
        pieces[0] = LogPiece(first.offset + nl + 1, first.data[nl + 1:], first.stream, first.at)
    return [line for line in lines_of(pieces) if line.text or line.newline], offset > 0


def log_expired_at(job: Job, tail: str) -> datetime | None:
    """When the storage sweep deleted the job's log (its expiry, :func:`apps.jobs.retention.job_expires_at`),
    or None while it is kept or when the log was empty anyway."""
    expires = job_expires_at(job)
    if tail or not job.log_size or expires is None or expires > clock.now():
        return None
    return expires


def job_page_context(job: Job, *, stamp: int | None = None) -> dict[str, Any]:
    """Everything the job page's fragments show, read now.

    Args:
        job: the job, freshly read (its ``event_seq`` is the version).
        stamp: the version's tie-break (ms); taken now when not given. Take
            it *before* reading ``job`` so an older read never wins.
    """
    stamp = stamp_ms() if stamp is None else stamp
    leases = list(job.leases.select_related("node").order_by("attempt", "node_rank"))
    for lease in leases:
        lease.rate = rate_text(lease.rate_per_gpu_hour)
    tail, tail_cut = log_tail(job)
    bundles = bundles_latest(job)
    for bundle in bundles:
        bundle.rows = file_rows(job.pk, bundle)
        bundle.one_by_one = addressable(bundle)
    return {
        "other_ranks": range(1, job.nodes),
        "job": job, "events": job.events.all(), "leases": leases, "staging": staging_progress(job),
        "money": job_money(leases, clock.now()), "receipt": job_receipt(job), "steps": job_steps(job),
        "end_detail": end_detail(job), "outputs_unmatched": unmatched_where(job),
        "time_limit": format_duration(job.time_limit_s), "dependents": dependents_of(job),
        "log_tail": tail, "log_cut": tail_cut, "bundles": bundles, "log_expired_at": log_expired_at(job, tail),
        "version": f"{job.event_seq} {stamp}", "log_version": f"{job.event_seq} {job.log_size}",
    }


# The job page's fragments, in page order; the log goes only in snapshots
# (pushes send the new bytes as chunks, see render_log_chunk).
JOB_FRAGMENTS = ("jobs/_status.html", "jobs/_facts.html", "jobs/_leases.html", "jobs/_bundle.html",
                 "jobs/_receipt_live.html")


def render_job_fragments(job: Job, *, with_log: bool, stamp: int | None = None) -> str:
    """The job page's live fragments as one HTML string (each a top-level element with its id)."""
    context = job_page_context(job, stamp=stamp)
    names = JOB_FRAGMENTS + (("jobs/_log.html",) if with_log else ())
    return "".join(render_to_string(name, context) for name in names)


def render_log_chunk(job_id: int, *, attempt: int, offset: int, data: bytes, version: int,
                     stream: str = "combined", at: str | None = None) -> str:
    """New log bytes as an element that ``live.js`` appends to the tail shown.

    ``offset`` is where the bytes start in the attempt's log; the client
    appends them only if it shows exactly ``offset`` bytes, asks for a
    snapshot if it shows fewer (it missed a chunk) and drops them if it shows
    more (a duplicate).
    """
    return render_to_string("jobs/_log_chunk.html", {
        "pk": job_id, "attempt": attempt, "offset": offset, "end": offset + len(data),
        "text": data.decode("utf-8", errors="replace"), "version": version,
        "stream": stream, "at": _parse_at(at),
    })


def _parse_at(at: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(at) if at else None
    except ValueError:
        return None


def run_duration(job: Job, now: datetime) -> str:
    """How long the job's command ran, as ``1h30m`` (:func:`apps.core.units.format_duration`):
    from ``run_started_at`` to ``run_ended_at`` once ended, to ``now`` while it runs, "–" when
    the run never started (queued, rented and staging, or released before a run)."""
    if job.run_started_at is None:
        return "–"
    end = job.run_ended_at or (job.released_at if job.state == JobState.RELEASED else now)
    return format_duration(max(0, int((end - job.run_started_at).total_seconds())))


def gpus_text(job: Job) -> tuple[int, str]:
    """The job's GPUs in all, and ``"2×4"`` (nodes × GPUs per node) for a multi-node job, else ""."""
    return job.gpus_total, (f"{job.nodes}×{job.gpus_per_node}" if job.nodes > 1 else "")


def list_row_context(job: Job, *, stamp: int | None = None) -> dict[str, Any]:
    """What one row of "My jobs" shows; ``job.money`` (from its leases), ``job.duration``
    (:func:`run_duration`), ``job.gpus_split`` (:func:`gpus_text`) and, for a shared project's job,
    ``job.shared_in`` and ``job.shared_by`` (its project and owner) are set on ``job``, so a page
    that includes ``jobs/_row.html`` for each job of a page shows the same as a push."""
    stamp = stamp_ms() if stamp is None else stamp
    now = clock.now()
    job.money = job_money(job.leases.all(), now)
    job.duration = run_duration(job, now)
    job.gpus_split = gpus_text(job)[1]
    # a shared project's job says whose it is (the same for every member who sees the row)
    shared = job.project_id is not None and not job.project.is_personal
    job.shared_in, job.shared_by = (job.project.name, job.owner.get_username()) if shared else ("", "")
    return {"job": job, "version": f"{job.event_seq} {stamp}", "selectable": True}


def render_row(job: Job, *, stamp: int | None = None) -> str:
    """One row of "My jobs" (``<tr id="job-row-N">``); for a task of an array, its array's row
    (``<tr id="array-row-N">``, see :func:`render_array_row`), since "My jobs" groups arrays."""
    if job.array_id is not None:
        return _array_row_once(job.array_id, stamp=stamp)
    return render_to_string("jobs/_row.html", list_row_context(job, stamp=stamp))


# --- job arrays (apps.jobs.arrays) -------------------------------------------------
ARRAY_ROW_ID = "array-row-{pk}"
_array_rows_rendered: dict[int, int] = {}  # array id -> stamp of its last row pushed by render_row


def _array_row_once(array_id: int, *, stamp: int | None) -> str:
    """The array's row, or "" when this process rendered it already with this ``stamp``: one
    push of many tasks (a scheduling cycle's) carries each array's row once, not once per task."""
    stamp = stamp_ms() if stamp is None else stamp
    if _array_rows_rendered.get(array_id) == stamp:
        return ""
    if len(_array_rows_rendered) > 1000:
        _array_rows_rendered.clear()
    _array_rows_rendered[array_id] = stamp
    array = JobArray.objects.filter(pk=array_id).first()
    return render_array_row(array, stamp=stamp) if array else ""


def array_row_context(array: Any, *, counts: Any = None, stamp: int | None = None) -> dict[str, Any]:
    """What the row of an array in "My jobs" shows: its counts by state (one aggregate query
    unless ``counts``, an :class:`apps.jobs.arrays.ArrayCounts`, is given) and what its tasks have
    cost so far (``money``, :class:`apps.metering.selectors.ArrayMoney`)."""
    stamp = stamp_ms() if stamp is None else stamp
    if counts is None:
        counts = array_counts([array.pk])[array.pk]
    compute = (array.spec or {}).get("compute") or {}
    return {"array": array, "counts": counts, "gpus": compute.get("gpus", 1) * compute.get("nodes", 1),
            "money": arrays_money([array.pk])[array.pk],
            "kind": JobKind((array.spec.get("work") or {}).get("kind") or "other").label,
            "version": f"0 {stamp}"}


def render_array_row(array: Any, *, counts: Any = None, stamp: int | None = None) -> str:
    """One array's row of "My jobs" (``<tr id="array-row-N">``), as a page load shows it."""
    return render_to_string("jobs/_array_row.html", array_row_context(array, counts=counts, stamp=stamp))


def render_status(job: Job, *, stamp: int | None = None) -> str:
    """Only the job page's status part (state, queue place, steps): what a scheduling cycle changes."""
    stamp = stamp_ms() if stamp is None else stamp
    return render_to_string("jobs/_status.html", {"job": job, "steps": job_steps(job),
                                                  "version": f"{job.event_seq} {stamp}"})


def log_page_links(query: LogQuery, page: LogPage) -> dict[str, str]:
    """Query strings of the log page's "earlier", "later" and "last" links (empty at an end)."""
    base = {"attempt": query.attempt, "rank": query.rank, "stream": query.stream, "q": query.q}
    base = {k: v for k, v in base.items() if v not in ("", None)}
    end = page.offset + len(page.lines)
    earlier = urlencode({**base, "offset": max(0, page.offset - query.limit)}) if page.offset > 0 else ""
    later = urlencode({**base, "offset": end}) if end < page.total else ""
    return {"earlier": earlier, "later": later, "last": urlencode(base) if later else "",
            "first": urlencode({**base, "offset": 0}) if earlier else ""}
