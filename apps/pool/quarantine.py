"""Unclean GPUs are held back (issue 26 item 3, SPEC §5): the rule that reads a heartbeat's GPU health
and quarantines or lifts each GPU through the door in :mod:`apps.pool.state`."""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings

from . import signals
from .models import Gpu, Node
from .state import gpu_quarantine, gpu_quarantine_lift

log = logging.getLogger(__name__)


def unclean_reason(health: dict[str, Any], *, leased: bool) -> str:
    """Why the GPU of one heartbeat health row (``Node.health["gpus"][i]``) is not clean, or "".

    Unclean: uncorrected ECC errors (any lease or none), an XID error the agent names (``xid``), or,
    with no lease, memory in use above ``E31_GPU_IDLE_MEMORY_MIB`` (MiB) or compute processes
    (``processes``, a count). Figures the agent could not read (None, absent) count as clean.
    """
    reasons = []
    ecc = health.get("ecc_uncorrected")
    if isinstance(ecc, int) and ecc > 0:
        reasons.append(f"{ecc} uncorrected ECC error{'s' if ecc != 1 else ''}")
    xid = health.get("xid")
    if isinstance(xid, int) and xid > 0:
        reasons.append(f"XID {xid}")
    if not leased:
        used = health.get("memory_used_mb")
        if isinstance(used, int | float) and used > settings.E31_GPU_IDLE_MEMORY_MIB:
            reasons.append(f"{used:,.0f} MiB of memory in use with no lease")
        procs = health.get("processes")
        if isinstance(procs, int) and procs > 0:
            reasons.append(f"{procs} process{'es' if procs != 1 else ''} running with no lease")
    return "; ".join(reasons)


def gpus_check_clean(*, node: Node, health: dict[str, Any], now: datetime) -> list[int]:
    """Quarantine each GPU of ``node`` whose row in ``health`` (``{"gpus": [{"index", ...}]}``) is
    unclean (:func:`unclean_reason`) and lift those now clean. A GPU missing from ``health`` is left as it is.

    Returns the ids of the GPUs whose quarantine changed (new or lifted); when any was lifted the
    pool tells the scheduler capacity came back.
    """
    rows = {g.get("index"): g for g in health.get("gpus") or [] if isinstance(g, dict)}
    if not rows:
        return []
    changed, lifted = [], False
    gpus = Gpu.objects.filter(node=node, present=True, index__in=list(rows)).values_list(
        "id", "index", "quarantined_at")
    leased = set(Gpu.objects.filter(node=node, lease_gpus__open=True).values_list("id", flat=True))
    for gpu_id, index, quarantined_at in gpus:
        reason = unclean_reason(rows[index], leased=gpu_id in leased)
        if reason:
            if gpu_quarantine(gpu_id, reason, now=now):
                log.warning("GPU %s:%s quarantined: %s", node.name, index, reason)
                changed.append(gpu_id)
        elif quarantined_at is not None and gpu_quarantine_lift(gpu_id):
            log.info("GPU %s:%s clean again: quarantine lifted", node.name, index)
            changed.append(gpu_id)
            lifted = True
    if changed:
        signals.pool_changed.send(sender=Node)
    if lifted:
        signals.capacity_added.send(sender=Node)
    return changed


def gpu_lift_by_operator(*, gpu: Gpu) -> bool:
    """An operator lifts ``gpu``'s quarantine (the admin action): it takes jobs until a heartbeat
    finds it unclean again. Returns True when it was quarantined."""
    if not gpu_quarantine_lift(gpu.pk):
        return False
    log.warning("GPU %s:%s quarantine lifted by an operator", gpu.node.name, gpu.index)
    signals.pool_changed.send(sender=Node)
    signals.capacity_added.send(sender=Node)
    return True
