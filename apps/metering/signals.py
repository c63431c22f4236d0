"""What the meter tells higher layers (docs/architecture.md: a lower layer signals, a higher one receives)."""
from django.dispatch import Signal

budget_alert_raised = Signal()
"""An account's spend passed its alert threshold for the first time this month (issue 16).

Sent inside the transaction that stores the :class:`apps.metering.models.BudgetAlert`, with
``alert_id`` (the row's id) and ``owner_id``; receivers defer side effects to ``on_commit``.
"""

project_budget_alert_raised = Signal()
"""A project's month's spend passed its alert threshold for the first time this month (issue 25 item 3).

Sent inside the transaction that stores the :class:`apps.metering.models.ProjectBudgetAlert`, with
``alert_id`` and ``project_id``; receivers defer side effects to ``on_commit``.
"""
