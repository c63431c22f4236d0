"""``e31 submit pipeline.yaml``: every step of a pipeline file (:mod:`e31_cli.pipeline`), in order.

1. The file is read and every ``{step: NAME}`` checked (a step not in the file, further down, or
   the step itself is an error naming ``steps.<name>.after[i]``): nothing is sent.
2. Every step is checked with a dry run (``POST /jobs/?dry_run=1``, its step entries left out:
   nothing is stored), and the steps' worst cases together against what is left of the spend limit,
   so that a spec the server refuses stops the pipeline before any step is submitted.
3. The steps are submitted in order, each ``{step: NAME}`` becoming ``{job: ID}`` or ``{array: ID}``.
   A refusal midway (a race: the pool or the limit changed) says which steps were submitted, with
   their ids, and which were not; what was submitted is left to run (``e31 cancel ID`` stops it).
"""
from __future__ import annotations

import argparse
import re
from collections import defaultdict
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

import yaml

from ..client import Api
from ..errors import CliError, Exit
from ..follow import follow_array, follow_job, outcome_exit
from ..output import Out, cell, money, outcome_text
from ..pipeline import Pipeline, Step, Submitted, read_pipeline, step_document
from ..specfile import SpecFile, project_for

if TYPE_CHECKING:
    from ..context import Ctx


def submit_pipeline(args: argparse.Namespace, ctx: Ctx, spec: SpecFile) -> int:
    """Check, then submit, every step of the pipeline in ``spec``; print step -> job or array id.
    With ``--watch``, follow every step to its end (exit 0 only when every job succeeded)."""
    pipeline = read_pipeline(spec)
    out = ctx.out
    default = pipeline.project or ctx.settings().project
    with ctx.api() as api:
        _check(api, pipeline, option=args.project, default=default)
        submitted = _submit_all(api, out, pipeline, option=args.project, default=default)
        if out.quiet:
            out.ids(i for s in submitted for i in s.job_ids)
        if not args.watch:
            if out.json_mode:
                out.emit({"pipeline": pipeline.name, "steps": [s.to_json() for s in submitted]})
            elif not out.quiet:
                out.print(f"Submitted pipeline [bold]{cell(pipeline.name)}[/]: {len(submitted)} steps")
                _table(out, submitted)
            return Exit.OK
        out.note(f"Submitted pipeline [bold]{cell(pipeline.name)}[/]: {len(submitted)} steps; following them "
                 "(`e31 logs -f ID` shows one job's log; Ctrl-C stops following, not the jobs)")
        if not out.quiet:
            _table(out, submitted, err=True)
        return _follow(api, out, pipeline, submitted)


def _spec_of(pipeline: Pipeline, step: Step, submitted: dict[str, Submitted], *, option: str | None,
             default: str) -> SpecFile:
    """The spec to send for ``step``: step references resolved, the project as ``--project`` says."""
    document = step_document(step, submitted, pipeline=pipeline.name)
    project = project_for(document, option=option, default=default)
    if project is not None:
        document = {k: v for k, v in document.items() if k != "project"}
        if project:
            document = {"name": document.pop("name"), "project": project, **document}
    return SpecFile(pipeline.path, yaml.safe_dump(document, sort_keys=False, allow_unicode=True), step.attachments,
                    document)


def _check(api: Api, pipeline: Pipeline, *, option: str | None, default: str) -> None:
    """Dry-run every step (nothing stored) and hold the steps' worst cases together against the spend
    limit left, per project.

    Raises:
        CliError: a step the server refuses (its fields prefixed ``steps.<name>.``), or steps that
            together do not fit; nothing was submitted.
    """
    worst: dict[str, Decimal] = defaultdict(Decimal)
    left: dict[str, Decimal] = {}
    for step in pipeline.steps:
        spec = _spec_of(pipeline, step, {}, option=option, default=default)
        try:
            quote = api.submit(spec, dry_run=True)
        except CliError as exc:
            raise _in_step(_file_indexes(exc, step), step.name, "nothing was submitted") from None
        limit = quote.get("spend_limit") or {}
        if limit.get("fits") is False:
            raise CliError(f"steps.{step.name}: its worst case ${quote.get('worst_case')} does not fit the "
                           f"monthly spend limit (short by ${limit.get('shortfall')}); nothing was submitted",
                           Exit.INVALID)
        project = str(spec.document.get("project") or "~")
        worst[project] += _decimal(quote.get("worst_case"))
        if limit.get("limit") is not None and limit.get("left") is not None:
            left[project] = _decimal(limit["left"])
    for project, total in worst.items():
        if project in left and total > left[project]:
            where = "" if project == "~" else f" of project {project}"
            raise CliError(f"the steps' worst cases together (${total}) do not fit what is left of the monthly "
                           f"spend limit{where} (${left[project]}); nothing was submitted", Exit.INVALID)


def _file_indexes(exc: CliError, step: Step) -> CliError:
    """``exc`` of a dry run with its ``after[k]`` fields renumbered as the file numbers them (the dry
    run left the ``{step: NAME}`` entries out, so the server counted without them)."""
    kept = [i for i, item in enumerate(step.document.get("after") or [])
            if not (isinstance(item, dict) and "step" in item)]

    def renumber(key: str) -> str:
        match = re.match(r"^after\[(\d+)\]", key)
        if not match or int(match.group(1)) >= len(kept):
            return key
        return f"after[{kept[int(match.group(1))]}]" + key[match.end():]

    exc.fields = {renumber(k): v for k, v in exc.fields.items()}
    return exc


def _decimal(value: Any) -> Decimal:
    try:
        return Decimal(str(value))
    except (InvalidOperation, ValueError):
        return Decimal(0)


def _submit_all(api: Api, out: Out, pipeline: Pipeline, *, option: str | None, default: str) -> list[Submitted]:
    """Submit the steps in order.

    Raises:
        CliError: a step refused (or Ctrl-C) midway: the message and ``--json``'s ``submitted`` and
            ``not_submitted`` say what was and what was not.
    """
    done: dict[str, Submitted] = {}
    for index, step in enumerate(pipeline.steps):
        spec = _spec_of(pipeline, step, done, option=option, default=default)
        try:
            created = api.submit(spec)
        except (CliError, KeyboardInterrupt) as exc:
            raise _midway(exc, step, list(done.values()), pipeline.steps[index:]) from None
        if "job_ids" in created:
            item = Submitted(step.name, "array", created["array_id"], created.get("name", ""), list(created["job_ids"]))
        else:
            item = Submitted(step.name, "job", created["id"], created.get("name", ""), [created["id"]])
        item.after = list(spec.document.get("after") or [])
        done[step.name] = item
        out.note(f"[dim]step {cell(step.name)}: {item.words()}[/]")
    return list(done.values())


def _in_step(exc: CliError, step: str, then: str) -> CliError:
    """``exc`` as the error of step ``step``: message and fields prefixed with ``steps.<step>``."""
    fields = {f"steps.{step}.{k}": v for k, v in exc.fields.items()}
    return CliError(f"steps.{step}: {exc.message}; {then}", exc.code, fields=fields, status=exc.status,
                    extra=exc.extra)


def _midway(exc: CliError | KeyboardInterrupt, step: Step, done: list[Submitted], rest: list[Step]) -> CliError:
    """The error of a pipeline stopped at ``step``: which steps were submitted (ids) and which not."""
    if done:
        ids = " ".join(str(s.id) for s in done if s.kind == "job")
        arrays = " ".join(str(s.id) for s in done if s.kind == "array")
        stop = " and ".join(filter(None, [f"`e31 cancel {ids}`" if ids else "",
                                          f"`e31 array cancel {arrays}`" if arrays else ""]))
        verb = "stop" if ids and arrays else "stops"
        then = (f"submitted before it: {', '.join(f'{s.step} ({s.words()})' for s in done)}, which go on "
                f"({stop} {verb} them); not submitted: {', '.join(s.name for s in rest)}")
    else:
        then = f"nothing was submitted (not submitted: {', '.join(s.name for s in rest)})"
    extra = {"submitted": [s.to_json() for s in done], "not_submitted": [s.name for s in rest]}
    if isinstance(exc, KeyboardInterrupt):
        return CliError(f"interrupted at step {step.name}; {then}", Exit.INTERRUPTED, extra=extra)
    error = _in_step(exc, step.name, then)
    error.extra = {**error.extra, **extra}
    return error


def _table(out: Out, submitted: list[Submitted], *, err: bool = False) -> None:
    rows = [(cell(s.step), s.words(), cell(s.name), cell(_after_words(s.after))) for s in submitted]
    if err:  # --watch: stdout is kept for the summary at the end
        for step, what, name, after in rows:
            out.note(f"  {step}: {what} {name}{' after ' + after if after else ''}")
    else:
        out.table(["STEP", "SUBMITTED AS", "NAME", "AFTER"], rows)


def _after_words(after: list[dict[str, Any]]) -> str:
    words = []
    for item in after:
        kind = "job" if "job" in item else "array"
        words.append(f"{kind} {item.get(kind)} ({item.get('when', 'succeeded')})")
    return ", ".join(words)


def _follow(api: Api, out: Out, pipeline: Pipeline, submitted: list[Submitted]) -> int:
    """Poll every step to its end, in order; a summary table; the exit code over every job."""
    ended: dict[str, list[dict[str, Any]]] = {}
    for item in submitted:
        if item.kind == "job":
            ended[item.step] = [follow_job(api, out, item.id, log=None)]
        else:
            ended[item.step] = follow_array(api, out, item.id)
    jobs = [j for tasks in ended.values() for j in tasks]
    if out.json_mode:
        out.emit({"pipeline": pipeline.name, "steps": [{**s.to_json(), "jobs": ended[s.step]} for s in submitted]})
    elif not out.quiet:
        out.table(["STEP", "SUBMITTED AS", "OUTCOME", "COST"], [
            (cell(s.step), s.words(), _outcome(ended[s.step]),
             money(sum(_decimal(j.get("cost") or 0) for j in ended[s.step]))) for s in submitted])
    return outcome_exit(jobs)


def _outcome(tasks: list[dict[str, Any]]) -> str:
    if len(tasks) == 1:
        return outcome_text(tasks[0])
    done = sum(t.get("outcome") == "succeeded" for t in tasks)
    return f"{done} of {len(tasks)} tasks succeeded"
