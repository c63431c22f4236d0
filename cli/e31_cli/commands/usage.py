"""``e31 usage``: the leases I held, with their billed time and cost, and the totals."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import Exit
from ..output import cell, duration, money, when

if TYPE_CHECKING:
    from ..context import Ctx


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``usage``."""
    p = sub.add_parser("usage", parents=[common], help="leases held, billed time and cost (--csv for a sheet)",
                       description="Every lease you held between --from and --to (dates or date-times, "
                                   "ISO 8601, in your account's time zone), and the totals.")
    p.add_argument("--from", dest="start", metavar="DATE", help="from this date or date-time, e.g. 2026-12-01")
    p.add_argument("--to", dest="end", metavar="DATE", help="up to this date or date-time")
    p.add_argument("--csv", action="store_true", help="print the CSV the site exports, instead of a table")
    p.set_defaults(func=usage)


def usage(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/usage/?from=&to=[&format=csv]``."""
    params = {k: v for k, v in (("from", args.start), ("to", args.end)) if v}
    with ctx.api() as api:
        if args.csv:
            resp = api.request("GET", "/usage/", params={**params, "format": "csv"})
            sys.stdout.write(resp.text)
            sys.stdout.flush()
            return Exit.OK
        report = api.json("GET", "/usage/", params=params)
    if ctx.out.json_mode:
        ctx.out.emit(report)
        return Exit.OK
    leases = report.get("leases", [])
    if leases:
        ctx.out.table(["JOB", "NAME", "NODE", "GPUS", "RENTED", "HELD", "BILLED", "RATE", "COST", "OUTCOME"], [
            (r["job_id"], cell(r["job_name"]), cell(r["node"]), f"{r['gpu_count']} {cell(r['gpu_model'])}",
             when(r["rented_at"]), duration(r["held_seconds"]), duration(r["billed_seconds"]),
             r["rate_per_gpu_hour"], money(r["cost"]), cell(r["outcome"])) for r in leases])
    else:
        ctx.out.note("No leases in this period.")
    totals = report.get("totals", {})
    ctx.out.print(f"{totals.get('leases', 0)} leases; billed {duration(totals.get('billed_seconds'))} "
                  f"({totals.get('gpu_hours_billed')} GPU-hours); cost [bold]{money(totals.get('cost'))}[/]")
    return Exit.OK
