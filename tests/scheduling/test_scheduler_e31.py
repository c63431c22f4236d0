"""Policy e31: multifactor order, reservations for the top jobs, backfill by prediction, estimates, reasons."""
import random
from dataclasses import replace

import pytest

from apps.scheduling.core import GpuSlot, JobRequest, NodeView, PolicyConfig, schedule
from apps.scheduling.simulator.engine import ReplayJob
from apps.scheduling.simulator.engine import replay_jobs as replay

NOW = 1_000_000.0


def node(node_id, n=8, busy_until=(), expected=()):
    gpus = [GpuSlot(node_id * 100 + i, "H100-80GB", 81559, busy_until[i] if i < len(busy_until) else 0.0,
                    expected[i] if i < len(expected) else None) for i in range(n)]
    return NodeView(node_id, f"n{node_id}", "up", gpus, cpus_free=64, memory_free_mib=10**12,
                    cpus_total=64, memory_total_mib=10**12)


def job(job_id, gpus, nodes=1, limit=3600, submitted=None, account="a", **kw):
    submitted = NOW - 1000 + job_id if submitted is None else submitted
    return JobRequest(job_id=job_id, account=account, submitted_at=submitted, gpus_per_node=gpus, nodes=nodes,
                      time_limit_s=limit, **kw)


def random_case(rng, n_nodes=4, n_jobs=14):
    nodes = []
    for i in range(1, n_nodes + 1):
        ends = [NOW + rng.choice((0, 0, 120, 400, 1500)) for _ in range(8)]
        nodes.append(node(i, 8, busy_until=ends, expected=[e - rng.choice((0, 60, 100)) if e > NOW else None
                                                           for e in ends]))
    queue = [job(i, rng.choice((1, 2, 4, 8)), nodes=rng.choice((1, 1, 1, 2)), limit=rng.choice((100, 600, 3000)),
                 account=rng.choice("abc"), predicted_runtime_s=rng.choice((None, 50.0, 300.0)))
             for i in range(1, n_jobs + 1)]
    return nodes, queue


def planned(j):
    return min(j.predicted_runtime_s or j.time_limit_s, j.time_limit_s)


def test_backfill_delays_no_reservation_on_random_pools():
    """Replay each decision GPU by GPU: running jobs until their predicted end, placed jobs for their
    prediction, reservations from their start; at no time does a node give more GPUs than it has."""
    rng = random.Random(5)
    checked = 0
    for _ in range(150):
        nodes, queue = random_case(rng)
        d = schedule(queue, nodes, NOW, PolicyConfig(name="e31", reservation_depth=3))
        by_id = {j.job_id: j for j in queue}
        for n in nodes:
            claims = [(g.expected_free_at or g.free_at, 1, NOW) for g in n.gpus if g.free_at > NOW]
            claims += [(NOW + planned(by_id[p.job_id]), len(ids), NOW)
                       for p in d.placements for nid, ids in p.nodes if nid == n.node_id]
            claims += [(r.start + planned(by_id[r.job_id]), by_id[r.job_id].gpus_per_node, r.start)
                       for r in d.reservations for nid, _ in r.nodes if nid == n.node_id]
            for t in {NOW} | {start for _, _, start in claims}:
                in_use = sum(c for end, c, start in claims if start <= t < end)
                assert in_use <= len(n.gpus), (t, claims)
        checked += len(d.reservations)
    assert checked > 100


def test_a_long_job_does_not_pass_the_reserved_top_jobs_but_a_short_one_does():
    nodes = [node(1, 8, busy_until=(NOW + 600,) * 6)]
    big = job(1, 8, limit=3600)
    d = schedule([big, job(2, 2, limit=7200, predicted_runtime_s=5000)], nodes, NOW, "e31")
    assert d.placements == [] and d.reservations[0].start == NOW + 600
    d = schedule([big, job(2, 2, limit=600, predicted_runtime_s=300)], nodes, NOW, "e31")
    assert [p.job_id for p in d.placements] == [2]


def test_backfill_is_judged_by_time_limits_so_no_reservation_is_delayed():
    """SPEC §5: a job backfills only if, by its declared time limit, it delays no reservation,
    however short its predicted run."""
    nodes = [node(1, 8, busy_until=(NOW + 600,) * 6)]
    config = PolicyConfig(name="e31", reservation_depth=1, weight_slowdown=0)  # job 1 stays the head
    d = schedule([job(1, 8), job(2, 2, limit=7200, predicted_runtime_s=300)], nodes, NOW, config)
    assert d.placements == [] and d.reservations[0].job_id == 1
    d = schedule([job(1, 8), job(2, 2, limit=500, predicted_runtime_s=300)], nodes, NOW, config)
    assert [p.job_id for p in d.placements] == [2]  # ends by its limit before the head's start


def test_easy_plus_plus_judges_by_predictions_and_guards_an_old_head_by_time_limits():
    """With backfill_by_limit off, EASY++ (Tsafrir et al. 2007): backfill is judged by predictions,
    also on the head's GPUs; once the head has waited ``starvation_s`` it also keeps EASY's start by
    time limits, so backfill that outlives its prediction cannot push it further."""
    nodes = [node(1, 8, busy_until=(NOW + 600,) * 6)]
    short_by_prediction = job(2, 2, limit=7200, predicted_runtime_s=300)
    config = PolicyConfig(name="e31", reservation_depth=1, weight_slowdown=0, backfill_by_limit=False)
    d = schedule([job(1, 8), short_by_prediction], nodes, NOW, config)
    assert [p.job_id for p in d.placements] == [2]
    old_head = job(1, 8, submitted=NOW - config.starvation_s)
    d = schedule([old_head, short_by_prediction], nodes, NOW, config)
    assert d.placements == [] and d.reservations[0].start == NOW + 600
    assert d.pending[1].reason == "waiting for 2 GPUs on one node that no reserved job needs first"
    d = schedule([old_head, job(2, 2, limit=500, predicted_runtime_s=300)], nodes, NOW, config)
    assert [p.job_id for p in d.placements] == [2]  # ends by its limit before the head's start
    d = schedule([job(1, 8), short_by_prediction], nodes, NOW, replace(config, backfill_by_limit=True))
    assert d.placements == []  # the default rule


def test_backfill_tries_the_shortest_predicted_job_first_and_positions_keep_priority_order():
    nodes = [node(1, 8, busy_until=(NOW + 600,) * 6)]
    queue = [job(1, 8), job(2, 2, limit=500, predicted_runtime_s=400), job(3, 2, limit=500, predicted_runtime_s=100)]
    config = PolicyConfig(name="e31", reservation_depth=1, weight_slowdown=0,  # priority = submit order
                          backfill_order="shortest")
    d = schedule(queue, nodes, NOW, config)
    assert [p.job_id for p in d.placements] == [3]
    assert [(p.job_id, p.queue_position) for p in d.pending] == [(1, 1), (2, 2)]
    d = schedule(queue, nodes, NOW, replace(config, backfill_order="priority"))
    assert [p.job_id for p in d.placements] == [2]


def test_a_short_job_that_waited_long_for_its_run_goes_before_a_long_one_of_the_same_age():
    """The slowdown factor (Maui's expansion factor): wait over planned run."""
    nodes = [node(1, 8, busy_until=(NOW + 600,) * 8)]
    queue = [job(1, 8, submitted=NOW - 3000, predicted_runtime_s=3000),
             job(2, 8, submitted=NOW - 3000, predicted_runtime_s=60)]
    d = schedule(queue, nodes, NOW, PolicyConfig(name="e31", reservation_depth=1))
    assert [p.job_id for p in d.pending] == [2, 1] and d.reservations[0].job_id == 2
    d = schedule(queue, nodes, NOW, PolicyConfig(name="e31", reservation_depth=1, weight_slowdown=0))
    assert [p.job_id for p in d.pending] == [1, 2]


def stream_with_one_big_job(mispredict):
    """16 GPUs; a 1-GPU job arrives every 20 s forever (about 85 % load) from light accounts;
    one 16-GPU job from a heavy account arrives at t=300."""
    rng = random.Random(3)
    jobs, t, i = [], NOW, 1
    while t < NOW + 20_000:
        run = rng.uniform(100, 300)
        if mispredict and i % 5 == 0:
            run = 590  # runs far past what the account's history predicts
        jobs.append(ReplayJob(job(i, 1, limit=600, submitted=t, account=f"light{i % 5}"), run))
        t += 20
        i += 1
    jobs.append(ReplayJob(job(10**6, 8, nodes=2, limit=3600, submitted=NOW + 300, account="heavy"), 3000))
    return jobs, [node(1), node(2)]


STARVATION_S = 3000.0


@pytest.mark.parametrize("mispredict", [False, True])
@pytest.mark.parametrize("policy", ["easy", PolicyConfig(name="e31", starvation_s=STARVATION_S)])
def test_no_job_waits_forever_next_to_a_stream_of_small_jobs(policy, mispredict):
    """The bound: under easy the big job heads the queue at once; under e31 its heavy account puts it
    behind every light job until it has waited ``starvation_s``, then it goes first. Heading the
    queue, it gets the head reservation, which backfill may not delay by the small jobs' time limits
    (600 s): it starts within one time limit of what runs (plus one small job's)."""
    jobs, nodes = stream_with_one_big_job(mispredict)
    result = replay(jobs, nodes, policy, until=NOW + 20_000, usage={"heavy": 10**9})
    assert 10**6 in result.started, "the big job starved"
    bound = (0 if policy == "easy" else STARVATION_S) + 2 * 600
    assert result.started[10**6] - (NOW + 300) <= bound
    assert len(result.started) > 0.9 * len(jobs)  # and the small jobs kept flowing


def test_a_job_waiting_past_the_starvation_age_goes_first_whatever_its_share():
    nodes = [node(1, 8, busy_until=(NOW + 60,) * 8)]
    old = job(1, 8, account="heavy", submitted=NOW - 90_000)
    young = job(2, 8, account="light", submitted=NOW - 10)
    d = schedule([young, old], nodes, NOW, "e31", usage={"heavy": 10**9, "light": 0})
    assert [p.job_id for p in d.pending] == [1, 2]
    d = schedule([young, replace(old, submitted_at=NOW - 20)], nodes, NOW, "e31", usage={"heavy": 10**9})
    assert [p.job_id for p in d.pending] == [2, 1]


def test_a_heavy_accounts_job_goes_after_a_light_accounts_job_of_the_same_age():
    nodes = [node(1, 8, busy_until=(NOW + 60,) * 8)]
    queue = [job(1, 4, account="heavy", submitted=NOW - 100), job(2, 4, account="light", submitted=NOW - 100)]
    d = schedule(queue, nodes, NOW, PolicyConfig(name="e31", reservation_depth=1), usage={"heavy": 5e6, "light": 1e5})
    assert [(p.job_id, p.queue_position) for p in d.pending] == [(2, 1), (1, 2)]
    assert d.pending[1].reason.endswith("account over its fair share")
    d = schedule(queue, nodes, NOW, "e31", usage={})
    assert [p.job_id for p in d.pending] == [1, 2]  # no usage: same priority, ties by id


def test_positions_are_stable_ties_by_submit_time_then_id():
    nodes = [node(1, 8, busy_until=(NOW + 60,) * 8)]
    queue = [job(5, 1, submitted=NOW - 50), job(3, 1, submitted=NOW - 50), job(9, 1, submitted=NOW - 70)]
    for policy in ("fifo", "easy", "e31"):
        for shuffled in (queue, queue[::-1], queue[1:] + queue[:1]):
            d = schedule(shuffled, nodes, NOW, policy)
            assert [(p.job_id, p.queue_position) for p in d.pending] == [(9, 1), (3, 2), (5, 3)], policy


def test_it_plans_with_predictions_and_repairs_when_a_job_outlives_one():
    nodes = [node(1, 8, busy_until=(NOW + 3600,) * 8, expected=(NOW + 600,) * 8)]
    queue = [job(1, 8, predicted_runtime_s=100.0), job(2, 8, predicted_runtime_s=100.0)]
    d = schedule(queue, nodes, NOW, "e31")
    assert [p.estimated_start for p in d.pending] == [NOW + 600, NOW + 700]
    assert schedule(queue, nodes, NOW, "easy").pending[0].estimated_start == NOW + 3600
    # The running job is still there 900 s later, 300 s past its prediction: the plan moves, never into
    # the past and never beyond the time limit.
    later = schedule(queue, nodes, NOW + 900, "e31")
    assert later.pending[0].estimated_start == NOW + 900 + 300
    much_later = schedule(queue, nodes, NOW + 3500, "e31")
    assert much_later.pending[0].estimated_start == NOW + 3600


@pytest.mark.parametrize("policy", ["fifo", "easy", "e31"])
def test_estimates_are_never_in_the_past_and_a_job_that_can_start_is_placed(policy):
    rng = random.Random(11)
    for _ in range(100):
        nodes, queue = random_case(rng)
        d = schedule(queue, nodes, NOW, policy)
        assert all(p.estimated_start is None or p.estimated_start >= NOW for p in d.pending)
        assert [p.queue_position for p in d.pending] == list(range(1, len(d.pending) + 1))
        assert all(p.reason and "None" not in p.reason for p in d.pending)
    d = schedule([job(1, 1)], [node(1)], NOW, policy)
    assert [p.job_id for p in d.placements] == [1] and d.pending == []


def test_reasons_are_plain_words():
    nodes = [node(1, 8, busy_until=(NOW + 3 * 3600,) * 8)]
    queue = [job(i, 8, account="light" if i < 6 else "heavy", submitted=NOW - 100) for i in range(1, 8)]
    d = schedule(queue, nodes, NOW, PolicyConfig(name="e31", reservation_depth=1),
                 usage={"heavy": 1e7, "light": 1.0})
    first, second, *_, last = d.pending
    assert first.reason == "waiting for 8 GPUs on one node; reserved from 16:46"
    assert second.reason == "behind 1 job of higher priority"
    assert last.reason == "behind 6 jobs of higher priority; account over its fair share"
    assert schedule(queue[:2], nodes, NOW, "fifo").pending[1].reason == \
        "behind 1 job ahead in the queue (first come, first served)"
