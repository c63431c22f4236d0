"""Fair-share usage per (account, project) and runtime history per account, kept incrementally (SPEC §5).

The live site's copy of the one ledger: the rule is :func:`apps.scheduling.core.charge` and
:func:`apps.scheduling.core.remember_run`, the same functions the replay's in-memory
:class:`apps.scheduling.core.UsageLedger` applies, so live and replayed cycles see the same usage.

Fair share follows Slurm's classic decayed usage
(https://slurm.schedmd.com/priority_multifactor.html, "PriorityDecayHalfLife"):
usage decays by half every half-life; a cycle reads it, never re-sums the ledger.
The last two run times feed the runtime prediction of
:func:`apps.scheduling.core.predict_runtime` (Tsafrir, Etsion and Feitelson 2007).
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction

from apps.projects.models import Project
from apps.scheduling.core import charge, decay, remember_run

from .models import AccountUsage


def personal_or(owner_id: int, project_id: int | None) -> int | None:
    """``project_id``, or None where it is empty or the owner's own personal project: a job with no
    project and one in the owner's personal project are one association (fair_tree.html's user
    under its personal account)."""
    if project_id is None:
        return None
    personal = Project.objects.filter(pk=project_id, personal_of_id=owner_id).exists()
    return None if personal else project_id


@transaction.atomic
def usage_record(*, owner_id: int, gpu_seconds: float, runtime_s: float | None, now: datetime,
                 project_id: int | None = None) -> AccountUsage:
    """Add ``gpu_seconds`` to the decayed usage of the owner in ``project_id`` (None, or the
    owner's personal project: the personal row) and remember ``runtime_s`` on the owner's
    personal row (a prediction is per user). Returns the project's row.

    Called once per released job (duplicate releases are prevented upstream
    by the state machine). Row-locked so two releases at once both count.
    """
    project_id = personal_or(owner_id, project_id)
    half_life = settings.E31_FAIRSHARE_HALF_LIFE_S
    usage, _ = AccountUsage.objects.select_for_update().get_or_create(
        owner_id=owner_id, project_id=project_id, defaults={"updated_at": now})
    usage.decayed_gpu_seconds, _ = charge(usage.decayed_gpu_seconds, usage.updated_at.timestamp(), gpu_seconds,
                                          now.timestamp(), half_life)
    usage.updated_at = max(now, usage.updated_at)  # = the stamp, kept as the aware datetime given
    if runtime_s is not None and project_id is None:
        usage.recent_runtimes_s = remember_run(usage.recent_runtimes_s, runtime_s)
    usage.save()
    if runtime_s is not None and project_id is not None:
        personal, _ = AccountUsage.objects.select_for_update().get_or_create(
            owner_id=owner_id, project_id=None, defaults={"updated_at": now})
        personal.recent_runtimes_s = remember_run(personal.recent_runtimes_s, runtime_s)
        personal.save(update_fields=["recent_runtimes_s"])
    return usage


def _decayed(rows, now: datetime) -> list[AccountUsage]:
    rows = list(rows)
    for usage in rows:
        usage.decayed_gpu_seconds = decay(usage.decayed_gpu_seconds, (now - usage.updated_at).total_seconds(),
                                          settings.E31_FAIRSHARE_HALF_LIFE_S)
    return rows


def usage_now(now: datetime, owner_ids: Iterable[int] | None = None) -> dict[int, AccountUsage]:
    """Personal usage rows (every account's, or those of ``owner_ids``) with ``decayed_gpu_seconds``
    decayed to ``now`` (not saved): each owner's runtime history and personal-project usage."""
    rows = AccountUsage.objects.filter(project__isnull=True)
    if owner_ids is not None:
        rows = rows.filter(owner_id__in=set(owner_ids))
    return {u.owner_id: u for u in _decayed(rows, now)}


def usage_by_association(now: datetime) -> dict[tuple[int, int | None], float]:
    """Every row's decayed GPU-seconds at ``now``, by ``(owner id, project id)`` (None: personal)."""
    return {(u.owner_id, u.project_id): u.decayed_gpu_seconds
            for u in _decayed(AccountUsage.objects.only("owner_id", "project_id", "decayed_gpu_seconds",
                                                        "updated_at"), now)}
