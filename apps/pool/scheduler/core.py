"""One scheduling cycle, first come first served with best-fit gang placement.

Policy ``fifo``: jobs in order of (operator boost, submit time, id); the
first job that cannot start blocks the ones behind it (no backfill yet: the
``scheduler`` issue adds fair share and backfill behind this same seam).

Placement is gang: all GPUs of all ranks, or nothing. Among nodes that fit,
best fit (fewest fitting free GPUs left over) keeps whole nodes free for
big jobs. Start estimates come from the time limits of what runs and of the
jobs planned ahead: each GPU's ``free_at`` is walked forward as jobs are
planned, so an estimate is an upper bound unless work ends early.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from .matching import describe_request, free_fitting_gpus, node_could_ever_hold
from .types import Decision, GpuSlot, JobRequest, NodeView, Pending, Placement

POLICIES = ("fifo",)


class _Pool:
    """Mutable working copy of the pool for one cycle."""

    def __init__(self, nodes: Sequence[NodeView]):
        self.nodes = [n for n in nodes if n.gpus]
        self.free_at = {g.gpu_id: g.free_at for n in self.nodes for g in n.gpus}
        self.cpus_free = {n.node_id: n.cpus_free for n in self.nodes}
        self.memory_free = {n.node_id: n.memory_free_bytes for n in self.nodes}

    def view(self, node: NodeView) -> NodeView:
        gpus = [GpuSlot(g.gpu_id, g.model, g.memory_mb, self.free_at[g.gpu_id]) for g in node.gpus]
        return NodeView(node.node_id, node.name, node.state, gpus, self.cpus_free[node.node_id],
                        self.memory_free[node.node_id], node.cpus_total, node.memory_total_bytes,
                        node.runtimes)

    def fit_at(self, job: JobRequest, t: float, *, check_resources: bool):
        """Best-fit gang choice at time ``t``: ``[(node, [gpu, ...]), ...]`` or None."""
        options = []
        for node in self.nodes:
            if node.state != "up" or not node_could_ever_hold(job, node):
                continue
            if check_resources and (self.cpus_free[node.node_id] < job.cpus
                                    or self.memory_free[node.node_id] < job.memory_bytes):
                continue
            free = free_fitting_gpus(job, self.view(node), t)
            if len(free) >= job.gpus_per_node:
                options.append((len(free) - job.gpus_per_node, len(node.gpus), node.name, node, free))
        if len(options) < job.nodes:
            return None
        options.sort(key=lambda o: o[:3])
        return [(o[3], o[4][: job.gpus_per_node]) for o in options[: job.nodes]]

    def hold(self, job: JobRequest, choice, start: float) -> None:
        for _node, gpus in choice:
            for gpu in gpus:
                self.free_at[gpu.gpu_id] = start + job.time_limit_s

    def take_now(self, job: JobRequest, choice, now: float) -> None:
        self.hold(job, choice, now)
        for node, _ in choice:
            self.cpus_free[node.node_id] -= job.cpus
            self.memory_free[node.node_id] -= job.memory_bytes

    def earliest(self, job: JobRequest, not_before: float):
        """Earliest time >= ``not_before`` when the job fits by the time limits, with the choice."""
        times = sorted({not_before} | {t for t in self.free_at.values() if t > not_before})
        for t in times:
            choice = self.fit_at(job, t, check_resources=False)
            if choice:
                return t, choice
        return None, None


def order_fifo(queue: Iterable[JobRequest]) -> list[JobRequest]:
    """Operator boost first, then submit time, then id (stable ties)."""
    return sorted(queue, key=lambda j: (-j.priority_boost, j.submitted_at, j.job_id))


def schedule(queue: Sequence[JobRequest], nodes: Sequence[NodeView], now: float,
             policy: str = "fifo") -> Decision:
    """Decide which queued jobs start now and what the others should expect.

    Args:
        queue: every queued job, in any order.
        nodes: every node with its GPUs; a GPU's ``free_at`` > ``now`` is held.
        now: the clock, seconds since the epoch.
        policy: one of :data:`POLICIES`.

    Returns:
        A :class:`Decision`: placements to start now, and for every other
        job its queue position (1 = next), estimated start (epoch seconds,
        None if no node that is up could hold it) and pending reason.

    Raises:
        ValueError: unknown policy.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {', '.join(POLICIES)}")
    pool = _Pool(nodes)
    decision = Decision()
    blocked = False
    not_before = now
    for job in order_fifo(queue):
        if not blocked:
            choice = pool.fit_at(job, now, check_resources=True)
            if choice:
                pool.take_now(job, choice, now)
                decision.placements.append(Placement(
                    job.job_id, tuple((node.node_id, tuple(g.gpu_id for g in gpus)) for node, gpus in choice)))
                continue
            blocked = True
        position = len(decision.pending) + 1
        start, choice = pool.earliest(job, not_before)
        if start is not None:
            pool.hold(job, choice, start)
            not_before = start  # first come first served: no one passes the job ahead
        decision.pending.append(Pending(job.job_id, position, start, _reason(job, position, start, pool)))
    return decision


def _reason(job: JobRequest, position: int, start: float | None, pool: _Pool) -> str:
    if start is None:
        if not any(node_could_ever_hold(job, n) for n in pool.nodes if n.state == "up"):
            return f"waiting for a node that can hold {describe_request(job)} to be up"
        return f"waiting for {describe_request(job)}"
    if position == 1:
        return f"waiting for {describe_request(job)} to come free"
    ahead = position - 1
    return f"behind {ahead} job{'s' if ahead > 1 else ''} ahead in the queue (first come, first served)"
