"""Fair-share usage and runtime history per account, kept incrementally (SPEC §5).

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

from apps.scheduling.core import charge, decay, remember_run

from .models import AccountUsage


@transaction.atomic
def usage_record(*, owner_id: int, gpu_seconds: float, runtime_s: float | None, now: datetime) -> AccountUsage:
    """Add ``gpu_seconds`` to the account's decayed usage and remember ``runtime_s``.

    Called once per released job (duplicate releases are prevented upstream
    by the state machine). Row-locked so two releases at once both count.
    """
    usage, _ = AccountUsage.objects.select_for_update().get_or_create(owner_id=owner_id, defaults={"updated_at": now})
    value, stamp = charge(usage.decayed_gpu_seconds, usage.updated_at.timestamp(), gpu_seconds, now.timestamp(),
                          settings.E31_FAIRSHARE_HALF_LIFE_S)
    usage.decayed_gpu_seconds = value
    usage.updated_at = max(now, usage.updated_at)  # = stamp, kept as the aware datetime given
    if runtime_s is not None:
        usage.recent_runtimes_s = remember_run(usage.recent_runtimes_s, runtime_s)
    usage.save()
    return usage


def usage_now(now: datetime, owner_ids: Iterable[int] | None = None) -> dict[int, AccountUsage]:
    """Usage rows (every account's, or those of ``owner_ids``) with ``decayed_gpu_seconds``
    decayed to ``now`` (not saved)."""
    rows = AccountUsage.objects.all()
    if owner_ids is not None:
        rows = rows.filter(owner_id__in=set(owner_ids))
    rows = {u.owner_id: u for u in rows}
    for usage in rows.values():
        usage.decayed_gpu_seconds = decay(usage.decayed_gpu_seconds, (now - usage.updated_at).total_seconds(),
                                          settings.E31_FAIRSHARE_HALF_LIFE_S)
    return rows
