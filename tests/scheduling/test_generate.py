"""Issue 14 item 6: generated workloads of different shapes, read by ``manage.py simulate`` like any trace."""
import io
import json

import pytest
from django.core.management import call_command

from apps.scheduling.simulator import load_jobs
from apps.scheduling.simulator.generate import generate, write_swf


def test_shapes_differ_as_named_and_a_seed_repeats():
    small, huge, bursty = (generate(s, jobs=2000, nodes=16, gpus_per_node=8) for s in ("small", "huge", "bursty"))
    assert generate("small", jobs=2000, nodes=16, gpus_per_node=8) == small  # deterministic
    assert sum(1 for r in small if r[3] <= 2) / len(small) > 0.8  # many small jobs
    assert 0 < sum(1 for r in huge if r[3] >= 64) / len(huge) < 0.06  # a few asking half the pool or more
    gaps = sorted(b[1] - a[1] for a, b in zip(bursty, bursty[1:], strict=False))
    assert gaps[len(gaps) // 2] < 10 and gaps[-1] > 600  # bursts: mostly seconds apart, long quiet between
    for rows in (small, huge, bursty):
        assert all(run <= limit and procs <= 128 for _i, _t, run, procs, limit, _u in rows)
    with pytest.raises(ValueError, match="unknown shape"):
        generate("round")


def test_simulate_replays_a_generated_file(tmp_path):
    path = write_swf(tmp_path / "bursty.swf", "bursty", jobs=300, nodes=8, gpus_per_node=8)
    assert len(load_jobs(path, 8, 8)[0]) == 300
    out = io.StringIO()
    call_command("simulate", str(path), "--policy", "e31", "--format", "json", stdout=out)
    result = json.loads(out.getvalue())
    assert (result["nodes"], result["gpus_per_node"], result["jobs"]) == (8, 8, 300)
    assert result["bound_passed"] >= 0 and result["estimate_within_60s"] is not None
