"""EASY backfilling (Lifka 1995; Mu'alem & Feitelson 2001): the head's reservation is never delayed."""
import heapq
import random

from apps.scheduling.core import GpuSlot, JobRequest, NodeView, schedule
from apps.scheduling.simulator.engine import ReplayJob
from apps.scheduling.simulator.engine import replay_jobs as replay

NOW = 1_000_000.0


def node(node_id, n=4, busy_until=(), expected=()):
    gpus = [GpuSlot(node_id * 100 + i, "H100-80GB", 81559, busy_until[i] if i < len(busy_until) else 0.0,
                    expected[i] if i < len(expected) else None) for i in range(n)]
    return NodeView(node_id, f"n{node_id}", "up", gpus, cpus_free=64, memory_free_mib=10**12,
                    cpus_total=64, memory_total_mib=10**12)


def job(job_id, gpus, nodes=1, limit=3600, age=0.0, **kw):
    return JobRequest(job_id=job_id, account=kw.pop("account", "a"), submitted_at=NOW - 1000 + job_id - age,
                      gpus_per_node=gpus, nodes=nodes, time_limit_s=limit, **kw)


def pool_half_busy():
    """Two 4-GPU nodes; node 1 fully busy until +600, node 2 half busy until +600: 2 GPUs free now."""
    return [node(1, busy_until=(NOW + 600,) * 4), node(2, busy_until=(NOW + 600,) * 2)]


def test_it_reserves_for_the_head_at_its_shadow_time():
    d = schedule([job(1, 4, nodes=2), job(2, 1)], pool_half_busy(), NOW, "easy")
    [res] = d.reservations
    assert (res.job_id, res.start) == (1, NOW + 600)
    assert d.pending[0].reason.startswith("waiting for 4 GPUs on each of 2 nodes; reserved from ")


def test_a_short_job_backfills_and_a_long_one_does_not():
    head = job(1, 4, nodes=2)
    d = schedule([head, job(2, 2, limit=600), job(3, 2, limit=601)], pool_half_busy(), NOW, "easy")
    assert [p.job_id for p in d.placements] == [2]
    d = schedule([head, job(3, 2, limit=601)], pool_half_busy(), NOW, "easy")
    assert d.placements == []
    assert "that no reserved job needs first" in d.pending[1].reason


def test_a_long_job_backfills_on_gpus_the_head_does_not_need():
    nodes = pool_half_busy() + [node(3, 4)]
    d = schedule([job(1, 4, nodes=2), job(2, 2, limit=86400)], nodes, NOW, "easy")
    assert [p.job_id for p in d.placements] == [2]
    assert d.reservations[0].start == NOW + 600


def test_easy_plans_with_time_limits_not_predictions():
    nodes = [node(1, busy_until=(NOW + 600,) * 4, expected=(NOW + 60,) * 4), node(2, busy_until=(NOW + 600,) * 2)]
    d = schedule([job(1, 4, nodes=2), job(2, 2, limit=300, predicted_runtime_s=10)], nodes, NOW, "easy")
    assert d.reservations[0].start == NOW + 600 and [p.job_id for p in d.placements] == [2]


def test_backfill_never_delays_the_head_on_random_pools():
    rng = random.Random(7)
    for _ in range(200):
        nodes = [node(i, 4, busy_until=[NOW + rng.choice((0, 100, 300, 900)) for _ in range(4)]) for i in range(1, 5)]
        queue = [job(i, rng.choice((1, 2, 4)), nodes=rng.choice((1, 1, 2)), limit=rng.choice((50, 200, 1000)))
                 for i in range(1, 12)]
        d = schedule(queue, nodes, NOW, "easy")
        if not d.reservations:
            continue
        res = d.reservations[0]
        head = next(j for j in queue if j.job_id == res.job_id)
        # Occupy what was placed by its time limit, then the head alone must still start at its reservation.
        held = {g: NOW + next(j for j in queue if j.job_id == p.job_id).time_limit_s
                for p in d.placements for _, ids in p.nodes for g in ids}
        after = [NodeView(n.node_id, n.name, n.state, [GpuSlot(g.gpu_id, g.model, g.memory_mib,
                                                               max(g.free_at, held.get(g.gpu_id, 0.0)))
                                                       for g in n.gpus], 64, 10**12, 64, 10**12) for n in nodes]
        alone = schedule([head], after, NOW, "easy")
        start = alone.reservations[0].start if alone.reservations else NOW
        assert start <= res.start


def reference_easy(jobs, total):
    """Textbook EASY on ``total`` identical one-GPU nodes: counts only (Mu'alem & Feitelson 2001, fig. 1)."""
    arrivals = sorted(jobs, key=lambda j: (j.request.submitted_at, j.request.job_id))
    running, queue, free, started, i = [], [], total, {}, 0
    while i < len(arrivals) or running:
        t = min(arrivals[i].request.submitted_at if i < len(arrivals) else float("inf"),
                running[0][0] if running else float("inf"))
        while running and running[0][0] <= t:
            free += heapq.heappop(running)[1]
        while i < len(arrivals) and arrivals[i].request.submitted_at <= t:
            queue.append(arrivals[i])
            i += 1
        shadow = extra = None
        waiting = []
        for item in queue:
            r = item.request
            if shadow is None and r.nodes <= free or shadow is not None and r.nodes <= free and (
                    t + r.time_limit_s <= shadow or r.nodes <= extra):
                if shadow is not None and t + r.time_limit_s > shadow:
                    extra -= r.nodes
                free -= r.nodes
                started[r.job_id] = t
                heapq.heappush(running, (t + min(item.runtime_s, r.time_limit_s), r.nodes, t + r.time_limit_s))
                continue
            if shadow is None:
                avail = free
                for end in sorted({e for _, _, e in running}):
                    avail += sum(n for _, n, e in running if e == end)
                    if avail >= r.nodes:
                        shadow, extra = end, avail - r.nodes
                        break
            waiting.append(item)
        queue = waiting
    return started


def test_it_is_textbook_easy_on_one_gpu_nodes():
    rng = random.Random(31)
    jobs, t = [], NOW
    for i in range(1, 400):
        t += rng.expovariate(1 / 40)
        limit = rng.choice((60, 300, 900, 3600))
        jobs.append(ReplayJob(JobRequest(i, f"u{i % 7}", t, 1, rng.choice((1, 1, 2, 3, 5, 8, 12)), limit),
                              runtime_s=limit * rng.uniform(0.05, 1.0)))
    nodes = [node(i, 1) for i in range(16)]
    assert replay(jobs, nodes, "easy").started == reference_easy(jobs, 16)
