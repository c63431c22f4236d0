"""What every step of a run shares: the stop signals (:class:`Control`), how far the run got
(:class:`Progress`), the quiet stop (:class:`Dropped`) and the outputs' trouble (:class:`OutputProblem`).

Each step is handed only what it needs (its own small record, defined beside it:
:class:`~.stage.StageJob`, :class:`~.launch.LaunchJob`, :class:`~.pack.PackJob`,
:class:`~.upload.UploadJob`, :class:`~.report.EndJob`); :class:`~.run.JobRun` composes them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from e31_protocol import AgentPhase, ExitReason, FinishCode


class Dropped(Exception):
    """The attempt was dropped (stale, or the agent stops): stop quietly, send nothing more."""


@dataclass(frozen=True)
class OutputProblem:
    """Why the declared outputs did not all come back: sent as ``finished``'s ``code`` (for the
    server) and ``message`` (for people)."""

    code: FinishCode
    message: str


@dataclass(frozen=True)
class Control:
    """The stop signals of one run, set from other threads and read by every step.

    ``term_at``: when the run must be stopped (``time.monotonic()`` seconds: ``grace_s`` before
    the deadline, so that SIGKILL lands on it); ``cancel``: stop the command, still pack and
    report; ``drop``: kill it and go quiet; ``abort``: end every network retry of this job.
    """

    term_at: float
    cancel: threading.Event = field(default_factory=threading.Event)
    drop: threading.Event = field(default_factory=threading.Event)
    abort: threading.Event = field(default_factory=threading.Event)

    def drop_now(self) -> None:
        """The attempt is over here: every retry ends and the supervisor wakes at once."""
        self.drop.set()
        self.abort.set()
        self.cancel.set()

    def stop_reason(self) -> ExitReason | None:
        """Why the run must stop now: ``cancelled`` (a cancel, or a drop: check
        :meth:`check_dropped` first), ``time_limit`` (past ``term_at``), or None."""
        if self.cancel.is_set():
            return ExitReason.CANCELLED
        if time.monotonic() >= self.term_at:
            return ExitReason.TIME_LIMIT
        return None

    def check_dropped(self) -> None:
        """Raises :class:`Dropped` once the attempt was dropped."""
        if self.drop.is_set():
            raise Dropped()


@dataclass
class Progress:
    """How far one run got, written by the steps of its thread: the :class:`~e31_protocol.AgentPhase`
    (``accepted`` until staging begins), whether ``exited`` and ``finished`` were sent, and the
    ``exited`` that ``finished`` carries when the two are folded (nothing to pack)."""

    phase: AgentPhase = AgentPhase.ACCEPTED
    exited_sent: bool = False
    finished_sent: bool = False
    folded_exit: dict[str, Any] | None = None
