"""Context every page gets (``TEMPLATES`` context processors)."""
from __future__ import annotations

from django.http import HttpRequest

from apps.metering.budget import budget_banner_of


def budget_alert(request: HttpRequest) -> dict[str, object]:
    """``budget_alert``: the signed-in user's budget alert banner this month
    (:class:`apps.metering.budget.BudgetBanner`) or None. Two small queries, none when signed out."""
    return {"budget_alert": budget_banner_of(getattr(request, "user", None))}
