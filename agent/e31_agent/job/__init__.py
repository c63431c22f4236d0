"""One assignment from accept to finished, in a thread of its own (:class:`JobRun`), one step a module.

accepted -> staging -> running -> exited -> (pack, upload) -> finished:

1. :mod:`.prepare`  a fresh job dir and log; the job dir handed to the job's user;
2. :mod:`.stage`    the inputs fetched (``staging`` reports);
3. :mod:`.launch`   the command started under its shim (``running``);
4. :mod:`.report`   ``exited``, the rest of the log, then (5, 6) the bundle, then ``finished``;
5. :mod:`.pack`     the declared outputs packed once;
6. :mod:`.upload`   the bundle uploaded, resumable;
:mod:`.run` runs them in order and takes cancel, drop and shutdown from other threads; each step
is handed a small record of what it needs (:mod:`.base`), never the run, so no step imports it.

With nothing to stage, ``accepted`` folds into ``running``; with nothing to
pack, ``exited`` folds into ``finished`` (``exited={...}``; protocol v2):
a trivial job sends two reports, not four. ``finished`` goes last, after logs and bundle, since
the server may hand the GPUs to the next job the moment it hears it; when the outputs did not
all come back it carries a :class:`~e31_protocol.FinishCode` (protocol v3). ``cancel()`` is
idempotent; ``drop()`` (stale attempt) and ``shutdown()`` (agent stopping) kill the processes
and send nothing more.

Each step is written to the attempt's state directory (:mod:`e31_agent.state`, phases
:class:`~e31_protocol.AgentPhase`) before it is taken, and the command runs under a shim that
outlives the agent, so a run built by :meth:`JobRun.resume` (an agent restarted mid-job) takes
the attempt up where it was: it supervises the still running command (deadline, cancel), or
reports how it ended, then ships the rest of the log from the last acknowledged offset, packs and
uploads (the same archive, resumed), and sends ``finished``.
"""

from __future__ import annotations

from .base import Dropped, OutputProblem
from .launch import BACKSTOP_S, job_limits
from .pack import not_packed_note
from .run import JobRun
from .stage import STAGING_REPORT_EVERY_S

__all__ = ["BACKSTOP_S", "STAGING_REPORT_EVERY_S", "Dropped", "JobRun", "OutputProblem", "job_limits",
           "not_packed_note"]
