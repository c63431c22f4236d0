"""Issue 14 item 5 in the replay: staging on the meter, per-node caches, pre-staging, exact accounting."""
import io
import json

import pytest
from django.core.management import call_command

from apps.scheduling.core import JobRequest
from apps.scheduling.simulator import ReplayJob, replay_jobs, sim_nodes
from apps.scheduling.simulator.staging import DataConfig, StagingModel, data_sets, job_data

SIZES = {"d": 1000, "e": 500, "f": 6000}  # bytes; at 100 B/s: 10 s, 5 s, 60 s


def _job(job_id, submit, gpus, run, data, limit=200):
    return ReplayJob(JobRequest(job_id=job_id, account="a", submitted_at=submit, gpus_per_node=gpus, nodes=1,
                                time_limit_s=limit, inputs=(data,), input_bytes=SIZES[data]), run)


# One node of 2 GPUs. 1 (2 GPUs, 100 s, d) starts at 0 and stages d: 10 s x 2 GPUs. 2 (2 GPUs, 50 s, d)
# waits, starts at 110 with d in the cache: 0. 4 (2 GPUs, 10 s, f) starts at 160: without pre-staging it
# stages f on the meter, 60 s x 2 = 120 GPU-s; with it, f was fetched from 110 (4 became the reserved head,
# and its start 50 s away was within its 60 s of staging), 10 s were left: 20 GPU-s. 3 (1 GPU, e) stages 5 s.
TRACE = [_job(1, 0, 2, 100, "d"), _job(2, 5, 2, 50, "d"), _job(4, 6, 2, 10, "f"), _job(3, 200, 1, 30, "e")]


@pytest.mark.parametrize(("prestage", "gpu_s", "starts"), [
    (False, 20 + 0 + 120 + 5, {1: 0, 2: 110, 4: 160, 3: 230}),
    (True, 20 + 0 + 20 + 5, {1: 0, 2: 110, 4: 160, 3: 200}),
])
def test_staging_accounting_on_a_tiny_trace_is_exact(prestage, gpu_s, starts):
    model = StagingModel(DataConfig(prestage=prestage, affinity=True, rate_bps=100.0, cache_bytes=10_000),
                         sizes=SIZES)
    result = replay_jobs(TRACE, sim_nodes(1, 2), "easy", staging=model)
    assert result.started == starts
    assert model.staging_gpu_s == gpu_s
    assert model.staged == {1: 10.0, 2: 0.0, 4: 10.0 if prestage else 60.0, 3: 5.0}
    assert (model.hits, model.node_starts, model.partial) == (1, 4, 1 if prestage else 0)
    assert result.ended[4] == 160 + model.staged[4] + 10  # staging holds the GPUs before the run


def test_the_cache_evicts_the_least_recently_used_data_set():
    model = StagingModel(DataConfig(prestage=False, rate_bps=100.0, cache_bytes=6500), sizes=SIZES)
    trace = [_job(1, 0, 1, 10, "d"), _job(2, 20, 1, 10, "f"), _job(3, 40, 1, 10, "d")]
    replay_jobs(trace, sim_nodes(1, 1), "fifo", staging=model)
    assert model.evictions == 2 and model.hits == 0 and model.staged[3] == 10.0  # d went for f, then f for d


def test_generated_data_sets_are_deterministic_and_shared_by_an_account():
    config = DataConfig()
    sets = data_sets("u1", config)
    assert 1 <= len(sets) <= 3 and sets == data_sets("u1", config)
    assert all(config.size_min_bytes <= size <= config.size_max_bytes for _k, size in sets)
    assert {job_data(i, "u1", config) for i in range(50)} <= set(sets)


def test_simulate_data_prints_four_rows(tmp_path):
    trace = tmp_path / "t.swf"
    lines = ["; MaxNodes: 4", "; MaxProcs: 8"]
    for i in range(1, 41):  # id submit wait run procs cpu mem req_procs limit req_mem status user
        lines.append(f"{i} {i * 30} 0 {200 + 10 * (i % 7)} -1 -1 -1 {1 + i % 4} 600 -1 1 {1 + i % 3}")
    trace.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    call_command("simulate", str(trace), "--policy", "e31", "--data", "--format", "json", "--cache-gb", "50",
                 stdout=out)
    result = json.loads(out.getvalue())
    rows = result["rows"]
    assert [(r["prestage"], r["affinity"]) for r in rows] == [(False, False), (False, True), (True, False),
                                                              (True, True)]
    assert all(r["unstarted"] == 0 and 0 <= r["cache_hit_rate"] <= 1 for r in rows)
    assert result["data"]["cache_bytes"] == 50 * 10**9
