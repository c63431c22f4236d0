"""The scheduling core: a pure function from (queue, pool, clock, policy) to decisions.

Nothing in this package imports Django, so the live site
(:mod:`apps.scheduling.adapter`) and a trace simulator run the same code, and
tests call one cycle directly.
"""
from .core import POLICIES, policy_resolve, schedule
from .priority import (
    RECENT_RUNS,
    UsageLedger,
    charge,
    decay,
    fairshare_factor,
    held_until,
    planned_end,
    predict_runtime,
    remember_run,
)
from .requests import Requirements, job_request
from .types import Decision, GpuSlot, JobRequest, NodeView, Pending, Placement, PolicyConfig, Reservation

__all__ = ["POLICIES", "RECENT_RUNS", "Decision", "GpuSlot", "JobRequest", "NodeView", "Pending", "Placement",
           "PolicyConfig", "Requirements", "Reservation", "UsageLedger", "charge", "decay", "fairshare_factor",
           "held_until", "job_request", "planned_end", "policy_resolve", "predict_runtime", "remember_run", "schedule"]
