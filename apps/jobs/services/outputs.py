"""Declared outputs that matched no file (issue 16, item 8): recorded from the agent's bundle
``complete`` (docs/agent-protocol.md), shown on the job page and in the API as warnings.

An agent from before this says nothing: then ``Job.outputs_unmatched`` stays null and there
is no warning (and no error).
"""
from __future__ import annotations

from django.db import transaction

from apps.jobs.models import Job

UNMATCHED_MAX = 100  # patterns kept per rank; a spec declares far fewer


def outputs_unmatched_record(*, job_id: int, attempt: int, rank: int, patterns: list[str]) -> None:
    """Record that on node rank ``rank`` attempt ``attempt`` packed nothing for ``patterns``
    (an empty list: every declared output matched). A report of an older attempt than the one
    recorded is ignored; a newer attempt replaces what was recorded."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        current = job.outputs_unmatched if isinstance(job.outputs_unmatched, dict) else None
        if current is not None and int(current.get("attempt", 0)) > attempt:
            return
        if current is None or int(current.get("attempt", 0)) != attempt:
            current = {"attempt": attempt, "ranks": {}}
        current["ranks"][str(rank)] = [str(p)[:1000] for p in patterns[:UNMATCHED_MAX]]
        Job.objects.filter(pk=job.pk).update(outputs_unmatched=current)


def outputs_unmatched(job: Job) -> list[str]:
    """The declared outputs of the job's latest packed attempt that matched no file on any
    rank that said so, in the order declared first seen; [] when none or not said."""
    data = job.outputs_unmatched
    if not isinstance(data, dict) or int(data.get("attempt", 0)) != job.attempt:
        return []
    out: list[str] = []
    for rank in sorted(data.get("ranks", {}), key=int):
        for pattern in data["ranks"][rank]:
            if pattern not in out:
                out.append(pattern)
    return out


def unmatched_where(job: Job) -> list[tuple[str, str]]:
    """Each unmatched declared output with where it matched nothing: ``(pattern, "")`` or, for a
    multi-node job where not every rank missed it, ``(pattern, " on node rank 1")``."""
    data = job.outputs_unmatched if isinstance(job.outputs_unmatched, dict) else {}
    ranks = data.get("ranks", {})
    out = []
    for pattern in outputs_unmatched(job):
        where = sorted(int(r) for r, pats in ranks.items() if pattern in pats)
        on = ""
        if job.nodes > 1 and len(where) < len(ranks):
            on = f" on node rank{'s' if len(where) > 1 else ''} {', '.join(map(str, where))}"
        out.append((pattern, on))
    return out


def output_warnings(job: Job) -> list[str]:
    """The warnings in words: "output `results/*.csv` matched no file" (see :func:`unmatched_where`)."""
    return [f"output `{pattern}` matched no file{on}" for pattern, on in unmatched_where(job)]
