"""Pure helpers of the e31 policy: decay, fair share (Slurm classic), runtime prediction (Tsafrir et al. 2007)."""
import pytest

from apps.scheduling.core import (
    JobRequest,
    PolicyConfig,
    UsageLedger,
    decay,
    fairshare_factor,
    planned_end,
    policy_resolve,
    predict_runtime,
)
from apps.scheduling.core.priority import order_multifactor, priority

DAY = 86400.0


def test_decay_halves_per_half_life():
    assert decay(100.0, 7 * DAY, 7 * DAY) == pytest.approx(50.0)
    assert decay(100.0, 14 * DAY, 7 * DAY) == pytest.approx(25.0)
    assert decay(100.0, 0, 7 * DAY) == 100.0 and decay(100.0, 5, 0) == 0.0


def test_the_ledger_keeps_usage_incrementally_as_the_closed_form_sum():
    ledger = UsageLedger(half_life_s=DAY)
    charges = [(0.0, 100.0), (3600.0, 50.0), (2 * DAY, 10.0)]
    for at, gpu_seconds in charges:
        ledger.add("a", gpu_seconds, at)
    now = 3 * DAY
    expected = sum(decay(g, now - at, DAY) for at, g in charges)
    assert ledger.snapshot(now) == {"a": pytest.approx(expected)}


def test_fairshare_is_two_to_the_minus_usage_over_share():
    assert fairshare_factor(0, 1000, 4) == 1.0
    assert fairshare_factor(250, 1000, 4) == pytest.approx(0.5)   # used exactly its share
    assert fairshare_factor(1000, 1000, 4) == pytest.approx(2**-4)
    assert fairshare_factor(10, 0, 4) == 1.0


def test_prediction_is_the_mean_of_the_last_two_runs_capped_by_the_limit():
    assert predict_runtime([], 3600) == 3600.0
    assert predict_runtime([10.0, 100.0, 300.0], 3600) == 200.0
    assert predict_runtime([5000.0, 7000.0], 3600) == 3600.0
    assert predict_runtime([0.0], 3600) == 1.0


def test_a_gpu_past_its_prediction_is_planned_later_but_never_past_its_limit():
    now = 1000.0
    assert planned_end(0.0, None, now) == 0.0                 # free
    assert planned_end(5000.0, 2000.0, now) == 2000.0         # as predicted
    assert planned_end(5000.0, None, now) == 5000.0           # no prediction: the limit
    assert planned_end(5000.0, 960.0, now) == now + 60        # just overran: a minute more
    assert planned_end(5000.0, 100.0, now) == now + 900       # overran 900 s: as long again
    assert planned_end(1500.0, 100.0, now) == 1500.0          # capped by the time limit


def test_policies_by_name_and_unknown_ones_refused():
    assert policy_resolve("easy").name == "easy" and policy_resolve("e31").reservation_depth == 1
    with pytest.raises(ValueError, match="unknown scheduling policy 'sjf'"):
        policy_resolve("sjf")


def test_the_job_size_factor_lifts_wide_jobs_in_proportion_to_the_pool():
    """Slurm's job-size factor with ``PriorityFavorSmall=NO``: GPUs asked over the pool's GPUs,
    times ``weight_size``; so a wide job is not left behind every narrow one of the same age."""
    config = PolicyConfig(name="e31", weight_size=3000.0)
    narrow = JobRequest(1, "a", 0.0, 1, 1, 3600)
    wide = JobRequest(2, "a", 0.0, 8, 8, 3600)  # 64 of the pool's 128 GPUs
    base = priority(narrow, 100.0, config, 1.0, 128)
    assert priority(wide, 100.0, config, 1.0, 128) - base == pytest.approx(3000.0 * (64 - 1) / 128)
    no_size = PolicyConfig(name="e31", weight_size=0.0)
    assert priority(wide, 100.0, config, 1.0) == priority(wide, 100.0, no_size, 1.0)  # pool unknown: no factor
    order, _shares = order_multifactor([narrow, wide], 100.0, config, {}, 128)
    assert [j.job_id for j in order] == [2, 1]
    order, _shares = order_multifactor([narrow, wide], 100.0, no_size, {}, 128)
    assert [j.job_id for j in order] == [1, 2]
