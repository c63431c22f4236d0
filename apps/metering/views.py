"""Browser pages of the meter (SPEC §4, §7): my leases, totals, GPU-hours by day, CSV."""
from __future__ import annotations

import csv
from datetime import date, datetime, time, timedelta

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from apps.jobs.spec import format_duration

from .selectors import (
    CSV_COLUMNS,
    gpu_hours_by_day,
    lease_held_seconds,
    usage_leases,
    usage_rows,
    usage_totals,
)


class UsageFilterForm(forms.Form):
    """``?from=YYYY-MM-DD&to=YYYY-MM-DD``: leases rented on those days, both included."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # "from" is a Python keyword, hence not a class attribute.
        self.fields["from"] = forms.DateField(required=False, label="From",
                                              widget=forms.DateInput(attrs={"type": "date"}))
        self.fields["to"] = forms.DateField(required=False, label="To",
                                            widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self):
        data = super().clean()
        if data.get("from") and data.get("to") and data["to"] < data["from"]:
            self.add_error("to", "Must be on or after the first day.")
        return data

    def span(self) -> tuple[datetime | None, datetime | None]:
        """``[start, end)`` in the current time zone: midnight of ``from``, the one after ``to``."""
        if not self.is_bound or not self.is_valid():
            return None, None
        first, last = self.cleaned_data.get("from"), self.cleaned_data.get("to")
        return (_midnight(first) if first else None,
                _midnight(last + timedelta(days=1)) if last else None)


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


@login_required
@require_GET
def usage(request: HttpRequest) -> HttpResponse:
    """My leases (newest first) with totals, optionally between two dates."""
    form = UsageFilterForm(request.GET if request.GET else None)
    start, end = form.span()
    leases = list(usage_leases(user=request.user, start=start, end=end))
    now = timezone.now()
    for lease in leases:
        lease.held = format_duration(round(lease_held_seconds(lease, now)))
        lease.billed = "" if lease.billed_seconds is None else format_duration(lease.billed_seconds)
    tz = timezone.get_current_timezone()
    return render(request, "metering/usage.html", {
        "section": "usage", "form": form, "leases": leases, "totals": usage_totals(leases),
        "chart": gpu_hours_by_day(leases, tz), "query": request.GET.urlencode(),
    })


@login_required
@require_GET
def usage_csv(request: HttpRequest) -> HttpResponse:
    """The same leases as the usage page, as CSV (times ISO 8601 with offset)."""
    form = UsageFilterForm(request.GET if request.GET else None)
    if form.is_bound and not form.is_valid():
        problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return HttpResponse(problems + "\n", status=400, content_type="text/plain; charset=utf-8")
    start, end = form.span()
    leases = usage_leases(user=request.user, start=start, end=end)
    resp = HttpResponse(content_type="text/csv; charset=utf-8")
    resp["Content-Disposition"] = 'attachment; filename="e31-usage.csv"'
    writer = csv.writer(resp)
    writer.writerow(CSV_COLUMNS)
    writer.writerows(usage_rows(leases, timezone.get_current_timezone()))
    return resp
