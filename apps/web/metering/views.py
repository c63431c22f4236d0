"""Browser pages of the meter (SPEC §4, §7): my usage (leases, totals, chart, CSV), my settings,
and the operators' report. Views parse, call selectors or services, and render."""
from __future__ import annotations

import zoneinfo
from decimal import Decimal
from functools import wraps

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from apps.agent_api.retention import storage_report
from apps.core import clock
from apps.core.units import format_duration
from apps.jobs.selectors import jobs_of
from apps.metering.accounts import profile_of, profile_set_time_zone, user_tz
from apps.metering.budget import profile_set_budget
from apps.metering.csvsafe import csv_response
from apps.metering.days import month_start
from apps.metering.filters import usage_filtered
from apps.metering.limits import spend_check
from apps.metering.receipts import job_receipt
from apps.metering.reports import REPORT_CSV_COLUMNS, ReportFilterForm, operator_report, report_rows
from apps.metering.selectors import CSV_COLUMNS, usage_by_member, usage_rows
from apps.metering.statements import by_day, chart_data, statement_of
from apps.projects.services import ProjectError, project_for, projects_of
from apps.web.account.context import account_context

LINES_PER_PAGE = 200


def _bad_filters(form) -> HttpResponse:
    problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
    return HttpResponse(problems + "\n", status=400, content_type="text/plain; charset=utf-8")


@login_required
@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    """My leases (newest first, 200 a page) through the filters; totals, GPU-hours and cost per local
    day over every lease the filters select (as the CSV has them). ``?project=``: every member's
    leases of one of my projects, with the totals by member (SPEC §9)."""
    project = _usage_project(request)
    usage_filter, leases = usage_filtered(user=request.user, query=request.GET, project=project)
    now = clock.now()
    tz = user_tz(request.user)
    statement = statement_of(leases, now, usage_filter.period())
    page = Paginator(statement.lines, LINES_PER_PAGE).get_page(request.GET.get("page"))
    for line in page:
        line.held = format_duration(line.held_seconds)
        line.billed = "" if line.billed_seconds is None else format_duration(line.billed_seconds)
    params = request.GET.copy()
    params.pop("page", None)
    first, last = usage_filter.days()
    days = by_day(statement, tz, first=first, last=last)
    profile = profile_of(request.user)
    limit = (spend_check(owner=request.user, worst_case=Decimal(0), now=now)
             if profile.effective_spend_limit is not None else None)
    return render(request, "metering/usage.html", {
        "section": "usage", "form": usage_filter.form, "statement": statement, "lines": page, "page": page,
        "totals": statement, "days": days, "chart": chart_data(days), "query": params.urlencode(),
        "tz_name": str(tz), "limit": limit, "month": month_start(now, tz).astimezone(tz),
        "project": project, "projects": [p.name for p, _ in projects_of(request.user)],
        "by_member": usage_by_member(statement) if project is not None else None,
    })


def _usage_project(request: HttpRequest):
    """The project of ``?project=`` (one of the caller's), or None without it.

    Raises:
        Http404: a project the caller is not in (as if it did not exist).
    """
    name = request.GET.get("project")
    if not name:
        return None
    try:
        return project_for(request.user, name)
    except ProjectError:
        raise Http404("No such project.") from None


@login_required
@require_GET
def usage_csv(request: HttpRequest) -> HttpResponse:
    """Exactly the rows of the usage page (same filters) as CSV, times ISO 8601 with offset."""
    usage_filter, leases = usage_filtered(user=request.user, query=request.GET, project=_usage_project(request))
    if usage_filter.is_bound and not usage_filter.is_valid():
        return _bad_filters(usage_filter.form)
    rows = usage_rows(statement_of(leases, clock.now(), usage_filter.period()), user_tz(request.user))
    return csv_response("e31-usage.csv", CSV_COLUMNS, rows)


class TimeZoneForm(forms.Form):
    """The settings page: the user's time zone (an IANA name)."""

    time_zone = forms.CharField(max_length=64, label="Time zone",
                                help_text="An IANA name such as Europe/Berlin, America/New_York or UTC. "
                                          "Pages show times in it; usage counts its days and months.",
                                widget=forms.TextInput(attrs={"list": "time-zones", "autocomplete": "off"}))


class BudgetForm(forms.Form):
    """The settings page: the user's own monthly limit (USD) and alert threshold (percent)."""

    user_spend_limit = forms.DecimalField(
        required=False, min_value=0, max_digits=12, decimal_places=2, label="My monthly limit (USD)",
        help_text="Can only lower the operator's limit; the smaller counts. Empty for none.")
    alert_threshold_percent = forms.IntegerField(
        required=False, min_value=1, max_value=100, label="Alert at (% of the limit)",
        help_text="Once a month, when your spend passes it: a banner on every page, a browser notification "
                  "if allowed, an e-mail if e-mail notices are on. Empty for no alert.")


@login_required
@require_http_methods(["GET", "POST"])
def account_settings(request: HttpRequest) -> HttpResponse:
    """My time zone (editable), the operator's monthly spend limit, and my own limit and alert threshold
    (the form whose button was pressed is bound: ``form=budget`` or the time zone)."""
    profile = profile_of(request.user)
    form = TimeZoneForm(initial={"time_zone": profile.time_zone})
    budget_form = BudgetForm(initial={"user_spend_limit": profile.user_spend_limit,
                                      "alert_threshold_percent": profile.alert_threshold_percent})
    if request.method == "POST" and request.POST.get("form") == "budget":
        budget_form = BudgetForm(request.POST)
        if budget_form.is_valid():
            try:
                profile_set_budget(owner=request.user, **budget_form.cleaned_data)
            except ValidationError as exc:
                for field, problems in exc.message_dict.items():
                    budget_form.add_error(field, problems)
            else:
                messages.success(request, "Your limit and alert are saved.")
                return redirect("account:settings")
    elif request.method == "POST":
        form = TimeZoneForm(request.POST)
        if form.is_valid():
            try:
                profile_set_time_zone(owner=request.user, time_zone=form.cleaned_data["time_zone"].strip())
            except ValidationError as exc:
                form.add_error("time_zone", exc.messages)
            else:
                messages.success(request, f"Times are now shown in {form.cleaned_data['time_zone'].strip()}.")
                return redirect("account:settings")
    return account_settings_page(request, form=form, budget_form=budget_form, profile=profile)


def account_settings_page(request: HttpRequest, *, form: TimeZoneForm | None = None,
                          budget_form: BudgetForm | None = None, profile=None, **bound) -> HttpResponse:
    """Render the Settings page: time zone, limits, API tokens, password, e-mail. A form passed in
    (bound, with its errors) replaces the blank one; ``bound`` goes to :func:`account_context`."""
    profile = profile or profile_of(request.user)
    form = form or TimeZoneForm(initial={"time_zone": profile.time_zone})
    budget_form = budget_form or BudgetForm(initial={"user_spend_limit": profile.user_spend_limit,
                                                     "alert_threshold_percent": profile.alert_threshold_percent})
    return render(request, "metering/settings.html", {
        "section": "settings", "form": form, "budget_form": budget_form, "profile": profile,
        "zones": sorted(zoneinfo.available_timezones()), **account_context(request, **bound),
    })


def staff_only(view):
    """Signed in (else to the sign-in page) and staff (else 403): operators' pages."""
    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("This page is for operators.")
        return view(request, *args, **kwargs)
    return wrapped


@staff_only
@require_GET
def report(request: HttpRequest) -> HttpResponse:
    """Operators: GPU-hours held, idle, down and charged, and revenue, per day and GPU model; top accounts;
    storage used by kind and what the next sweep frees (issue 15)."""
    form = ReportFilterForm(request.GET or None)
    tz = user_tz(request.user)
    data = operator_report(*form.span(tz), tz=tz, now=clock.now())
    return render(request, "metering/report.html", {
        "section": "report", "form": form, "report": data, "query": request.GET.urlencode(), "tz_name": str(tz),
        "storage": storage_report(),
    })


@staff_only
@require_GET
def report_csv(request: HttpRequest) -> HttpResponse:
    """The operators' report per day and GPU model as CSV."""
    form = ReportFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        return _bad_filters(form)
    tz = user_tz(request.user)
    data = operator_report(*form.span(tz), tz=tz, now=clock.now())
    return csv_response("e31-report.csv", REPORT_CSV_COLUMNS, report_rows(data))


@login_required
@require_GET
def receipt(request: HttpRequest, job_id: int) -> HttpResponse:
    """One of my jobs' receipt on a page of its own, laid out for printing; anyone else's is 404."""
    job = jobs_of(request.user).filter(pk=job_id).select_related("owner").first()
    if job is None:
        raise Http404("No such job.")
    return render(request, "metering/receipt.html", {"section": "jobs", "job": job, "receipt": job_receipt(job)})
