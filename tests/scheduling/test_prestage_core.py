"""Issue 14 item 5 in the pure core: planned nodes per queued job, which jobs pre-stage, cache affinity."""
from dataclasses import replace

import pytest

from apps.scheduling.core import GpuSlot, JobRequest, NodeView, schedule
from apps.scheduling.core.prestage import prestage_targets, staging_seconds

NOW = 1_000_000.0
GB = 10**9


def node(node_id, n=4, busy_until=(), cached=(), rate=None):
    gpus = [GpuSlot(node_id * 100 + i, "H100-80GB", 81559, busy_until[i] if i < len(busy_until) else 0.0)
            for i in range(n)]
    return NodeView(node_id, f"n{node_id}", "up", gpus, cpus_free=64, memory_free_mib=10**6, cpus_total=64,
                    memory_total_mib=10**6, cached=frozenset(cached), staging_rate_bps=rate)


def job(job_id, gpus, limit=3600, inputs=("ds",), input_bytes=GB, **kw):
    return JobRequest(job_id=job_id, account="a", submitted_at=NOW - 100 + job_id, gpus_per_node=gpus, nodes=1,
                      time_limit_s=limit, inputs=inputs, input_bytes=input_bytes, **kw)


@pytest.mark.parametrize("policy", ["fifo", "easy", "e31"])
def test_cache_affinity_breaks_a_tie_between_equally_good_nodes(policy):
    assert schedule([job(1, 2)], [node(1), node(2)], NOW, policy).placements[0].nodes[0][0] == 1  # by name
    d = schedule([job(1, 2)], [node(1), node(2, cached={"ds"})], NOW, policy)
    assert d.placements[0].nodes[0][0] == 2
    d = schedule([job(1, 2, inputs=())], [node(1), node(2, cached={"ds"})], NOW, policy)
    assert d.placements[0].nodes[0][0] == 1  # no inputs: no preference


@pytest.mark.parametrize("policy", ["fifo", "easy", "e31"])
def test_cache_affinity_never_beats_best_fit(policy):
    # node 1 has exactly 2 GPUs free: best fit puts the job there even though node 2 holds its data
    nodes = [node(1, busy_until=(NOW + 50, NOW + 50)), node(2, cached={"ds"})]
    assert schedule([job(1, 2)], nodes, NOW, policy).placements[0].nodes[0][0] == 1


def test_a_reservation_prefers_the_node_with_the_cache_among_equal_ones():
    nodes = [node(1, busy_until=(NOW + 50,) * 4), node(2, busy_until=(NOW + 50,) * 4, cached={"ds"})]
    d = schedule([job(1, 4)], nodes, NOW, "easy")
    assert d.reservations[0].nodes[0][0] == 2 and d.pending[0].nodes == (2,)


@pytest.mark.parametrize("policy", ["fifo", "easy", "e31"])
def test_every_queued_job_with_a_start_has_its_planned_nodes(policy):
    nodes = [node(1, busy_until=(NOW + 100,) * 4), node(2, busy_until=(NOW + 300,) * 4)]
    queue = [job(1, 4, limit=1000), job(2, 4, limit=1000), job(3, 4, limit=1000)]
    d = schedule(queue, nodes, NOW, policy)
    by_id = {p.job_id: p for p in d.pending}
    assert by_id[1].nodes == (1,) and by_id[1].estimated_start == NOW + 100
    assert by_id[2].nodes == (2,) and by_id[2].estimated_start == NOW + 300
    assert by_id[3].nodes == (1,) and by_id[3].estimated_start == NOW + 1100


def test_staging_seconds_use_the_slowest_planned_node():
    assert staging_seconds(GB, [1, 2], {1: 2e8, 2: None}, 1e8) == 10.0
    assert staging_seconds(GB, [1], {1: 2e8}, 1e8) == 5.0


def _plan(queue, nodes, **kw):
    d = schedule(queue, nodes, NOW, "easy")
    return d, prestage_targets(d, {j.job_id: j for j in queue}, nodes, NOW, **kw)


def test_a_non_reserved_job_whose_start_is_near_is_pre_staged_and_a_far_one_is_not():
    nodes = [node(1, busy_until=(NOW + 100,) * 4), node(2, busy_until=(NOW + 300,) * 4)]
    queue = [job(1, 4, limit=1000), job(2, 4, limit=1000, input_bytes=400 * 10**6), job(3, 4, limit=1000)]
    # rate 1 MB/s: job 2's 400 MB take 400 s and it starts in 300 s: near; job 3 (1 GB, 1000 s) starts in
    # 1,100 s: far; job 1 holds the reservation: always
    d, plan = _plan(queue, nodes, default_rate_bps=1e6)
    assert [p.job_id for p in d.pending if p.job_id == 1] == [1] and d.reservations[0].job_id == 1
    assert plan == [(1, [1]), (2, [2])]
    # a node's measured rate counts before the default: node 2 at 10 MB/s stages job 2 in 40 s: far
    nodes[1] = replace(nodes[1], staging_rate_bps=10e6)
    assert _plan(queue, nodes, default_rate_bps=1e6)[1] == [(1, [1])]


def test_the_pre_stage_plan_is_bounded_per_node_and_per_cycle():
    nodes = [node(1, busy_until=(NOW + 100,) * 4)]
    queue = [job(i, 1, limit=10) for i in range(1, 20)]  # 1 GB at 1 B/s: every start is near
    _, plan = _plan(queue, nodes, default_rate_bps=1.0, per_node=3)
    assert [j for j, _ in plan] == [1, 2, 3]  # the reserved job, then by likely start
    _, plan = _plan(queue, nodes, default_rate_bps=1.0, per_node=100, per_cycle=5)
    assert len(plan) == 5


def test_jobs_without_inputs_are_never_pre_staged():
    nodes = [node(1, busy_until=(NOW + 100,) * 4)]
    assert _plan([job(1, 4, inputs=())], nodes, default_rate_bps=1.0)[1] == []
