"""Browser pages of jobs (SPEC §7): my jobs, new job, the job page, its log, bundle and cancel.

Views parse the request, call a service or selector and render; every read of
a job goes through :func:`apps.jobs.selectors.jobs_of`, so another user's job
answers 404. Every page works by plain reload, without JavaScript.
"""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseGone, QueryDict
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from e31_protocol.redact import redact_value

from apps.artifacts.files import NotAddressable, OutputFile, bundle_file
from apps.artifacts.http import bundle_response, output_file_response
from apps.artifacts.retention import OutputsExpired, bundle_check_kept
from apps.artifacts.services import bundle_latest
from apps.core.choices import JobState, Outcome
from apps.jobs.arrays import ArraySubmitted, array_cancel, array_counts, array_own_or_404, jobs_grouped_of
from apps.jobs.checkpoints import checkpoint_versions
from apps.jobs.examples import example_files, example_names
from apps.jobs.logquery import LogQueryError, log_query_parse
from apps.jobs.models import Job
from apps.jobs.rerun import job_rerun
from apps.jobs.selectors import job_filter_parse, job_own_or_404, jobs_of, jobs_search, log_read
from apps.jobs.services.cancel import BulkCancelError, bulk_ids_parse, check_canceller, job_cancel, jobs_cancel_bulk
from apps.jobs.services.logs import log_lines
from apps.jobs.spec import SpecError, spec_to_yaml
from apps.metering.limits import spend_check
from apps.metering.selectors import price_estimate, rate_table
from apps.projects.access import Action, may, may_cancel
from apps.projects.services import projects_of
from apps.web.jobs.forms import JobForm, edit_job_form, new_job_form
from apps.web.jobs.fragments import (
    array_row_context,
    estimate_context,
    job_page_context,
    list_row_context,
    log_page_links,
    render_array_row,
    stamp_ms,
)
from apps.web.jobs.outputs import download_url, file_preview
from apps.web.jobs.usage import usage_card

JOBS_PER_PAGE = 50
CANCELLABLE_STATES = (JobState.QUEUED, JobState.RENTED, JobState.RUNNING, JobState.OUTPUT)


# --- pages ---------------------------------------------------------------
@login_required
@require_GET
def job_list(request: HttpRequest) -> HttpResponse:
    """My jobs (and my projects' jobs), newest first, 50 a page; ``?q=`` (a part of the name),
    ``?state=``, ``?outcome=``, ``?project=`` narrow it (:func:`apps.jobs.selectors.jobs_search`)
    and list arrays' tasks one by one."""
    flt = job_filter_parse(request.GET)
    # narrowed: every job on its own; all: an array is one row (apps.jobs.arrays)
    jobs = jobs_search(request.user, flt) if flt.active else jobs_grouped_of(request.user)
    page = Paginator(jobs.select_related("array", "project", "owner").prefetch_related("leases"),
                     JOBS_PER_PAGE).get_page(request.GET.get("page"))
    stamp = stamp_ms()
    arrays = {job.array_id for job in page if job.array_id is not None and not flt.active}
    counts = array_counts(arrays)
    for job in page:
        if job.array_id in arrays:
            job.array_row = render_array_row(job.array, counts=counts[job.array_id], stamp=stamp)
        else:
            job.version = list_row_context(job, stamp=stamp)["version"]
    return render(request, "jobs/list.html", {
        "section": "jobs", "page": page, "filter": flt, "state": flt.state, "states": JobState.choices,
        "outcomes": Outcome.choices, "filter_query": urlencode(flt.params()),
        "projects": [p.name for p, _ in projects_of(request.user)],
        # live rows that are new: any on page 1 of all jobs, or of one state; none under a search
        "new_rows": "" if page.number != 1 or flt.q or flt.outcome else (flt.state or "any"),
        "examples": example_names(),
        "has_any": page.paginator.count > 0 or jobs_of(request.user).exists(),
    })


@login_required
@require_POST
def job_cancel_bulk_view(request: HttpRequest) -> HttpResponse:
    """Cancel the jobs ticked in "My jobs" (``ids``, repeated). Without ``confirm=1`` (a browser
    without JavaScript), a page lists the caller's jobs among them and asks to confirm; with it
    (the confirm page, or htmx after ``hx-confirm``), :func:`jobs_cancel_bulk` cancels those that
    are the caller's, ignoring any other id, and says how many. Back to "My jobs" as filtered."""
    back_query = urlencode(job_filter_parse(QueryDict(request.POST.get("back", ""))).params())
    back = reverse("jobs:list") + (f"?{back_query}" if back_query else "")
    try:
        ids = bulk_ids_parse(request.POST.getlist("ids"))
    except BulkCancelError as exc:
        messages.error(request, str(exc))
        return redirect(back)
    if not ids:
        messages.info(request, "No job selected: tick the jobs to cancel first.")
        return redirect(back)
    if request.POST.get("confirm") != "1":
        chosen = list(jobs_of(request.user).filter(pk__in=ids, state__in=CANCELLABLE_STATES,
                                                   cancel_requested_at__isnull=True))
        if not chosen:
            messages.info(request, "None of the selected jobs can be cancelled: they are ending or ended already.")
            return redirect(back)
        return render(request, "jobs/cancel_bulk.html", {"section": "jobs", "jobs": chosen,
                                                         "back": back_query})
    done = jobs_cancel_bulk(owner=request.user, ids=ids)
    words = [f"{done.cancelled:,} job{pluralize(done.cancelled)} cancelled"]
    if done.stopping:
        words.append(f"{done.stopping:,} of them running: the node stops the run and packs its outputs")
    if done.already:
        words.append(f"{done.already:,} already ending or ended")
    (messages.success if done.cancelled else messages.info)(request, "; ".join(words) + ".")
    if request.headers.get("HX-Request"):
        resp = HttpResponse(status=204)
        resp["HX-Redirect"] = back
        return resp
    return redirect(back)


@login_required
@require_http_methods(["GET", "POST"])
def job_new(request: HttpRequest) -> HttpResponse:
    """The new-job form; ``?example=<name>`` starts from an example's ``job.yaml``."""
    if request.method == "POST":
        form = JobForm(request.POST, request.FILES, owner=request.user)
        if form.is_valid():
            try:
                job = form.submit()
            except SpecError as exc:
                form.add_spec_errors(exc.errors)
            else:
                if isinstance(job, ArraySubmitted):
                    messages.success(request, f"Array {job.array.pk} of {job.array.size:,} tasks submitted.")
                    return redirect(job.array)
                messages.success(request, f"Job {job.pk} submitted.")
                return redirect(job)
        form.keep_files()
    elif request.GET.get("from"):  # "Edit and run": another job of mine, its spec prefilled
        try:
            source = job_own_or_404(request.user, int(request.GET["from"]))
        except ValueError:
            raise Http404("No such job.") from None
        form, warnings = edit_job_form(owner=request.user, job=source)
        for warning in warnings:
            messages.warning(request, warning)
        messages.info(request, f"The spec of job {source.pk}, to edit and submit as a new job.")
    else:
        try:
            form = new_job_form(owner=request.user, example=request.GET.get("example") or None)
        except LookupError:
            raise Http404("No such example.") from None
    example = (form.data.get("example") if form.is_bound else form.initial.get("example")) or ""
    return render(request, "jobs/new.html", {
        "section": "new", "form": form, "rows": form.rows, "examples": example_names(),
        "example": example if example in example_names() else "",
        "example_files": example_files(example) if example in example_names() else [],
        **estimate_context(request.user, price_estimate(form.compute_document()),
                           form.data.get("project") if form.is_bound else None), "rates": rate_table(),
        "spend": spend_check(owner=request.user, worst_case=Decimal(0)),
    })


@login_required
@require_GET
def job_estimate(request: HttpRequest) -> HttpResponse:
    """The price estimate fragment for the compute part as typed (htmx asks on change)."""
    return render(request, "jobs/_estimate.html", {**estimate_context(request.user, price_estimate(request.GET.dict()),
                                                                      request.GET.get("project")),
                                                   "rates": rate_table(),
                                                   "spend": spend_check(owner=request.user, worst_case=Decimal(0))})


@login_required
@require_GET
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One job: state, steps, timeline, leases and cost, log tail, bundle, spec."""
    job = job_own_or_404(request.user, pk)
    # The live fragments are rendered once for every reader of the job; what this reader may do is
    # marked on the page around them, and the stylesheet hides the buttons they may not use.
    return render(request, "jobs/detail.html", {
        "section": "jobs", **job_page_context(job), "spec_yaml": spec_to_yaml(redact_value(job.spec)),
        "usage": usage_card(job), "checkpoints": checkpoint_versions(job),
        "may_cancel": may_cancel(request.user, job),
        "may_rerun": job.owner_id == request.user.pk or may(request.user, job.project_id, Action.SUBMIT),
    })


@login_required
@require_POST
def job_rerun_view(request: HttpRequest, pk: int) -> HttpResponse:
    """"Run again": a new job from this one's spec and files (:func:`apps.jobs.rerun.job_rerun`),
    then its page. When it cannot be submitted (an uploaded file no longer kept, a limit), back
    to this job's page with the reasons."""
    job = job_own_or_404(request.user, pk)
    try:
        new = job_rerun(job=job, by=request.user)
    except SpecError as exc:
        for messages_ in exc.errors.values():
            for message in messages_:
                messages.error(request, f"Could not run job {job.pk} again: {message}")
        return redirect(job)
    messages.success(request, f"Job {new.pk} submitted: a re-run of job {job.pk}.")
    return redirect(new)


@login_required
@require_GET
def job_log_lines(request: HttpRequest, pk: int) -> HttpResponse:
    """The whole kept log paged by lines, with stdout and stderr told apart, timestamps, a
    stream filter and a server-side search (``?q=``, literal); 500 lines a page, last page first."""
    job = job_own_or_404(request.user, pk)
    try:
        query = log_query_parse(request.GET, job, lines=True)
    except LogQueryError as exc:
        return render(request, "jobs/log.html", {"job": job, "error": exc, "attempts": range(1, job.attempt + 1)},
                      status=400)
    page = log_lines(job, query.attempt, query.rank, stream=query.stream or None, q=query.q,
                     offset=query.offset, limit=query.limit)
    return render(request, "jobs/log.html", {
        "job": job, "query": query, "page": page, **log_page_links(query, page),
        "attempts": range(1, job.attempt + 1), "ranks": range(job.nodes),
    })


@login_required
@require_GET
def job_log(request: HttpRequest, pk: int) -> HttpResponse:
    """The whole log of the current attempt (or ``?attempt=N``) on rank 0 (or ``?rank=N``) as plain text."""
    job = job_own_or_404(request.user, pk)
    try:
        attempt = int(request.GET.get("attempt", job.attempt))
        rank = int(request.GET.get("rank", 0))
    except ValueError:
        attempt = rank = -1
    if not 1 <= attempt <= job.attempt or not 0 <= rank < job.nodes:
        return HttpResponse(f"attempt must be between 1 and {job.attempt}, rank between 0 and {job.nodes - 1}\n",
                            status=400, content_type="text/plain; charset=utf-8")
    data = log_read(job, 0, limit=settings.E31_LOG_MAX_BYTES + 4096, attempt=attempt, rank=rank)
    resp = HttpResponse(data, content_type="text/plain; charset=utf-8")
    suffix = f"-rank-{rank}" if job.nodes > 1 else ""
    resp["Content-Disposition"] = f'inline; filename="job-{job.pk}-attempt-{attempt}{suffix}.log"'
    return resp


@login_required
@require_GET
def job_bundle(request: HttpRequest, pk: int) -> HttpResponse:
    """The job's output bundle (``bundle.tar.gz``), with HTTP Range support."""
    job = job_own_or_404(request.user, pk)
    try:
        return bundle_response(request, job, rank=_rank_or_404(request))
    except OutputsExpired as exc:
        return _gone(exc)


def _gone(exc: OutputsExpired) -> HttpResponse:
    """410 Gone: the storage sweep deleted the job's outputs (issue 15)."""
    return HttpResponseGone(f"{exc}\n", content_type="text/plain; charset=utf-8")


def _rank_or_404(request: HttpRequest) -> int:
    """``?rank=`` (default 0); 404 unless a small whole number."""
    rank = request.GET.get("rank", "0")
    # ASCII digits only: "²".isdigit() is True but int("²") raises (was a 500).
    if not (rank.isascii() and rank.isdigit() and len(rank) < 6):
        raise Http404("This job has no bundle.")
    return int(rank)


def _output_file_or_404(request: HttpRequest, pk: int, path: str) -> tuple[Job, OutputFile]:
    """The user's job ``pk`` and the file listed exactly as ``path`` in its latest bundle on ``?rank=``.

    Raises:
        Http404: no such job of the user's, bundle or file.
        OutputsExpired: the storage sweep deleted the bundle.
    """
    job = job_own_or_404(request.user, pk)
    bundle = bundle_latest(job, rank=_rank_or_404(request))
    if bundle is not None:
        bundle_check_kept(bundle)  # OutputsExpired: 410
    f = bundle_file(bundle, path) if bundle is not None and bundle.file else None
    if f is None:
        raise Http404("No such file in this job's bundle.")
    return job, f


@login_required
@require_GET
def job_file(request: HttpRequest, pk: int, path: str) -> HttpResponse:
    """One output file's page: its facts, its download, and a preview of an image, JSON, CSV or text."""
    try:
        job, f = _output_file_or_404(request, pk, path)
    except OutputsExpired as exc:
        return _gone(exc)
    try:
        preview = file_preview(pk, f)
    except NotAddressable as exc:
        return render(request, "jobs/file.html", {"section": "jobs", "job": job, "file": f,
                                                  "problem": str(exc)}, status=409)
    return render(request, "jobs/file.html", {
        "section": "jobs", "job": job, "file": f, "preview": preview,
        "download_url": download_url(pk, f),
    })


@login_required
@require_GET
def job_file_download(request: HttpRequest, pk: int, path: str) -> HttpResponse:
    """One output file's bytes from the stored bundle (Range supported); ``?inline=1`` shows an
    image (not SVG), JSON, CSV or text in the browser."""
    try:
        _job, f = _output_file_or_404(request, pk, path)
    except OutputsExpired as exc:
        return _gone(exc)
    try:
        return output_file_response(request, f, inline=request.GET.get("inline") == "1")
    except NotAddressable as exc:
        return HttpResponse(f"{exc}\n", status=409, content_type="text/plain; charset=utf-8")


@login_required
@require_http_methods(["GET", "POST"])
def job_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: a page that asks to confirm the cancel. POST: cancel the job (idempotent), then
    back to its page; asked by htmx (which confirmed in the browser), it says where to go."""
    job = job_own_or_404(request.user, pk)
    if request.method == "GET":
        check_canceller(job, request.user)  # a viewer, or a member on a teammate's job: 403, not a confirm page
        if not job.is_cancellable:
            messages.info(request, f"Job {job.pk} is released already." if job.state == JobState.RELEASED
                          else f"Cancel of job {job.pk} is already requested.")
            return redirect(job)
        return render(request, "jobs/cancel.html", {"section": "jobs", "job": job})
    job = job_cancel(job=job, by=request.user)
    if job.state == JobState.RELEASED:
        messages.success(request, f"Job {job.pk} is cancelled.")
    else:
        messages.info(request, f"Cancel of job {job.pk} requested: the node stops the run "
                               "and packs its outputs.")
    if request.headers.get("HX-Request"):
        resp = HttpResponse(status=204)
        resp["HX-Redirect"] = job.get_absolute_url()
        return resp
    return redirect(job)


# --- job arrays (apps.jobs.arrays) ------------------------------------------------
@login_required
@require_GET
def array_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One array: its counts by state (live), its tasks 50 a page by index (``?state=``), cancel."""
    array = array_own_or_404(request.user, pk)
    state = request.GET.get("state", "")
    tasks = array.jobs.order_by("array_index").select_related("project", "owner").prefetch_related("leases")
    if state in JobState.values:
        tasks = tasks.filter(state=state)
    else:
        state = ""
    page = Paginator(tasks, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    stamp = stamp_ms()
    for job in page:
        job.version = list_row_context(job, stamp=stamp)["version"]
    counts = array_counts([array.pk])[array.pk]
    return render(request, "jobs/array.html", {
        "section": "jobs", "page": page, "state": state, "states": JobState.choices,
        **array_row_context(array, counts=counts, stamp=stamp),
    })


@login_required
@require_http_methods(["GET", "POST"])
def array_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    """GET: a page that asks to confirm. POST: cancel every task not released yet (idempotent),
    then back to the array's page."""
    array = array_own_or_404(request.user, pk)
    if request.method == "GET":
        check_canceller(array, request.user)  # as the job's confirm page: 403 for who may not cancel it
        counts = array_counts([array.pk])[array.pk]
        if not counts.active:
            messages.info(request, f"Every task of array {array.pk} is released already.")
            return redirect(array)
        return render(request, "jobs/array_cancel.html", {"section": "jobs", "array": array, "counts": counts})
    done = array_cancel(array=array, by=request.user)
    messages.success(request, f"Array {array.pk} cancelled: {done.released:,} queued task"
                              f"{'s' if done.released != 1 else ''} released"
                     + (f", {done.stopping:,} running task{'s' if done.stopping != 1 else ''} stopping."
                        if done.stopping else "."))
    if request.headers.get("HX-Request"):
        resp = HttpResponse(status=204)
        resp["HX-Redirect"] = array.get_absolute_url()
        return resp
    return redirect(array)
