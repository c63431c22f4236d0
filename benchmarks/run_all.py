"""``make bench``: the quick version of every benchmark, one after another, with their figures.

    .venv/bin/python benchmarks/run_all.py             # all of them (~15-25 min on 2 cores)
    .venv/bin/python benchmarks/run_all.py cycle meter # only these
    .venv/bin/python benchmarks/run_all.py --list      # names and the arguments each gets

Each script runs in its own process with small sizes (the arguments below), its
output (figures and ratios against the baseline it measures in the same run)
printed as it comes; a summary at the end gives each one's exit status and wall
time. The full-size runs and the recorded figures are in ``docs/benchmarks.md``;
run a script alone, without arguments, for those. The benchmarks use their own
database and Redis (``BENCH_DATABASE_URL``, ``BENCH_REDIS_URL``; see
``benchmarks/_stack.py``), never the test ones. ``vs_slurm`` needs a local Slurm
(``../shared/slurm``) and is left out unless named.

Exit status: 0 when every benchmark run exited 0, else 1.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> the quick arguments (sizes well below the recorded runs, same shape)
QUICK: dict[str, list[str]] = {
    "cycle": ["--jobs", "2000", "--nodes", "200", "--runs", "2"],
    "cycle_db": ["--jobs", "1000", "--nodes", "100", "--runs", "2"],
    "meter": ["--leases", "2000", "--runs", "2"],
    "policies": ["--limit", "2000", "--traces", "kth", "--workers", "2"],
    "array_submit": ["--runs", "1"],
    "submit_rate": ["--seconds", "5", "--web", "1"],
    "submit_flat": ["--queued", "1000", "--submits", "10", "--shape", "standalone"],
    "start_latency": ["--jobs", "10"],
    "throughput": ["--jobs", "40"],
    "bundle_throughput": ["--size-mb", "100"],
    "ws_fanout": ["--clients", "100", "--seconds", "5", "--idle-seconds", "3"],
    "web_memory": [],
}
OPTIONAL = {"vs_slurm": ["--quick"]}  # run only when named
TIMEOUT_S = 900  # per benchmark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all but {', '.join(OPTIONAL)})")
    parser.add_argument("--list", action="store_true", help="print each benchmark's quick arguments and stop")
    args = parser.parse_args()
    known = {**QUICK, **OPTIONAL}
    if args.list:
        for name, argv in known.items():
            print(f"{name:18} {' '.join(argv)}{'  (only when named)' if name in OPTIONAL else ''}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(known)})")
    names = args.names or list(QUICK)
    summary: list[tuple[str, str, float]] = []
    for name in names:
        argv = [sys.executable, str(HERE / f"{name}.py"), *known[name]]
        print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
        start = time.monotonic()
        try:
            code = subprocess.run(argv, cwd=HERE.parent, timeout=TIMEOUT_S).returncode
            status = "ok" if code == 0 else f"exit {code}"
        except subprocess.TimeoutExpired:
            status = f"timed out after {TIMEOUT_S} s"
        summary.append((name, status, time.monotonic() - start))
    print("\n=== summary")
    for name, status, took in summary:
        print(f"{name:18} {status:24} {took:7.1f} s")
    return 0 if all(status == "ok" for _, status, _ in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
