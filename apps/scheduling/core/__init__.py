"""The scheduling core: a pure function from (queue, pool, clock, policy) to decisions.

Nothing in this package imports Django, so the live site
(:mod:`apps.scheduling.adapter`) and a trace simulator run the same code, and
tests call one cycle directly.
"""
from .core import POLICIES, policy_resolve, schedule
from .fairtree import fairtree_factors, job_usage_key, split_key, tree_project, usage_key
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
from .types import Decision, FairShares, GpuSlot, JobRequest, NodeView, Pending, Placement, PolicyConfig, Reservation

__all__ = ["POLICIES", "RECENT_RUNS", "Decision", "FairShares", "GpuSlot", "JobRequest", "NodeView", "Pending",
           "Placement", "PolicyConfig", "Requirements", "Reservation", "UsageLedger", "charge", "decay",
           "fairshare_factor", "fairtree_factors", "held_until", "job_request", "job_usage_key", "planned_end",
           "policy_resolve", "predict_runtime", "remember_run", "schedule", "split_key", "tree_project", "usage_key"]
