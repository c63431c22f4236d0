"""The monthly spend limit at submit (SPEC §4, issue 6): the jobs side of :mod:`apps.metering.limits`."""
from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db.models import Q

from apps.core import clock
from apps.core.models import AccountProfile
from apps.core.types import ComputeRequest
from apps.metering.limits import SpendCheck, project_spend_check, spend_check
from apps.metering.pricing import worst_case_price
from apps.metering.selectors import rate_table
from apps.projects.models import Project

from .spec import SpecError


def spend_limit_enforce(*, owner, request: ComputeRequest, now: datetime | None = None,
                        tasks: int = 1, project_id: int | None = None) -> SpendCheck:
    """Refuse a job whose worst case exceeds what is left of ``owner``'s monthly limit (the effective
    one: the smaller of the operator's and the user's own), or of its project's (``project_id``: the
    lower of the operator's limit and the owner's budget, every member's jobs counted; SPEC §9).

    Called by :func:`apps.jobs.services.job_submit` before the job is stored, and once by
    :func:`apps.jobs.arrays.array_submit` for a whole array: ``tasks`` times one task's worst case.
    The pool and rates are read once, before the account's row lock; under the lock only the
    month's leases and one aggregate over the queued jobs are read.

    Raises:
        apps.jobs.spec.SpecError: ``{"compute": [message with the shortfall]}``.
    """
    now = now or clock.now()
    table = rate_table(now)
    if project_id is not None:
        # The project's row lock orders two members' submits as the account's orders one user's.
        limited = Q(spend_limit__isnull=False) | Q(budget__isnull=False)
        project = Project.objects.select_for_update().filter(limited, pk=project_id).first()
        if project is not None:
            worst = worst_case_price(request, table, tasks=tasks).amount
            check = project_spend_check(project=project, worst_case=worst, now=now, table=table)
            if not check.fits:
                raise SpecError({"compute": [check.message()]})
    # Inside the submit's transaction the profile row is locked, so two submits of one
    # account at once are checked one after the other: the second sees the first as committed.
    limited = Q(monthly_spend_limit__isnull=False) | Q(user_spend_limit__isnull=False)
    if not AccountProfile.objects.select_for_update().filter(limited, owner_id=owner.pk).exists():
        return SpendCheck(Decimal(0), None, Decimal(0), Decimal(0), now)
    worst = worst_case_price(request, table, tasks=tasks).amount
    check = spend_check(owner=owner, worst_case=worst, now=now, table=table)
    if not check.fits:
        raise SpecError({"compute": [check.message()]})
    return check
