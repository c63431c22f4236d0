"""``e31 logs [-f] ID``: a job's log, whole or followed live to the job's end."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..errors import Exit
from ..follow import follow_job, outcome_exit, write_raw

if TYPE_CHECKING:
    from ..context import Ctx


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``logs``."""
    p = sub.add_parser("logs", parents=[common], help="a job's log (-f: follow it live)",
                       description="Print the log of job ID (its current attempt) to stdout. With -f, keep "
                                   "printing as it grows until the job is released; the exit code is then "
                                   "the job's (0 succeeded, 1 otherwise). --json: one JSON line per chunk "
                                   "({job_id, attempt, rank, offset, next_offset, text}; rank 0's log).")
    p.add_argument("job_id", metavar="ID", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")
    p.add_argument("--offset", type=int, default=0, help="start at this byte of the log (default 0)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--stdout", dest="stream", action="store_const", const="stdout",
                       help="only what the command wrote to stdout")
    which.add_argument("--stderr", dest="stream", action="store_const", const="stderr",
                       help="only what the command wrote to stderr")
    p.set_defaults(func=logs)


def logs(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/jobs/{id}/logs/?offset=N`` until the end (``-f``: until the job is released)."""
    out = ctx.out

    def emit(chunk: dict[str, Any]) -> None:
        if out.json_mode:
            out.line({**{k: v for k, v in chunk.items() if k != "data"},
                      "text": chunk["data"].decode("utf-8", errors="replace")})
        else:
            write_raw(chunk["data"])

    with ctx.api() as api:
        if args.follow:
            job = follow_job(api, out, args.job_id, log=emit, from_offset=args.offset, stream=args.stream)
            return outcome_exit([job])
        job = api.job(args.job_id)
        offset = args.offset
        while True:
            data, nxt = api.log(args.job_id, offset, job["attempts"], args.stream)
            if nxt <= offset:
                return Exit.OK
            if data:
                emit({"job_id": job["id"], "attempt": job["attempts"], "rank": 0, "offset": offset,
                      "next_offset": nxt, "data": data})
            offset = nxt
