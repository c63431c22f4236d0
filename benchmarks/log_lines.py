"""The log's lines view on a long log (issue 26 item 7): time and peak memory of one page, against
reading the whole log into line objects first (what ``log_lines`` did before; the baseline, in the
same run on the same rows).

The log is ``--lines`` short lines (``"line N\\n"``) of one attempt in 64 KiB chunks, as an agent
ships them, in a fresh PostgreSQL database (``BENCH_DATABASE_URL``). Peak memory is Python's
(tracemalloc) during the call.

    BENCH_DATABASE_URL=... .venv/bin/python benchmarks/log_lines.py [--lines 1000000]
"""
from __future__ import annotations

import argparse
import time
import tracemalloc

from _stack import fresh_database
from cycle_db import setup_django

CHUNK = 64 * 1024


def fill(lines: int) -> int:
    """A released-looking job whose rank-0 log holds ``lines`` lines; returns its id."""
    from datetime import UTC, datetime

    from django.contrib.auth.models import User

    from apps.jobs.models import Job, LogChunk

    owner = User.objects.create(username="bench-logs")
    now = datetime.now(UTC)
    job = Job.objects.create(owner=owner, name="long-log", spec={}, submitted_at=now, state="running",
                             gpus_per_node=1, nodes=1, time_limit_s=60)
    data = b"".join(b"line %d\n" % i for i in range(lines))
    rows = [LogChunk(job=job, attempt=1, node_rank=0, offset=o, data=data[o:o + CHUNK], stream="stdout", at=now)
            for o in range(0, len(data), CHUNK)]
    LogChunk.objects.bulk_create(rows, batch_size=500)
    Job.objects.filter(pk=job.pk).update(log_size=len(data))
    return job.pk


def whole(job, attempt: int, rank: int) -> int:
    """The baseline: every line of the log as an object, then the last page."""
    from apps.jobs.services.logs import lines_of, log_pieces

    everything = lines_of(log_pieces(job, attempt, rank))
    return len(everything[-500:])


def measure(fn, *args, **kwargs) -> tuple[float, float]:
    """``(seconds, peak MiB)``: the time of one call, then the peak of another under tracemalloc
    (which slows every allocation, so it is not timed)."""
    started = time.perf_counter()
    fn(*args, **kwargs)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    fn(*args, **kwargs)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    fresh_database()
    setup_django()
    from django.test.utils import override_settings

    from apps.jobs.models import Job
    from apps.jobs.services.logs import log_lines

    with override_settings(E31_LOG_MAX_BYTES=1 << 30):
        job = Job.objects.get(pk=fill(args.lines))
        cases = {
            "baseline: whole log as line objects": (whole, {}),
            "tail page (500 lines)": (log_lines, {}),
            "first page": (log_lines, {"offset": 0}),
            "search 'line 99999'": (log_lines, {"q": "line 99999"}),
        }
        print(f"{args.lines:,} lines, {job.log_size / 2**20:.1f} MiB of log")
        base = None
        for label, (fn, kwargs) in cases.items():
            seconds, peak = measure(fn, job, 1, 0, **kwargs)
            base = base or (seconds, peak)
            print(f"{label:40s} {seconds:7.2f} s ({seconds / base[0]:.2f}x)  peak {peak:8.1f} MiB "
                  f"({peak / base[1]:.3f}x)")


if __name__ == "__main__":
    main()
