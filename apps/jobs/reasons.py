"""Why a released job did not succeed, in its timeline's words (issue 28, item 2).

One rule for the job page (:func:`apps.jobs.selectors.end_detail`) and for ``status_message``,
which :func:`apps.jobs.state.transition` writes at release, so the API, the CLI, e-mails and
webhooks carry the same words as the page.
"""
from __future__ import annotations

from apps.core.choices import JobState, Outcome

from .models import Job


def needs_reason(outcome: str) -> bool:
    """True for an outcome that is told with its reason (failed, timed out, cancelled, lost...)."""
    return outcome not in ("", Outcome.SUCCEEDED)


def end_words(job: Job, *, released_from: str, release_detail: str, before_seq: int | None = None) -> str:
    """The reason of a release from ``released_from`` with timeline words ``release_detail``.

    The reason is the move that ended the run (to ``output``: "command exited with code 3",
    "staging failed: ..."), or the release itself where no run ended first (node lost, cancelled
    in the queue). ``before_seq``: only events before it (the release event, once written).
    Returns ``""`` where there are no words.
    """
    if released_from == JobState.OUTPUT:
        ended = job.events.filter(to_state=JobState.OUTPUT)
        if before_seq is not None:
            ended = ended.filter(seq__lt=before_seq)
        last = ended.order_by("-seq").first()
        return last.detail if last else ""
    return release_detail
