"""The usage filters (django-filter): local days, GPU model, outcome."""
from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta, tzinfo

import django_filters
from django import forms
from django.db.models import F, Q, QuerySet

from apps.core.choices import EndReason, Outcome

from .accounts import user_tz
from .days import local_midnight, validate_day
from .models import Lease
from .selectors import leases_overlapping, usage_base, with_line_fields
from .statements import Period

RUNNING = "running"
OUTCOME_CHOICES = [(RUNNING, "Running"), *Outcome.choices]


class UsageFilterForm(forms.Form):
    """The filters' form: the last day may not come before the first."""

    def clean(self):
        data = super().clean()
        if data.get("from") and data.get("to") and data["to"] < data["from"]:
            self.add_error("to", "Must be on or after the first day.")
        return data


class UsageFilter(django_filters.FilterSet):
    """``?from=YYYY-MM-DD&to=YYYY-MM-DD&gpu_model=H100-80GB&outcome=succeeded``.

    ``from``/``to``: leases that held GPUs on those local days (in ``tz``), both
    included; a lease is selected by overlap and :meth:`period` cuts it to the days asked.
    ``outcome``: ``running`` (still holding GPUs) or a job outcome; a lease of an
    earlier attempt ended by node loss counts as ``node_lost``.
    Build it with ``queryset`` (the user's own leases) and ``tz``.
    """

    gpu_model = django_filters.ChoiceFilter(label="GPU model", empty_label="Any model")
    outcome = django_filters.ChoiceFilter(label="Outcome", choices=OUTCOME_CHOICES, method="filter_outcome",
                                          empty_label="Any outcome")

    class Meta:
        model = Lease
        fields: list[str] = []
        form = UsageFilterForm

    def __init__(self, data=None, queryset: QuerySet[Lease] | None = None, *, tz: tzinfo, **kwargs):
        self.tz = tz
        super().__init__(data, queryset, **kwargs)
        models = sorted(set(queryset.values_list("gpu_model", flat=True))) if queryset is not None else []
        self.filters["gpu_model"].extra["choices"] = [(m, m) for m in models]

    def filter_start(self, queryset, name, value):
        return leases_overlapping(queryset, local_midnight(value, self.tz), None)

    def filter_end(self, queryset, name, value):
        return leases_overlapping(queryset, None, local_midnight(value + timedelta(days=1), self.tz))

    def filter_outcome(self, queryset, name, value):
        if value == RUNNING:
            return queryset.filter(released_at__isnull=True)
        if value == Outcome.NODE_LOST:
            return queryset.filter(released_at__isnull=False).filter(
                Q(job__outcome=Outcome.NODE_LOST) | ~Q(attempt=F("job__attempt")) & Q(end_reason=EndReason.NODE_LOST))
        return queryset.filter(released_at__isnull=False, attempt=F("job__attempt"), job__outcome=value)

    def days(self):
        """The first and last local day asked for (either may be None); (None, None) if invalid."""
        if not self.is_bound or not self.form.is_valid():
            return None, None
        return self.form.cleaned_data.get("from"), self.form.cleaned_data.get("to")

    def period(self) -> Period | None:
        """``[first local midnight, midnight after the last day)`` asked for, or None when no day was."""
        first, last = self.days()
        if first is None and last is None:
            return None
        return (local_midnight(first, self.tz) if first else None,
                local_midnight(last + timedelta(days=1), self.tz) if last else None)


# "from" is a Python keyword, so the date filters are put in by name.
_date = {"widget": forms.DateInput(attrs={"type": "date"}), "validators": [validate_day]}
UsageFilter.base_filters = {
    "from": django_filters.DateFilter(label="From", method="filter_start", **_date),
    "to": django_filters.DateFilter(label="To", method="filter_end", **_date),
    **UsageFilter.base_filters,
}


def usage_filtered(*, user, query: Mapping[str, str], project=None) -> tuple[UsageFilter, list[Lease]]:
    """``user``'s own leases (``project``'s, every member's: :func:`apps.metering.selectors.usage_base`)
    through the usage filters of ``query`` (a request's GET), newest first,
    with what a statement line shows (:func:`apps.metering.selectors.with_line_fields`), and the
    filter (its form carries the errors). Days are ``user``'s local days. Filters that do not
    validate select nothing (the page shows their errors).
    """
    own = usage_base(user=user, project=project)
    usage_filter = UsageFilter(query or None, queryset=own, tz=user_tz(user))
    leases = usage_filter.qs if usage_filter.is_bound and usage_filter.is_valid() else own
    if usage_filter.is_bound and not usage_filter.is_valid():
        leases = own.none()
    return usage_filter, list(with_line_fields(leases))
