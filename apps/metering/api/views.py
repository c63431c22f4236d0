"""The meter's API (SPEC §7): my usage, the pool with its rates. Views only parse, call selectors
and render."""
from __future__ import annotations

from datetime import UTC, datetime

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core import clock
from apps.metering.accounts import profile_of, user_tz
from apps.metering.budget import profile_set_budget
from apps.metering.csvsafe import csv_response
from apps.metering.selectors import (
    CSV_COLUMNS,
    pool_summary,
    usage_by_member,
    usage_leases,
    usage_records,
    usage_rows,
)
from apps.metering.statements import statement_of
from apps.projects.api.views import project_errors
from apps.projects.services import project_for


def parse_when(value: str | None, field: str) -> datetime | None:
    """An ISO date or datetime from a query parameter (dates are midnight in the current zone)."""
    if not value:
        return None
    try:
        dt = parse_datetime(value)
        if dt is None:
            d = parse_date(value) if len(value) == 10 else None
            if d is None:
                raise ValueError
            dt = datetime(d.year, d.month, d.day)
        if timezone.is_naive(dt):
            dt = timezone.make_aware(dt)
        dt.astimezone(UTC)  # an offset that cannot be applied fails here, not in the query
    except (ValueError, OverflowError):
        raise ValidationError({field: ["Must be a real ISO 8601 date or date-time, e.g. 2025-01-31."]}) from None
    return dt


class UsageView(APIView):
    @extend_schema(parameters=[OpenApiParameter("from", str), OpenApiParameter("to", str),
                               OpenApiParameter("format", str, enum=["json", "csv"]),
                               OpenApiParameter("project", str, description=(
                                   "Every member's leases of this project, with totals by member (SPEC §9)"))])
    def get(self, request):
        tz = user_tz(request.user)  # token auth runs after the time zone middleware: the account's zone here
        with timezone.override(tz):  # naive times and plain dates are the account's, as on the page
            start = parse_when(request.query_params.get("from"), "from")
            end = parse_when(request.query_params.get("to"), "to")
        if start and end and end < start:
            raise ValidationError({"to": ["Must not be before `from`."]})
        project = None
        if request.query_params.get("project"):
            with project_errors():
                project = project_for(request.user, request.query_params["project"])
        leases = list(usage_leases(user=request.user, start=start, end=end, project=project))
        statement = statement_of(leases, clock.now(), (start, end) if start or end else None)
        if request.query_params.get("format") == "csv":
            return csv_response("e31-usage.csv", CSV_COLUMNS, usage_rows(statement, tz))
        body = {
            "leases": usage_records(statement, tz),
            "totals": {"leases": statement.leases, "billed_seconds": statement.billed_seconds,
                       "gpu_hours_billed": str(statement.gpu_hours_billed), "cost": f"{statement.cost:.6f}"},
        }
        if project is not None:
            body["by_member"] = usage_by_member(statement)
        return Response(body)


class PoolView(APIView):
    @extend_schema(responses=inline_serializer("PoolModel", {
        "gpu_model": serializers.CharField(), "total": serializers.IntegerField(),
        "free": serializers.IntegerField(), "nodes": serializers.IntegerField(),
        "rate_per_gpu_hour": serializers.DecimalField(max_digits=10, decimal_places=4)}, many=True))
    def get(self, request):
        return Response([{**row, "rate_per_gpu_hour": str(row["rate_per_gpu_hour"])} for row in pool_summary()])


class AccountSerializer(serializers.Serializer):
    """My account's limits: the operator's (read-only), my own, the one that counts, and the alert."""

    time_zone = serializers.CharField(read_only=True)
    monthly_spend_limit = serializers.DecimalField(max_digits=12, decimal_places=2, read_only=True,
                                                   help_text="USD per month, set by an operator.")
    user_spend_limit = serializers.DecimalField(max_digits=12, decimal_places=2, min_value=0, allow_null=True,
                                                required=False, help_text="USD per month; at most the operator's.")
    effective_spend_limit = serializers.DecimalField(max_digits=12, decimal_places=2, read_only=True)
    alert_threshold_percent = serializers.IntegerField(min_value=1, max_value=100, allow_null=True, required=False)


class AccountView(APIView):
    """``GET``: my limits and alert threshold; ``PATCH``: set my own limit and threshold (fields left
    out keep their value; errors name the field)."""

    @extend_schema(responses=AccountSerializer)
    def get(self, request):
        return Response(AccountSerializer(profile_of(request.user)).data)

    @extend_schema(request=AccountSerializer, responses=AccountSerializer)
    def patch(self, request):
        incoming = AccountSerializer(data=request.data, partial=True)
        incoming.is_valid(raise_exception=True)
        profile = profile_of(request.user)
        values = {"user_spend_limit": profile.user_spend_limit,
                  "alert_threshold_percent": profile.alert_threshold_percent, **incoming.validated_data}
        try:
            profile = profile_set_budget(owner=request.user, **values)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        return Response(AccountSerializer(profile).data)
