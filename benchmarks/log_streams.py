"""What keeping stdout and stderr apart costs a chatty job (issue 16, item 5).

A command writes N lines, alternating stdout and stderr every L lines, under the agent's shim
(two pipes copied to the log plus an index, e31_agent.logindex). Baseline, measured in the same
run: the same command with both streams sent straight to a file by the shell (what the shim did
before). Prints the wall time of each and the ratio; no timed assertion anywhere.

    .venv/bin/python benchmarks/log_streams.py [--lines 2000000] [--switch 1000]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "agent"), str(ROOT / "protocol")]

from e31_agent.logindex import index_path, parse_index  # noqa: E402
from e31_agent.runner import JobProcess, build_env, new_marker, supervise  # noqa: E402


def command(lines: int, switch: int) -> str:
    return (f"python3 -c \"import sys\nfor i in range({lines}):\n"
            f"    (sys.stderr if (i // {switch}) % 2 else sys.stdout).write('line %d of the job output\\n' % i)\"")


def shim_run(tmp: Path, cmd: str) -> float:
    job_dir = tmp / "jobs" / "1"
    job_dir.mkdir(parents=True)
    env = build_env(job_dir=job_dir, spec_env={}, assignment_env={}, gpus=[0], marker=new_marker("bench", 1, 1))
    t0 = time.perf_counter()
    proc = JobProcess.start(["/bin/sh", "-c", cmd], cwd=job_dir, env=env, log_path=tmp / "logs" / "1-1.log",
                            run_dir=tmp / "runs" / "1-1")
    supervise(proc, deadline=time.monotonic() + 600, cancel=threading.Event(), drop=threading.Event(), grace_s=1)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--switch", type=int, default=1000, help="lines between stream switches")
    args = ap.parse_args()
    cmd = command(args.lines, args.switch)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t0 = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", f"{cmd} > {tmp}/base.log 2>&1"], check=True)
        base = time.perf_counter() - t0
        shim = shim_run(tmp, cmd)
        log = tmp / "logs" / "1-1.log"
        segments, _ = parse_index(index_path(log).read_bytes())
        size = log.stat().st_size
        assert size == (tmp / "base.log").stat().st_size, "the shim's log lost or added bytes"
        print(f"{args.lines:,} lines, {size / 1e6:.1f} MB, stream switch every {args.switch} lines")
        print(f"baseline (sh > file 2>&1): {base:.2f} s")
        print(f"shim (two pipes + index):  {shim:.2f} s  ({len(segments):,} index records, "
              f"{index_path(log).stat().st_size / 1e3:.0f} kB)")
        print(f"ratio shim / baseline: {shim / base:.2f}")


if __name__ == "__main__":
    main()
