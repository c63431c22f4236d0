"""What every step of a run shares: the quiet stop (:class:`Dropped`) and the outputs' trouble
(:class:`OutputProblem`)."""

from __future__ import annotations

from dataclasses import dataclass

from e31_protocol import FinishCode


class Dropped(Exception):
    """The attempt was dropped (stale, or the agent stops): stop quietly, send nothing more."""


@dataclass(frozen=True)
class OutputProblem:
    """Why the declared outputs did not all come back: sent as ``finished``'s ``code`` (for the
    server) and ``message`` (for people)."""

    code: FinishCode
    message: str
