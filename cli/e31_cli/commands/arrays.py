"""``e31 array ls|status ID|cancel ID``: my job arrays (``/api/v1/arrays/``, issue 28 item 3).

``ls`` shows each array's tasks by state; ``status`` its counts and every task (index, job, state,
outcome and reason, exit code, cost); ``cancel`` cancels every task not released yet. Exit codes
as ``e31 status``: 0 when every task succeeded, 1 when any ended otherwise, 3 while any runs.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..errors import Exit
from ..follow import array_tasks, outcome_exit
from ..output import cell, money, outcome_text, when

if TYPE_CHECKING:
    from ..context import Ctx


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``array`` with ``ls``, ``status`` and ``cancel``."""
    p = sub.add_parser("array", parents=[common], help="list, inspect and cancel job arrays",
                       description="Job arrays (a spec with `array: N`): N tasks of one spec.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", parser_class=type(p))
    verbs.required = True
    ls = verbs.add_parser("ls", parents=[common], help="my arrays, newest first, with their tasks by state")
    ls.set_defaults(func=array_ls)
    st = verbs.add_parser("status", parents=[common], help="one array: its counts and every task")
    st.add_argument("array_id", metavar="ID", type=int)
    st.set_defaults(func=array_status)
    cn = verbs.add_parser("cancel", parents=[common], help="cancel every task of array ID not released yet")
    cn.add_argument("array_id", metavar="ID", type=int)
    cn.set_defaults(func=array_cancel)


def _counts(counts: dict[str, Any]) -> str:
    """"running 3, released 5 (succeeded 4, failed 1)": the non-zero states, the outcomes after."""
    states = ", ".join(f"{state} {n}" for state, n in counts.items() if state != "outcomes" and n)
    outcomes = ", ".join(f"{o} {n}" for o, n in (counts.get("outcomes") or {}).items() if n)
    return states + (f" ({outcomes})" if outcomes else "")


def array_ls(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/arrays/``: one row per array (the first page)."""
    rows = ctx.listing("/arrays/", empty="No job arrays: a spec with `array: N` submits one.")
    if rows is None:
        return Exit.OK
    ctx.out.table(["ID", "NAME", "TASKS", "BY STATE", "SUBMITTED"], [
        (r["id"], cell(r["name"]), r["size"], cell(_counts(r["counts"])), when(r["submitted_at"])) for r in rows])
    return Exit.OK


def array_status(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/arrays/ID/`` and its tasks (every page of ``/jobs/?array=ID``)."""
    with ctx.api() as api:
        array = api.json("GET", f"/arrays/{args.array_id}/")
        tasks = array_tasks(api, args.array_id)
    if ctx.out.json_mode:
        ctx.out.emit({**array, "tasks": tasks})
        return outcome_exit(tasks) if tasks else Exit.OK
    ctx.out.print(f"array [bold]{array['id']}[/] {cell(array['name'])}: {array['size']} tasks; "
                  f"{cell(_counts(array['counts']))}")
    ctx.out.table(["INDEX", "JOB", "STATE", "EXIT", "COST"], [
        (t["array_index"], t["id"], outcome_text(t), "" if t.get("exit_code") is None else t["exit_code"],
         money(t.get("cost")))
        for t in sorted(tasks, key=lambda t: t["array_index"])])
    return outcome_exit(tasks) if tasks else Exit.OK


def array_cancel(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/arrays/ID/cancel/``: queued tasks leave the queue, running ones are stopped."""
    with ctx.api() as api:
        done = api.json("POST", f"/arrays/{args.array_id}/cancel/")
    if ctx.out.json_mode:
        ctx.out.emit(done)
        return Exit.OK
    ctx.out.print(f"array [bold]{args.array_id}[/]: {done['released']} queued task(s) released, "
                  f"{done['stopping']} running task(s) stopping.")
    return Exit.OK
