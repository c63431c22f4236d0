"""Why the longest waits of wide jobs are long: ``easy`` against ``e31``, job by job (issue 14 item 4).

For the ``--top`` jobs asking ``--min-gpus`` or more that waited longest under ``e31``, it prints,
under each policy: the wait; when every job submitted before it had started (``head``: from then
on only what already runs can hold it back); and the run that ended last among those running at
that moment (the one a job of nearly the whole pool waits for), with its own wait. Times are
seconds after the wide job's submit.

    .venv/bin/python benchmarks/tail_why.py --trace kth --limit 10000 [--set '{"weight_size": 0}']
"""
from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from policies import TRACES, trace_path  # noqa: E402

from apps.scheduling.core import PolicyConfig  # noqa: E402
from apps.scheduling.simulator.engine import replay  # noqa: E402
from apps.scheduling.simulator.swf import load_jobs  # noqa: E402


def starts(jobs, nodes: int, gpus: int, policy) -> dict[int, float]:
    """``{job id: start}`` of one replay (jobs never started are left out)."""
    return {o.job_id: o.start for o in replay(jobs, nodes, gpus, policy).outcomes if o.start is not None}


def explain(jobs, started: dict[int, float], job) -> dict:
    """The wait of ``job``, its head time and the last-ending run at that time (seconds after its submit)."""
    order = sorted(jobs, key=lambda j: (j.submit, j.job_id))
    before = order[:bisect.bisect_left([(j.submit, j.job_id) for j in order], (job.submit, job.job_id))]
    head = max((started.get(j.job_id, float("inf")) for j in before), default=job.submit)
    running = [j for j in jobs if j.job_id in started and started[j.job_id] <= head < started[j.job_id] + j.run_s]
    last = max(running, key=lambda j: started[j.job_id] + j.run_s, default=None)
    out = {"wait": started[job.job_id] - job.submit, "head": head - job.submit}
    if last is not None:
        out["blocker"] = {"job": last.job_id, "account": last.account, "gpus": last.gpus,
                          "own_wait": started[last.job_id] - last.submit,
                          "ends": started[last.job_id] + last.run_s - job.submit}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="kth", choices=sorted(TRACES))
    parser.add_argument("--limit", type=int, default=10000)
    parser.add_argument("--min-gpus", type=int, default=9)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--set", default="{}", help="e31 overrides as JSON")
    a = parser.parse_args()
    _name, nodes, gpus = TRACES[a.trace]
    jobs, _skipped = load_jobs(trace_path(a.trace), gpus, nodes, a.limit or None)
    e31 = dataclasses.replace(PolicyConfig(name="e31"), **json.loads(a.set))
    runs = {"easy": starts(jobs, nodes, gpus, "easy"), "e31": starts(jobs, nodes, gpus, e31)}
    wide = [j for j in jobs if j.gpus >= a.min_gpus and j.job_id in runs["e31"]]
    wide.sort(key=lambda j: runs["e31"][j.job_id] - j.submit, reverse=True)
    for job in wide[:a.top]:
        row = {"job": job.job_id, "account": job.account, "gpus": job.gpus, "run_s": job.run_s}
        row.update({policy: explain(jobs, started, job) for policy, started in runs.items() if job.job_id in started})
        print(json.dumps(row))


if __name__ == "__main__":
    main()
