"""benchmarks/vs_slurm.py: the order of phases and how figures become ratios and goals (no systems started)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import vs_slurm  # noqa: E402


def test_phases_alternate_slurm_and_e31():
    assert vs_slurm.interleave(["default", "lowlat", "tuned"], ["production", "make-run"]) == [
        ("slurm", "default"), ("e31", "production"), ("slurm", "lowlat"), ("e31", "make-run"), ("slurm", "tuned")]


def test_summary_takes_slurms_best_profile_by_median_and_states_each_goal():
    results = {
        "slurm-default": [{"submit_rate": 400.0, "throughput": 3.0, "latency_median": 1.2, "latency_p95": 1.9},
                          {"submit_rate": 300.0, "throughput": 3.2, "latency_median": 1.4, "latency_p95": 2.0}],
        "slurm-lowlat": [{"submit_rate": 350.0, "throughput": 9.0, "latency_median": 0.5, "latency_p95": 0.9},
                         {"submit_rate": 340.0, "throughput": 9.5, "latency_median": 0.4, "latency_p95": 0.8}],
        "production": [{"submit_rate": 700.0, "throughput": 20.0, "latency_median": 0.03, "latency_p95": 0.09,
                        "submit_flat_ratio": 1.1},
                       {"submit_rate": 720.0, "throughput": 19.0, "latency_median": 0.06, "latency_p95": 0.2,
                        "submit_flat_ratio": 1.5}],
    }
    summary = vs_slurm.summarise(results, ["default", "lowlat"], ["production"])
    rate = summary["figures"]["submit_rate"]
    assert rate["slurm_best"] == "slurm-default"  # median 350 beats lowlat's 345
    assert rate["production"] == {"min": 700.0, "median": 710.0, "max": 720.0, "n": 2}
    assert abs(rate["production_ratio"] - 710 / 350) < 1e-9
    latency = summary["figures"]["latency_median"]
    assert latency["slurm_best"] == "slurm-lowlat"  # lower is better for times
    assert abs(latency["production_ratio"] - 0.45 / 0.045) < 1e-9  # times: Slurm / E31
    goals = {(g["figure"], g["shape"]): g["met"] for g in summary["goals"]}
    assert goals == {("submit_rate", "production"): True,  # 2.03x >= 2x
                     ("throughput", "production"): True,  # 19.5 / 9.25 = 2.1x
                     ("latency_median", "production"): True,  # 45 ms
                     ("latency_p95", "production"): False,  # 145 ms
                     ("submit_flat_ratio", "production"): False}  # 1.3x
