"""Issue 14 item 2: the replay sizes jobs by what users requested, passes again after a run of 0 s,
and its ``easy`` is an independent EASY (benchmarks/easy_reference.py) start for start."""
import random
import sys
from pathlib import Path

from apps.scheduling.simulator import load_jobs, map_job, parse_line, replay, simulate_trace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "benchmarks"))

import easy_reference  # noqa: E402


def test_a_job_asks_the_requested_processors_field_8_not_the_allocated_field_5():
    # allocated 1 (a node count on some logs), requested 4: the job asks 4 GPUs
    rec = parse_line("1 0 0 100 1 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1")
    assert map_job(rec, 8).gpus == 4 and map_job(rec, 8).gpus_held == 4
    wide = map_job(parse_line("1 0 0 100 16 -1 -1 72 200 -1 1 1 1 -1 -1 -1 -1 -1"), 8)
    assert (wide.gpus, wide.gpus_per_node, wide.nodes) == (72, 8, 9)


def test_field_5_only_where_the_request_is_unknown_and_field_9_is_the_limit():
    job = map_job(parse_line("1 0 0 100 6 -1 -1 -1 300 -1 1 1 1 -1 -1 -1 -1 -1"), 8)
    assert (job.gpus, job.time_limit_s, job.run_s) == (6, 300, 100)


def test_sizing_by_field_8_changes_who_waits(tmp_path):
    # 1 node x 4 GPUs. Job 1 allocated 1 but requested 4: it fills the node, job 2 waits for it.
    path = tmp_path / "t.swf"
    path.write_text("; MaxNodes: 1\n; MaxProcs: 4\n"
                    "1 0 0 100 1 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n"
                    "2 10 0 50 1 -1 -1 1 60 -1 1 2 1 -1 -1 -1 -1 -1\n")
    out = replay(load_jobs(path, 4, 1)[0], 1, 4, "easy").outcomes
    assert {o.job_id: o.start for o in out} == {1: 0.0, 2: 100.0}


def test_a_run_of_0_s_ends_at_once_and_a_pass_runs_at_the_same_instant(tmp_path):
    # 1 node x 1 GPU: job 1 runs 0 s; job 2 arrived at the same time and starts at that very instant.
    # Job 3 (later) starts when job 2 ends, and a 0 s job 4 behind it frees the GPU for job 5 at once.
    path = tmp_path / "zero.swf"
    path.write_text("; MaxNodes: 1\n; MaxProcs: 1\n"
                    "1 0 0 0 1 -1 -1 1 60 -1 1 1 1 -1 -1 -1 -1 -1\n"
                    "2 0 0 30 1 -1 -1 1 60 -1 1 2 1 -1 -1 -1 -1 -1\n"
                    "3 5 0 20 1 -1 -1 1 60 -1 1 3 1 -1 -1 -1 -1 -1\n"
                    "4 6 0 0 1 -1 -1 1 60 -1 1 3 1 -1 -1 -1 -1 -1\n"
                    "5 7 0 10 1 -1 -1 1 60 -1 1 3 1 -1 -1 -1 -1 -1\n")
    for policy in ("fifo", "easy", "e31"):
        out = {o.job_id: o.start for o in replay(load_jobs(path, 1, 1)[0], 1, 1, policy).outcomes}
        assert out == {1: 0.0, 2: 0.0, 3: 30.0, 4: 50.0, 5: 50.0}, policy
    assert easy_reference.easy(easy_reference.read_jobs(path, 1, 1), 1, 1) == {1: 0, 2: 0, 3: 30, 4: 50, 5: 50}


def _random_trace(path, seed, jobs=250, procs=(1, 1, 2, 3, 4, 8, 12, 16, 24, 40)):
    rng = random.Random(seed)
    lines, t = ["; MaxNodes: 6", "; MaxProcs: 48"], 0
    for i in range(1, jobs + 1):
        t += int(rng.expovariate(1 / 30))
        limit = rng.choice((60, 300, 900, 3600))
        run = rng.choice((0, 0, int(limit * rng.uniform(0.05, 1.0)), limit))
        req = rng.choice(procs)
        alloc = rng.choice((req, -1, max(1, req // 8)))  # field 5 disagrees with field 8 at times
        lines.append(f"{i} {t} -1 {run} {alloc} -1 -1 {req} {limit} -1 1 {rng.randrange(5)} 1 -1 -1 -1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_easy_equals_an_independent_easy_start_for_start(tmp_path):
    for seed in (1, 2):
        path = _random_trace(tmp_path / f"r{seed}.swf", seed)
        ours = {o.job_id: o.start for o in replay(load_jobs(path, 8, 6)[0], 6, 8, "easy").outcomes}
        ref = easy_reference.easy(easy_reference.read_jobs(path, 8, 6), 6, 8)
        assert ours == {k: float(v) for k, v in ref.items()}, seed


def test_easy_matches_the_reference_on_the_kth_trace_head():
    trace = "/work/shared/traces/KTH-SP2-1996-2.1-cln.swf.gz"
    sim = simulate_trace(trace, "easy", nodes=100, gpus_per_node=1, limit=600)
    jobs = easy_reference.read_jobs(trace, 1, 100, 600)
    bsld, _wait = easy_reference.bsld_mean(jobs, easy_reference.easy(jobs, 100, 1))
    assert abs(sim["bsld_mean"] - bsld) <= 0.001 * bsld
