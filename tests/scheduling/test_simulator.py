"""The trace simulator: SWF parsing, the GPU mapping, metrics, a hand-checked FIFO replay, the command."""
import gzip
import io
import json

import pytest
from django.core.management import call_command

from apps.scheduling.core import UsageLedger, charge, held_until, predict_runtime, remember_run
from apps.scheduling.simulator import (
    bounded_slowdown,
    jain_index,
    load_jobs,
    map_job,
    parse_line,
    percentile,
    read_swf,
    recorded_trace,
    replay,
    simulate_trace,
    size_class,
)

# id submit wait run alloc cpu mem req_procs req_time req_mem status user group exe queue part prec think
TINY = """\
; Version: 2.2
; Computer: hand-made test machine
; MaxNodes: 2
; MaxProcs: 4
;
    1      0   0  100  2 -1 -1  2  200 -1 1 1 1 -1 -1 -1 -1 -1
    2     10  90   50  4 -1 -1  4  100 -1 1 2 2 -1 -1 -1 -1 -1

    3     20 130   30  1 -1 -1  1   60 -1 1 1 1 -1 -1 -1 -1 -1
    4    160   0   40  1 -1 -1  1   -1 -1 1 3 3 -1 -1 -1 -1 -1
    5    170   0   -1  1 -1 -1  1   60 -1 5 3 3 -1 -1 -1 -1 -1
    6    170   0   10 -1 -1 -1 -1   60 -1 5 3 3 -1 -1 -1 -1 -1
    7    200   0  500  2 -1 -1  2  100 -1 0 2 2 -1 -1 -1 -1 -1
"""
# By hand, 2 nodes x 2 GPUs, fifo:
# t=0   job 1 (2 GPUs, limit 200) starts on one node, ends 100.
# t=10  job 2 (4 GPUs = 2 whole nodes) waits; estimate = job 1's limit = 200.
# t=20  job 3 (1 GPU) waits behind job 2; estimate = 200 + job 2's limit 100 = 300.
# t=100 job 1 ends, job 2 starts (wait 90), ends 150.
# t=150 job 2 ends, job 3 starts (wait 130), ends 180.
# t=160 job 4 (no limit: limit = run 40) starts at once.
# t=170 jobs 5 (run -1) and 6 (processors -1, allocated and requested) are skipped.
# t=200 job 7 (run 500 cut at its limit 100) starts at once, ends 300.
WAITS = {1: 0, 2: 90, 3: 130, 4: 0, 7: 0}
ESTIMATES = {1: 0, 2: 200, 3: 300, 4: 160, 7: 200}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.swf"
    path.write_text(TINY)
    return path


@pytest.fixture
def tiny_gz(tmp_path):
    path = tmp_path / "tiny.swf.gz"  # gzip is found by magic bytes; test a misleading name too
    path.write_bytes(gzip.compress(TINY.encode()))
    other = tmp_path / "tiny-gzip.swf"
    other.write_bytes(gzip.compress(TINY.encode()))
    return path, other


def test_parse_skips_comments_and_blanks_and_keeps_minus_one():
    assert parse_line("; Version: 2.2") is None
    assert parse_line("   ") is None
    rec = parse_line("  4  160  0  40  1 -1 -1  1  -1 -1 1 3 3 -1 -1 -1 -1 -1")
    assert (rec.job_id, rec.submit, rec.run, rec.processors, rec.requested_time, rec.user) == (4, 160, 40, 1, -1, 3)


def test_gzip_and_plain_read_the_same(tiny, tiny_gz):
    plain = list(read_swf(tiny))
    assert [r.job_id for r in plain] == [1, 2, 3, 4, 5, 6, 7]
    assert list(read_swf(tiny_gz[0])) == plain
    assert list(read_swf(tiny_gz[1])) == plain


def test_mapping_small_job_on_one_node_large_on_whole_nodes():
    small = map_job(parse_line("1 0 0 100 3 -1 -1 3 200 -1 1 1 1 -1 -1 -1 -1 -1"), 8)
    assert (small.gpus_per_node, small.nodes, small.gpus_held) == (3, 1, 3)
    exact = map_job(parse_line("1 0 0 100 8 -1 -1 8 200 -1 1 1 1 -1 -1 -1 -1 -1"), 8)
    assert (exact.gpus_per_node, exact.nodes) == (8, 1)
    large = map_job(parse_line("1 0 0 100 9 -1 -1 9 200 -1 1 1 1 -1 -1 -1 -1 -1"), 8)
    assert (large.gpus, large.gpus_per_node, large.nodes, large.gpus_held) == (9, 8, 2, 16)
    one_gpu_nodes = map_job(parse_line("1 0 0 100 25 -1 -1 25 200 -1 1 1 1 -1 -1 -1 -1 -1"), 1)
    assert (one_gpu_nodes.gpus_per_node, one_gpu_nodes.nodes) == (1, 25)


def test_mapping_time_limit_fallback_and_run_cut_at_limit():
    no_limit = map_job(parse_line("1 0 0 40 1 -1 -1 1 -1 -1 1 1 1 -1 -1 -1 -1 -1"), 8)
    assert (no_limit.time_limit_s, no_limit.run_s) == (40, 40)
    over = map_job(parse_line("1 0 0 500 1 -1 -1 1 100 -1 1 7 1 -1 -1 -1 -1 -1"), 8)
    assert (over.time_limit_s, over.run_s, over.account) == (100, 100, "7")
    fallback = map_job(parse_line("1 0 0 40 -1 -1 -1 16 60 -1 5 1 1 -1 -1 -1 -1 -1"), 8)
    assert (fallback.gpus, fallback.nodes) == (16, 2)  # allocated unknown: the requested processors
    zero = map_job(parse_line("1 0 0 0 1 -1 -1 1 -1 -1 1 1 1 -1 -1 -1 -1 -1"), 8)
    assert (zero.time_limit_s, zero.run_s) == (1, 0)


def test_load_sorts_skips_and_limits(tiny, tmp_path):
    jobs, skipped = load_jobs(tiny, 2, 2)
    assert [j.job_id for j in jobs] == [1, 2, 3, 4, 7]
    assert skipped == {"run<0": 1, "processors<=0": 1}
    jobs, skipped = load_jobs(tiny, 2, 2, limit=3)
    assert [j.job_id for j in jobs] == [1, 2, 3] and skipped == {}
    jobs, skipped = load_jobs(tiny, 1, 2)  # job 2 needs 4 one-GPU nodes
    assert 2 not in [j.job_id for j in jobs] and skipped["larger than the pool"] == 1
    shuffled = tmp_path / "shuffled.swf"
    shuffled.write_text("9 50 0 1 1 -1 -1 1 9 -1 1 1 1 -1 -1 -1 -1 -1\n8 50 0 1 1 -1 -1 1 9 -1 1 1 1 -1 -1 -1 -1 -1\n"
                        "3 10 0 1 1 -1 -1 1 9 -1 1 1 1 -1 -1 -1 -1 -1\n")
    assert [j.job_id for j in load_jobs(shuffled, 8, 1)[0]] == [3, 8, 9]


def test_bounded_slowdown():
    assert bounded_slowdown(0, 100) == 1.0
    assert bounded_slowdown(90, 50) == pytest.approx(2.8)
    assert bounded_slowdown(20, 1) == pytest.approx(2.1)  # tau = 10 s: (20 + 1) / 10
    assert bounded_slowdown(5, 0) == 1.0  # never below 1


def test_jain_index():
    assert jain_index([]) is None
    assert jain_index([3, 3, 3]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0]) == pytest.approx(1 / 3)
    assert jain_index([1, 2]) == pytest.approx(9 / 10)
    assert jain_index([0, 0]) == 1.0


def test_percentile_and_size_class():
    assert percentile([], 50) is None
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    assert [size_class(n) for n in (1, 2, 8, 9, 128)] == ["1", "2-8", "2-8", "9+", "9+"]


def test_the_replay_uses_the_live_sites_ledger_predictor_and_held_slots():
    """One set of input functions (issue 14 item 1): the core's, which the live adapter calls too."""
    assert predict_runtime([], 100) == 100.0  # no history: the time limit
    assert predict_runtime([40], 100) == 40
    assert predict_runtime(remember_run(remember_run([10], 30), 50), 100) == 40  # last two
    assert predict_runtime([300, 500], 100) == 100  # capped by the limit
    ledger = UsageLedger(half_life_s=100)
    ledger.add("a", 80, at=0)
    assert ledger.snapshot(100) == {"a": pytest.approx(40)}
    ledger.add("a", 10, at=200)
    assert ledger.snapshot(200) == {"a": pytest.approx(30)}
    assert charge(80, 0, 10, 200, 100) == (pytest.approx(30), 200)
    assert held_until(0, 100, 30, now=0) == (100, 30, 0)
    assert held_until(0, 100, None, now=150) == (151, None, 0)  # past its limit, not yet released


def test_tiny_trace_fifo_replay_matches_the_hand_schedule(tiny):
    jobs, _ = load_jobs(tiny, 2, 2)
    result = replay(jobs, 2, 2, "fifo")
    by_id = {o.job_id: o for o in result.outcomes}
    assert {j: o.wait_s for j, o in by_id.items()} == WAITS
    assert {j: o.first_estimate for j, o in by_id.items()} == ESTIMATES
    # one cycle per distinct event time with a job queued (180 and 300 only end runs)
    assert len(result.cycle_s) == len({0, 10, 20, 100, 150, 160, 200})


def test_tiny_trace_figures(tiny):
    out = simulate_trace(tiny, "fifo")
    assert (out["nodes"], out["gpus_per_node"], out["jobs"], out["skipped"]) == (2, 2, 5, 2)
    # work: 2x100 + 4x50 + 1x30 + 1x40 + 2x100 = 670 GPU-s over 4 GPUs x (300 - 0) s
    assert out["utilisation"] == pytest.approx(670 / 1200, abs=1e-4)
    assert out["wait_mean_s"] == 44.0 and out["wait_max_s"] == 130.0 and out["wait_p50_s"] == 0.0
    assert out["bsld_mean"] == pytest.approx((1 + 2.8 + 160 / 30 + 1 + 1) / 5, abs=1e-3)
    assert out["by_size"]["1"] == {"jobs": 2, "wait_mean_s": 65.0, "wait_max_s": 130.0,
                                   "bsld_mean": pytest.approx((160 / 30 + 1) / 2, abs=1e-3)}
    assert out["by_size"]["9+"]["jobs"] == 0
    assert out["estimate_within_60s"] == 0.6  # jobs 1, 4, 7 started on arrival; 2 and 3 off by 100 and 150
    assert out["estimate_within_60s_waited"] == 0.0
    assert out["estimate_abs_error_median_s"] == 0.0
    assert out["estimate_abs_error_median_waited_s"] == 125.0  # jobs 2 and 3: 100 and 150
    assert out["worst_account_bsld"] is None  # no account has 10 jobs


def test_recorded_figures_use_the_trace_waits(tiny):
    out = recorded_trace(tiny)
    assert out["policy"] == "recorded" and out["jobs"] == 5
    assert out["wait_mean_s"] == 44.0  # the waits written in field 3 are the hand schedule's


JSON_KEYS = {"trace", "policy", "jobs", "skipped", "nodes", "gpus_per_node", "utilisation", "wait_mean_s",
             "wait_p50_s", "wait_p95_s", "wait_max_s", "bsld_mean", "bsld_p95", "by_size", "worst_account_bsld",
             "jain_accounts", "estimate_within_60s", "estimate_within_60s_waited", "estimate_abs_error_median_s",
             "estimate_waited_within", "estimate_waited_median_error_s", "estimate_waited_before",
             "cycle_ms_p50", "cycle_ms_max", "wall_s"}


def test_command_prints_json_without_the_database(tiny_gz):
    out = io.StringIO()
    call_command("simulate", str(tiny_gz[0]), "--format", "json", "--limit", "50", stdout=out)
    result = json.loads(out.getvalue())
    assert JSON_KEYS <= set(result)
    assert set(result["by_size"]) == {"1", "2-8", "9+"}
    assert set(result["by_size"]["2-8"]) >= {"jobs", "wait_mean_s", "wait_max_s", "bsld_mean"}
    assert result["policy"] == "fifo" and result["jobs"] == 5


def test_command_table_and_options(tiny):
    out = io.StringIO()
    call_command("simulate", str(tiny), "--nodes", "4", "--gpus-per-node", "1", stdout=out)
    text = out.getvalue()
    assert "bsld_mean" in text and "GPUs" in text and "nodes" in text


def test_command_rejects_unknown_policy(tiny):
    from django.core.management import CommandError
    with pytest.raises(CommandError, match="policy"):
        call_command("simulate", str(tiny), "--policy", "no-such-policy", stdout=io.StringIO())


def test_command_runs_the_live_policy_settings(tiny, settings):
    from django.core.management import CommandError
    settings.E31_POLICY_OVERRIDES = {"reservation_depth": "two"}
    with pytest.raises(CommandError, match="E31_POLICY_RESERVATION_DEPTH"):
        call_command("simulate", str(tiny), "--policy", "e31", stdout=io.StringIO())
    settings.E31_POLICY_OVERRIDES = {"reservation_depth": "2"}
    out = io.StringIO()
    call_command("simulate", str(tiny), "--policy", "e31", "--format", "json", stdout=out)
    assert json.loads(out.getvalue())["policy"] == "e31"


KTH = "/work/shared/traces/KTH-SP2-1996-2.1-cln.swf.gz"


@pytest.mark.skipif(not __import__("os").path.exists(KTH), reason="shared traces not mounted")
def test_command_on_the_kth_trace_head():
    out = io.StringIO()
    call_command("simulate", KTH, "--format", "json", "--limit", "50", stdout=out)
    result = json.loads(out.getvalue())
    assert JSON_KEYS <= set(result)
    assert (result["jobs"], result["nodes"], result["gpus_per_node"]) == (50, 100, 1)
    assert 0 < result["utilisation"] <= 1
