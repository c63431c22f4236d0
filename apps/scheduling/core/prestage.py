"""Which queued jobs' inputs to fetch ahead, onto which nodes (issue 14 item 5). Pure: no Django.

A queued job with inputs is pre-staged, meter off, onto the node(s) the cycle's plan expects it
to start on (:attr:`~.types.Pending.nodes`) when

- it holds a reservation (the top blocked job(s): what pre-staging always reached), or
- its likely start is within its expected staging time: ``estimated_start - now <= input_bytes /
  rate``, the rate (bytes per second) being the slowest planned node's measured one
  (:attr:`~.types.NodeView.staging_rate_bps`) or ``default_rate_bps`` where a node has none.

Starting the download one staging time ahead means it is done about when the job starts; earlier
would hold cache space (and evict) for nothing if the plan moves. Bounded: at most ``per_node``
jobs per node and ``per_cycle`` jobs in all, taken reserved first, then by likely start
(a gang that would pass a node's bound is left out whole). The live cycle
(:mod:`apps.scheduling.adapter`) and the replay (:mod:`apps.scheduling.simulator.staging`) both
call :func:`prestage_targets`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from .types import Decision, JobRequest, NodeView

DEFAULT_PER_NODE = 4
DEFAULT_PER_CYCLE = 64


def staging_seconds(input_bytes: int, node_ids: Sequence[int], rates: Mapping[int, float | None],
                    default_rate_bps: float) -> float:
    """Expected seconds to download ``input_bytes`` onto every node of ``node_ids`` at once: bytes
    over the slowest node's rate (``rates[node]`` bytes/s, else ``default_rate_bps``)."""
    slowest = min((rates.get(n) or default_rate_bps for n in node_ids), default=default_rate_bps)
    return input_bytes / max(slowest, 1e-9)


def prestage_targets(decision: Decision, requests: Mapping[int, JobRequest], nodes: Sequence[NodeView],
                     now: float, *, default_rate_bps: float, per_node: int = DEFAULT_PER_NODE,
                     per_cycle: int = DEFAULT_PER_CYCLE) -> list[tuple[int, list[int]]]:
    """The pre-stage plan of one cycle: ``[(job_id, [node_id by rank])]``, in the order chosen.

    Args:
        decision: the cycle's decision (its reservations and pending jobs with their planned nodes).
        requests: the queued jobs by id; only those with ``inputs`` are pre-staged.
        nodes: the pool, for each node's measured staging rate.
        now: the cycle's clock, epoch seconds.
        default_rate_bps: bytes per second assumed where a node has no measured rate (> 0).
        per_node: at most this many jobs planned on one node.
        per_cycle: at most this many jobs in all.
    """
    rates = {n.node_id: n.staging_rate_bps for n in nodes}
    reserved = {r.job_id for r in decision.reservations}
    chosen: list[tuple[int, list[int]]] = []
    load: dict[int, int] = {}

    def take(job_id: int, node_ids: Sequence[int]) -> None:
        if len(chosen) >= per_cycle or not node_ids or any(load.get(n, 0) >= per_node for n in node_ids):
            return
        for n in node_ids:
            load[n] = load.get(n, 0) + 1
        chosen.append((job_id, list(node_ids)))

    for res in decision.reservations:
        job = requests.get(res.job_id)
        if job is not None and job.inputs:
            take(res.job_id, [n for n, _ in res.nodes])
    near = []
    for pend in decision.pending:
        job = requests.get(pend.job_id)
        if job is None or not job.inputs or pend.job_id in reserved or pend.estimated_start is None or not pend.nodes:
            continue
        horizon = staging_seconds(job.input_bytes, pend.nodes, rates, default_rate_bps)
        if pend.estimated_start - now <= horizon:
            near.append((pend.estimated_start, pend.queue_position, pend.job_id, pend.nodes))
    near.sort()
    for _start, _position, job_id, node_ids in near:
        if len(chosen) >= per_cycle:
            break
        take(job_id, node_ids)
    return chosen
