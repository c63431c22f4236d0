"""Jobs: ``e31 submit``, ``ls``, ``status``, ``cancel``, ``rerun`` and ``price``."""
from __future__ import annotations

import argparse
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..client import Api
from ..config import PERSONAL
from ..errors import Exit, usage
from ..follow import RankLines, follow_array, follow_job, job_nodes, outcome_exit, write_raw
from ..output import Out, cell, duration, money, outcome_text, size, state_text, when
from ..pipeline import is_pipeline
from ..specfile import read_spec, with_project
from .pipelines import submit_pipeline

if TYPE_CHECKING:
    from ..context import Ctx

STATES = ("queued", "rented", "running", "output", "released")
PROJECT_HELP = ("the project to submit to; wins over the spec's own `project:`, which wins over the default "
                "(`e31 project use`, E31_PROJECT); `~`: my personal project")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add the job commands."""
    p = sub.add_parser("submit", parents=[common], help="submit a job spec or a pipeline (attaching upload: files)",
                       description="Submit SPEC (YAML or JSON, SPEC §2). Every `upload:<name>` in its data is "
                                   "looked for beside the spec and attached. Exit 0 once accepted; with "
                                   "--watch, 0 only when the job (every task of an array) succeeded. A file with "
                                   "`steps:` is a pipeline (SPEC §7 \"Pipelines\"): its steps are checked (every "
                                   "`after: [{step: NAME}]` names a step above; a dry run of each), then submitted "
                                   "in order, each `{step: NAME}` becoming that step's job or array id.")
    p.add_argument("spec", metavar="SPEC", help="the job spec or pipeline file, e.g. examples/training/job.yaml")
    p.add_argument("-w", "--watch", action="store_true",
                   help="follow the job to its end, streaming its log (a pipeline: every step, without logs)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print only the job id (an array or a pipeline: its job ids, one a line); no log, no notes")
    p.add_argument("-p", "--project", metavar="NAME", help=PROJECT_HELP + " (a pipeline: every step)")
    p.set_defaults(func=submit)

    p = sub.add_parser("ls", parents=[common], help="my jobs, newest first (--project: a project's, with owners)")
    p.add_argument("-p", "--project", metavar="NAME",
                   help="every job of project NAME, all members' (default: the `e31 project use` one, else "
                        "mine and those of every project I am in; `~`: my personal project's)")
    p.add_argument("--state", choices=STATES, help="only jobs in this state")
    p.add_argument("-n", "--limit", type=int, default=20, help="how many (default 20)")
    p.add_argument("-a", "--all", action="store_true", help="every job (all pages)")
    p.set_defaults(func=ls)

    p = sub.add_parser("status", parents=[common], help="one job: state, times, cost, bundle, timeline",
                       description="Exit 0: the job succeeded; 1: it ended otherwise; 3: not ended yet.")
    p.add_argument("job_id", metavar="ID", type=int)
    p.set_defaults(func=status)

    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job_id", metavar="ID", type=int)
    p.set_defaults(func=cancel)

    p = sub.add_parser("rerun", parents=[common], help="run a job again: same spec, same uploaded files")
    p.add_argument("job_id", metavar="ID", type=int)
    p.add_argument("-w", "--watch", action="store_true", help="follow the new job to its end, streaming its log")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the new job's id; no log, no notes")
    p.add_argument("--resume", action="store_true",
                   help="start from the job's newest kept checkpoint (its spec's checkpoint.path)")
    p.set_defaults(func=rerun)

    p = sub.add_parser("price", parents=[common], help="validate a spec and price its worst case (nothing is run)",
                       description="A dry run of submit: the spec is checked as a submit checks it, priced at "
                                   "its worst case (time limit x GPUs x the highest rate of its models) and "
                                   "held against your monthly spend limit. Exit 4 when it would not fit.")
    p.add_argument("spec", metavar="SPEC")
    p.add_argument("-p", "--project", metavar="NAME", help=PROJECT_HELP)
    p.set_defaults(func=price)


def submit(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/jobs/`` (multipart: the spec and its files); with ``--watch``, follow it."""
    spec = read_spec(args.spec)
    if args.quiet and not ctx.out.json_mode:
        ctx.out = Out(quiet=True)
    if is_pipeline(spec.document):
        return submit_pipeline(args, ctx, spec)
    spec = with_project(spec, option=args.project, default=ctx.settings().project)
    with ctx.api() as api:
        if spec.attachments:
            total = sum(path.stat().st_size for _, path in spec.attachments)
            ctx.out.note(f"[dim]attaching {', '.join(cell(n) for n, _ in spec.attachments)} ({size(total)})[/]")
        created = api.submit(spec)
        if "job_ids" in created:  # a job array
            return _submitted_array(api, ctx.out, created, watch=args.watch)
        return _submitted_job(api, ctx.out, created, watch=args.watch, verb="Submitted")


def _submitted_job(api: Api, out: Out, job: dict[str, Any], *, watch: bool, verb: str) -> int:
    if out.quiet:
        out.ids([job["id"]])
    if not watch:
        if out.json_mode:
            out.emit(job)
        else:
            out.print(f"{verb} job [bold]{job['id']}[/] {cell(job['name'])} ({state_text(job)})")
        return Exit.OK
    nodes = job_nodes(job)
    ranks = f" and its {nodes} ranks' logs, each line prefixed [rank N]" if nodes > 1 else ""
    out.note(f"{verb} job [bold]{job['id']}[/] {cell(job['name'])}; following it{ranks} (Ctrl-C stops following, "
             "not the job)")
    log = None if out.json_mode or out.quiet else RankLines() if nodes > 1 else _raw
    try:
        final = follow_job(api, out, job["id"], log=log, all_ranks=nodes > 1, note_end=False)
    finally:
        if isinstance(log, RankLines):
            log.close()
    return _finished([final], out, emit=final)


def _raw(chunk: dict[str, Any]) -> None:
    write_raw(chunk["data"])


def _submitted_array(api: Api, out: Out, created: dict[str, Any], *, watch: bool) -> int:
    array_id, ids = created["array_id"], created["job_ids"]
    if out.quiet:
        out.ids(ids)
    if not watch:
        if out.json_mode:
            out.emit(created)
        else:
            out.print(f"Submitted array [bold]{array_id}[/] {cell(created['name'])}: {len(ids)} tasks, "
                      f"jobs {ids[0]}..{ids[-1]}")
        return Exit.OK
    out.note(f"Submitted array [bold]{array_id}[/] {cell(created['name'])}: {len(ids)} tasks, jobs "
             f"{ids[0]}..{ids[-1]}; following it (`e31 logs -f ID` shows one task's log)")
    tasks = follow_array(api, out, array_id)
    if not out.json_mode and not out.quiet:
        out.table(["TASK", "JOB", "STATE", "EXIT", "COST"],
                  [(t["array_index"], t["id"], outcome_text(t), t.get("exit_code"), money(t.get("cost")))
                   for t in tasks])
    return _finished(tasks, out, emit={**created, "jobs": tasks})


def _finished(jobs: list[dict[str, Any]], out: Out, *, emit: dict[str, Any]) -> int:
    """The end of a followed submit: a summary (or ``emit`` with ``--json``); the exit code by outcome."""
    if out.json_mode:
        out.emit(emit)
    elif len(jobs) == 1:
        job = jobs[0]
        out.note(f"job {job['id']} {outcome_text(job)}; billed {duration(job.get('billed_seconds')) or '0s'}, "
                 f"cost {money(job.get('cost'))}")
    else:
        done = sum(j.get("outcome") == "succeeded" for j in jobs)
        out.note(f"{done} of {len(jobs)} tasks succeeded")
    return outcome_exit(jobs)


def ls(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/jobs/`` as a table (or a JSON list): a project's (``?project=``, ``--project`` or the
    default) with an OWNER column; else mine and my projects' (PROJECT and OWNER columns when any is
    a team's)."""
    project = args.project.strip() if args.project is not None else ctx.settings().project
    with ctx.api() as api:
        if project == PERSONAL:  # the personal project's name is ~username: ask which
            rows = api.json("GET", "/projects/").get("results", [])
            project = next((r["name"] for r in rows if r.get("personal")), "")
        jobs = api.jobs(state=args.state, limit=None if args.all else max(args.limit, 1), project=project or None)
    if ctx.out.json_mode:
        ctx.out.emit(jobs)
        return Exit.OK
    if not jobs:
        where = f" in project {cell(project)}" if project else ""
        ctx.out.note(f"No jobs{where} yet. Submit one: e31 submit examples/training/job.yaml"
                     + (f" --project {cell(project)}" if project else ""))
        return Exit.OK
    teams = not project and any(j.get("project") and not str(j["project"]).startswith("~") for j in jobs)
    if project:
        ctx.out.note(f"[dim]project {cell(project)}[/]")
    head = ["ID", "NAME", *(["PROJECT"] if teams else []), *(["OWNER"] if project or teams else []),
            "STATE", "GPUS", "SUBMITTED", "RUN", "COST"]
    ctx.out.table(head, [
        (j["id"], _name(j), *([cell(j.get("project"))] if teams else []),
         *([cell(j.get("owner"))] if project or teams else []), state_text(j), _gpus(j), when(j["submitted_at"]),
         duration(_run_seconds(j)), money(j.get("cost"))) for j in jobs])
    return Exit.OK


def _name(job: dict[str, Any]) -> str:
    if not job.get("array_id"):
        return cell(job["name"])
    tag = cell(f"[array {job['array_id']} #{job['array_index']}]")  # brackets are rich markup: escaped
    return f"{cell(job['name'])} [dim]{tag}[/]"


def _gpus(job: dict[str, Any]) -> str:
    compute = (job.get("spec") or {}).get("compute") or {}
    gpus, nodes = compute.get("gpus"), compute.get("nodes") or 1
    model = compute.get("gpu_model")
    models = "/".join(model) if isinstance(model, list) else (model or "")
    count = f"{gpus}" if nodes == 1 else f"{nodes}x{gpus}"
    return cell(f"{count} {models}".strip())


def _run_seconds(job: dict[str, Any]) -> float | None:
    start = job.get("run_started_at")
    if not start:
        return None
    end = job.get("run_ended_at")
    t0 = datetime.fromisoformat(start.replace("Z", "+00:00"))
    t1 = datetime.fromisoformat(end.replace("Z", "+00:00")) if end else datetime.now(t0.tzinfo)
    return max(0.0, (t1 - t0).total_seconds())


def status(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/jobs/{id}/`` and its timeline. Exit 0 succeeded, 1 ended otherwise, 3 not ended."""
    with ctx.api() as api:
        job = api.job(args.job_id)
        events = api.events(args.job_id)
    if ctx.out.json_mode:
        ctx.out.emit({**job, "events": events})
        return outcome_exit([job])
    rows: list[tuple[str, Any]] = [("job", f"[bold]{job['id']}[/] {_name(job)}"), ("state", outcome_text(job))]
    if job["state"] != "released" and job.get("status_message") and job["status_message"] != job["state"]:
        rows.append(("message", cell(job["status_message"])))  # progress words; a reason is in the state row
    if job["state"] == "queued":
        rows += [("queue position", job.get("queue_position")),
                 ("estimated start", when(job.get("estimated_start_at"))),
                 ("waiting for", cell(job.get("pending_reason")))]
    rows += [("GPUs", _gpus(job)), ("submitted", when(job["submitted_at"])), ("rented", when(job.get("rented_at"))),
             ("run started", when(job.get("run_started_at"))), ("run ended", when(job.get("run_ended_at"))),
             ("released", when(job.get("released_at"))), ("exit code", job.get("exit_code")),
             ("attempts", f"{job['attempts']} of {job['max_attempts']}"),
             ("billed", duration(job.get("billed_seconds"))), ("cost", money(job.get("cost")))]
    bundle = job.get("bundle")
    if bundle:
        rows.append(("bundle", f"{size(bundle.get('size_bytes'))}, {len(bundle.get('files') or [])} files "
                               f"(e31 get {job['id']})"))
    ctx.out.table(["", ""], [(f"[bold]{k}[/]", v) for k, v in rows if v not in (None, "")], header=False)
    ctx.out.print("")
    ctx.out.table(["TIME", "FROM", "TO", "DETAIL"], [
        (when(e["at"]), cell(e["from_state"]), cell(e["to_state"]), cell(e["detail"])) for e in events])
    return outcome_exit([job])


def cancel(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/jobs/{id}/cancel/``: says what the cancel did."""
    with ctx.api() as api:
        job = api.json("POST", f"/jobs/{args.job_id}/cancel/")
    if ctx.out.json_mode:
        ctx.out.emit(job)
    else:
        effect = job.get("cancel") or {}
        ctx.out.print(f"job [bold]{job['id']}[/]: {cell(effect.get('effect'))}. {cell(effect.get('detail'))}")
    return Exit.OK


def rerun(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/jobs/{id}/rerun/``: a new job, same spec and uploads (``--resume``: from the
    job's newest kept checkpoint); ``--watch`` follows it."""
    if args.quiet and not ctx.out.json_mode:
        ctx.out = Out(quiet=True)
    with ctx.api() as api:
        job = api.json("POST", f"/jobs/{args.job_id}/rerun/", json={"resume": True} if args.resume else None)
        return _submitted_job(api, ctx.out, job, watch=args.watch, verb=f"Job {args.job_id} re-run as")


def price(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/jobs/?dry_run=1``: worst case, when it would start on each GPU model, and
    the spend limit. Exit 4 when it would not fit."""
    spec = read_spec(args.spec)
    if is_pipeline(spec.document):
        raise usage(f"{args.spec} is a pipeline (it has steps:); `e31 submit` checks every step with a dry run")
    spec = with_project(spec, option=args.project, default=ctx.settings().project)
    with ctx.api() as api:
        quote = api.submit(spec, dry_run=True)
    limit = quote.get("spend_limit") or {}
    fits = limit.get("fits", True) is not False
    if ctx.out.json_mode:
        ctx.out.emit(quote)
        return Exit.OK if fits else Exit.INVALID
    tasks = quote.get("tasks") or 1
    per = f"{tasks} tasks x " if tasks > 1 else ""
    ctx.out.print(f"Valid. Worst case [bold]${quote['worst_case']}[/] ({per}{quote['gpus']} GPU(s) x "
                  f"{quote['time_limit']} at the highest rate of the models it accepts).")
    ctx.out.table(["GPU MODEL", "RATE / GPU-HOUR", "WORST CASE PER TASK"], [
        (cell(r["gpu_model"]), r["rate_per_gpu_hour"], r["worst_case"]) for r in quote.get("by_model", [])])
    if quote.get("quotes"):  # issue 29 item 4: when it would start on each model, if sent now
        ctx.out.print("When it would start, if sent now (soonest first):")
        ctx.out.table(["GPU MODEL", "LIKELY START", "NO LATER THAN", "AT MOST PER TASK"], [
            (cell(q["gpu_model"]), when(q.get("estimated_start_at")) if q.get("estimated_start_at") else "cannot start",
             when(q.get("latest_start_at")), money(q.get("worst_case"))) for q in quote["quotes"]])
    if limit.get("limit") is None:
        ctx.out.print("No monthly spend limit.")
    else:
        verdict = "[green]fits[/]" if fits else f"[red]does not fit: short by ${limit.get('shortfall')}[/]"
        ctx.out.print(f"Monthly spend limit ${limit['limit']}: spent ${limit.get('spent')}, committed "
                      f"${limit.get('committed')}, left ${limit.get('left')}; this job {verdict}.")
    return Exit.OK if fits else Exit.INVALID
