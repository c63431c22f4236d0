"""The pure core: gang placement all or nothing, constraint matching, packing."""
import pytest

from apps.scheduling.core import GpuSlot, JobRequest, NodeView, schedule

NOW = 1_000_000.0


def node(node_id, n=8, model="H100-80GB", mem=81559, busy_until=(), state="up", cpus=64,
         memory=10**12, runtimes=("docker",)):
    gpus = [GpuSlot(node_id * 100 + i, model, mem, busy_until[i] if i < len(busy_until) else 0.0)
            for i in range(n)]
    return NodeView(node_id, f"n{node_id}", state, gpus, cpus_free=cpus, memory_free_mib=memory,
                    cpus_total=cpus, memory_total_mib=memory, runtimes=runtimes)


def job(job_id, gpus, nodes=1, limit=3600, **kw):
    return JobRequest(job_id=job_id, account="a", submitted_at=NOW - 100 + job_id, gpus_per_node=gpus,
                      nodes=nodes, time_limit_s=limit, **kw)


@pytest.mark.parametrize("policy", ["fifo", "easy", "e31"])
def test_it_places_a_gang_on_distinct_nodes_or_not_at_all(policy):
    nodes = [node(1, 8, busy_until=(NOW + 50,) * 4), node(2, 8), node(3, 8, busy_until=(NOW + 50,) * 6)]
    [placement] = schedule([job(1, 4, nodes=2)], nodes, NOW, policy).placements
    assert sorted(n for n, _ in placement.nodes) == [1, 2] and all(len(ids) == 4 for _, ids in placement.nodes)
    blocked = schedule([job(1, 4, nodes=3)], nodes, NOW, policy)
    assert blocked.placements == [] and blocked.pending[0].estimated_start == NOW + 50


@pytest.mark.parametrize("policy", ["fifo", "easy", "e31"])
def test_it_never_gives_a_gpu_twice(policy):
    queue = [job(i, (1, 2, 4, 8)[i % 4], nodes=1 + (i % 5 == 0)) for i in range(1, 40)]
    nodes = [node(i, 8) for i in range(1, 9)]
    d = schedule(queue, nodes, NOW, policy)
    gpus = [g for p in d.placements for _, ids in p.nodes for g in ids]
    assert len(gpus) == len(set(gpus)) <= 64
    placed = {p.job_id for p in d.placements}
    assert placed.isdisjoint(p.job_id for p in d.pending) and len(placed) + len(d.pending) == len(queue)


def test_it_packs_small_jobs_to_keep_whole_nodes_free():
    nodes = [node(1, 8), node(2, 8, busy_until=(NOW + 500,) * 5), node(3, 8)]
    d = schedule([job(1, 2), job(2, 1)], nodes, NOW, "e31")
    assert {p.nodes[0][0] for p in d.placements} == {2}
    d = schedule([job(1, 2), job(2, 1), job(3, 8, nodes=2)], nodes, NOW, "e31")
    assert {p.job_id: sorted(n for n, _ in p.nodes) for p in d.placements}[3] == [1, 3]


def test_it_matches_a_model_family_but_not_another_model():
    nodes = [node(1, 4, model="A100-80GB"), node(2, 4, model="H100-80GB")]
    d = schedule([job(1, 4, gpu_models=("H100",))], nodes, NOW, "e31")
    assert d.placements[0].nodes[0][0] == 2
    d = schedule([job(1, 4, gpu_models=("h100-80gb",)), job(2, 4, gpu_models=("A100-80GB",))], nodes, NOW, "e31")
    assert {p.job_id: p.nodes[0][0] for p in d.placements} == {1: 2, 2: 1}
    d = schedule([job(1, 4, gpu_models=("H100-94GB",))], nodes, NOW, "e31")
    assert d.placements == [] and d.pending[0].estimated_start is None
    assert d.pending[0].reason == "no node in the pool can hold 4 H100-94GB on one node"


def test_it_honours_gpu_memory_cpus_memory_and_runtime():
    nodes = [node(1, 4, model="A100-40GB", mem=40960, cpus=128, memory=2 * 10**12),
             node(2, 4, cpus=16, memory=10**11, runtimes=())]
    cases = [
        (dict(gpu_memory_mib=80000), 2),
        (dict(gpu_memory_mib=40000), 1),   # best fit ties go to the first node: both fit
        (dict(cpus=32), 1),
        (dict(memory_mib=5 * 10**11), 1),
        (dict(needs_runtime=True), 1),
        (dict(gpu_memory_mib=80000, needs_runtime=True), None),
    ]
    for kw, where in cases:
        d = schedule([job(1, 2, **kw)], nodes, NOW, "e31")
        assert (d.placements[0].nodes[0][0] if d.placements else None) == where, kw


def test_it_waits_for_cpus_held_by_running_jobs_without_giving_them_twice():
    busy = node(1, 4, busy_until=(NOW + 100,) * 2, cpus=64)
    busy.cpus_free = 8
    d = schedule([job(1, 2, cpus=16)], [busy], NOW, "e31")
    assert d.placements == []
    assert d.pending[0].estimated_start >= NOW and "16 CPUs" in d.pending[0].reason


@pytest.mark.parametrize("state", ["draining", "down"])
def test_it_starts_nothing_on_a_node_that_is_not_up(state):
    d = schedule([job(1, 1)], [node(1, 4, state=state)], NOW, "e31")
    assert d.placements == [] and d.pending[0].estimated_start is None
    assert d.pending[0].reason == "waiting for a node that can hold 1 GPU on one node to be up"
    d = schedule([job(1, 1)], [node(1, 4, state=state), node(2, 1)], NOW, "e31")
    assert d.placements[0].nodes == ((2, (200,)),)


@pytest.mark.parametrize("policy", ["fifo", "easy", "e31"])
def test_a_gang_without_a_model_waits_for_nodes_of_one_model(policy):
    """Issue 28 item 7: free GPUs on an A100 and an H100 node do not make a 2-node gang; it waits for
    the second H100 node, saying so, unless it asks for mixed models."""
    nodes = [node(1, 4, model="A100-40GB", mem=40960), node(2, 4), node(3, 4, busy_until=(NOW + 600,) * 4)]
    d = schedule([job(1, 4, nodes=2)], nodes, NOW, policy)
    assert d.placements == []
    [pend] = d.pending
    assert pend.estimated_start == NOW + 600 and set(pend.nodes) == {2, 3}
    assert "on each of 2 nodes of one GPU model: the GPUs free now are on nodes of different models" in pend.reason
    mixed = schedule([job(1, 4, nodes=2, mixed_models=True)], nodes, NOW, policy)
    assert sorted(n for n, _ in mixed.placements[0].nodes) == [1, 2]


def test_a_gang_of_one_kind_says_why_it_waits_when_gpus_are_free_across_models():
    nodes = [node(1, 4, model="A100-40GB", mem=40960), node(2, 4), node(3, 4, busy_until=(NOW + 600,) * 4)]
    [pend] = schedule([job(1, 4, nodes=2)], nodes, NOW, "e31").pending
    assert pend.reason == ("waiting for 4 GPUs on each of 2 nodes of one GPU model: the GPUs free now are on "
                           "nodes of different models (compute.mixed_models: true lets a gang mix them); "
                           "reserved from 13:56")


def test_a_gang_of_one_kind_takes_the_model_that_fits_best_and_never_mixes():
    nodes = [node(1, 8, model="A100-40GB", mem=40960), node(2, 8, model="A100-40GB", mem=40960),
             node(3, 4), node(4, 4), node(5, 4, model="L40S-48GB", mem=46068)]
    [placement] = schedule([job(1, 4, nodes=2)], nodes, NOW, "e31").placements
    assert sorted(n for n, _ in placement.nodes) == [3, 4]  # the H100 nodes: no GPU left over
    d = schedule([job(1, 4, nodes=2), job(2, 4, nodes=2), job(3, 4, nodes=2)], nodes, NOW, "e31")
    used = [sorted(n for n, _ in p.nodes) for p in d.placements]
    assert sorted(used) == [[1, 2], [1, 2], [3, 4]]  # never the L40S node with an H100 or A100 one


def test_a_gang_naming_models_is_not_held_to_one():
    nodes = [node(1, 4, model="H100-80GB"), node(2, 4, model="H100-94GB", mem=95830)]
    [placement] = schedule([job(1, 4, nodes=2, gpu_models=("H100",))], nodes, NOW, "e31").placements
    assert sorted(n for n, _ in placement.nodes) == [1, 2]


def test_a_gang_that_no_model_can_hold_alone_has_no_start_and_says_so():
    nodes = [node(1, 4, model="A100-40GB", mem=40960), node(2, 4)]
    [pend] = schedule([job(1, 4, nodes=2)], nodes, NOW, "e31").pending
    assert pend.estimated_start is None
    assert pend.reason == ("no 2 nodes of one GPU model in the pool can hold 4 GPUs on each of 2 nodes "
                           "(compute.mixed_models: true lets a gang mix models)")
