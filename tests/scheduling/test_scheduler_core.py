"""The pure scheduling core: gang placement, best fit, FIFO order, estimates."""
from apps.scheduling.core import GpuSlot, JobRequest, NodeView, schedule

NOW = 1_000_000.0


def node(node_id, n, model="H100-80GB", mem=81559, busy_until=(), state="up", cpus=64):
    gpus = [GpuSlot(node_id * 100 + i, model, mem, busy_until[i] if i < len(busy_until) else 0.0)
            for i in range(n)]
    return NodeView(node_id, f"n{node_id}", state, gpus, cpus_free=cpus, memory_free_mib=10**12,
                    cpus_total=cpus, memory_total_mib=10**12)


def job(job_id, gpus, nodes=1, limit=3600, submitted=0.0, **kw):
    return JobRequest(job_id=job_id, account="a", submitted_at=NOW - 1000 + submitted, gpus_per_node=gpus,
                      nodes=nodes, time_limit_s=limit, **kw)


def test_it_places_a_job_on_the_best_fitting_node():
    decision = schedule([job(1, 2)], [node(1, 8), node(2, 2)], NOW)
    assert decision.placements[0].nodes == ((2, (200, 201)),)


def test_it_places_gangs_all_or_nothing_across_nodes():
    decision = schedule([job(1, 4, nodes=2)], [node(1, 4), node(2, 4), node(3, 2)], NOW)
    [placement] = decision.placements
    assert sorted(n for n, _ in placement.nodes) == [1, 2]
    assert all(len(g) == 4 for _, g in placement.nodes)
    blocked = schedule([job(1, 4, nodes=3)], [node(1, 4), node(2, 4), node(3, 2)], NOW)
    assert blocked.placements == [] and blocked.pending[0].estimated_start is None


def test_it_honours_model_memory_and_node_state():
    nodes = [node(1, 4, model="A100-40GB", mem=40960), node(2, 4, state="draining"), node(3, 4, state="down")]
    d = schedule([job(1, 1, gpu_models=("H100",))], nodes, NOW)
    assert d.placements == []
    d = schedule([job(1, 1, gpu_memory_mib=80000)], nodes, NOW)
    assert d.placements == []
    d = schedule([job(1, 1, gpu_models=("a100",))], nodes, NOW)
    assert d.placements[0].nodes[0][0] == 1


def test_it_serves_first_come_first_and_the_head_blocks():
    nodes = [node(1, 4, busy_until=(NOW + 600, NOW + 600, 0, 0))]
    queue = [job(2, 1, submitted=5), job(1, 4, submitted=1)]
    d = schedule(queue, nodes, NOW)
    assert d.placements == []  # job 1 (first) needs all 4; job 2 waits behind it
    first, second = d.pending
    assert (first.job_id, first.queue_position, first.estimated_start) == (1, 1, NOW + 600)
    assert (second.job_id, second.queue_position) == (2, 2)
    assert second.estimated_start == NOW + 600 + 3600
    assert "behind 1 job" in second.reason


def test_it_starts_several_jobs_in_one_cycle_without_giving_a_gpu_twice():
    d = schedule([job(i, 1, submitted=i) for i in range(1, 7)], [node(1, 4), node(2, 2)], NOW)
    gpus = [g for p in d.placements for _, ids in p.nodes for g in ids]
    assert len(d.placements) == 6 and len(set(gpus)) == 6


def test_it_orders_ties_by_id():
    d = schedule([job(5, 4), job(3, 4)], [node(1, 4)], NOW)
    assert d.placements[0].job_id == 3 and d.pending[0].job_id == 5
