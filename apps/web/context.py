"""Context every page gets (``TEMPLATES`` context processors)."""
from __future__ import annotations

from django.http import HttpRequest

from apps.metering.budget import budget_banner_of
from apps.metering.project_budget import project_banners_of


def budget_alert(request: HttpRequest) -> dict[str, object]:
    """``budget_alert``: the signed-in user's budget alert banner this month
    (:class:`apps.metering.budget.BudgetBanner`) or None, and ``project_alerts``: those of the projects
    they own or run (:class:`apps.metering.project_budget.ProjectBanner`). Three small queries, none
    when signed out."""
    user = getattr(request, "user", None)
    return {"budget_alert": budget_banner_of(user), "project_alerts": project_banners_of(user)}
