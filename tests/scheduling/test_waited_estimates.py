"""Estimates judged where users wait (issue 29 item 2) on hand-made outcomes whose answer is known:
jobs that waited 10 minutes or more, within max(60 s, 20 % of the wait), the median error of those
given an estimate, and how often the real start came first."""
from apps.scheduling.simulator.metrics import JobOutcome, waited_estimate_figures


def outcome(job_id: int, wait_s: float, estimate_after_submit_s: float | None) -> JobOutcome:
    return JobOutcome(job_id=job_id, account="a", submit=0.0, gpus=1, gpus_held=1, run_s=60.0, start=wait_s,
                      first_estimate=estimate_after_submit_s)


def test_the_waited_figures_of_a_known_set():
    done = [
        outcome(1, 1000, 1100),  # off by 100 s, within 200 s (20 % of 1000); started before the estimate
        outcome(2, 2000, 1500),  # off by 500 s, outside 400 s; started after
        outcome(3, 700, None),   # waited, never given an estimate: a miss
        outcome(4, 100, 5000),   # waited under 10 min: not judged here
        outcome(5, 600, 650),    # off by 50 s, within max(60 s, 120 s); started before
    ]
    assert waited_estimate_figures(done) == {
        "estimate_waited_jobs": 4, "estimate_waited_within": 0.5, "estimate_waited_median_error_s": 100.0,
        "estimate_waited_before": 0.6667}


def test_no_job_waited_long_enough():
    assert waited_estimate_figures([outcome(1, 30, 40)]) == {
        "estimate_waited_jobs": 0, "estimate_waited_within": None, "estimate_waited_median_error_s": None,
        "estimate_waited_before": None}
