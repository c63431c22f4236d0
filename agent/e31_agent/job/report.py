"""Step 4 and 7, report the end: ``exited``, then the rest of the log, then the bundle (steps 5
and 6, when there is one), then ``finished`` (docs/agent-protocol.md, "Order of reports")."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from e31_protocol import AgentPhase, ExitReason, FinishCode, ReportType

from ..logship import LogShipper
from ..models import JobRef
from ..packer import Bundle
from ..reports import Reporter
from ..runner import JobProcess
from ..state import RunState
from .base import Control, Progress
from .pack import PackJob, pack_outputs
from .upload import UploadJob, upload_outputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EndJob:
    """What reporting the end is handed: the attempt's state dir (result, phase, elapsed time),
    its reporter, stop signals and :class:`Progress` (written here), its ``grace_s`` (seconds
    between SIGTERM and SIGKILL), and the packing and upload steps of its outputs."""

    ref: JobRef
    state: RunState
    reporter: Reporter
    control: Control
    progress: Progress
    grace_s: float
    pack: PackJob
    upload: UploadJob


def report_end(
    end: EndJob,
    *,
    shipper: LogShipper | None,
    exit_code: int | None,
    reason: ExitReason,
    message: str | None,
    with_outputs: bool,
    exited_queued: bool = False,
    elapsed_s: float | None = None,
) -> None:
    """exited, then the log, then the bundle (when there is one), then finished.

    With nothing to pack, ``exited`` is not sent on its own: ``finished`` carries it
    (folded), after the log. ``exited_queued``: the run was past ``exited`` (a resumed
    run): the report is in the spool, or (folded) goes with ``finished``. Either way the
    exit carries ``elapsed_s``, the run's length from the accept as measured here (read now,
    or, for a resumed run, as recorded when it ended), so the server bills the run, not
    the time the report took to get through (SPEC §4). When the outputs did not all come
    back, ``finished`` carries a :class:`~e31_protocol.FinishCode` and a message. ``shipper``:
    the run's log shipper, finished before the bundle goes (None: none was started).

    Raises:
        Dropped: the attempt was dropped meanwhile.
    """
    progress = end.progress
    progress.phase = AgentPhase.OUTPUT
    if not exited_queued and elapsed_s is None:  # given: a start refused before anything ran (0 s)
        elapsed_s = end.state.elapsed_s()
    packs = with_outputs and bool(end.pack.output_paths)
    if not packs:
        progress.folded_exit = {"exit_code": exit_code, "reason": ExitReason(reason).value}
        if message:
            progress.folded_exit["message"] = message
        if elapsed_s is not None:
            progress.folded_exit["elapsed_s"] = elapsed_s
    if not exited_queued:
        end.state.set_result(reason=reason, exit_code=exit_code, pack=with_outputs, message=message,
                             elapsed_s=elapsed_s)
        if packs:
            end.reporter.send(ReportType.EXITED, exit_code=exit_code, reason=reason, message=message,
                              elapsed_s=elapsed_s)
        end.state.set_phase(AgentPhase.OUTPUT)
    progress.exited_sent = True
    if shipper is not None:
        shipper.finish()
    end.control.check_dropped()
    problem = None
    if packs:
        packed = pack_outputs(end.pack)
        problem = upload_outputs(end.upload, packed) if isinstance(packed, Bundle) else packed
    end.control.check_dropped()
    end.reporter.send(ReportType.FINISHED, exited=progress.folded_exit,
                      **({"code": problem.code, "message": problem.message} if problem else {}))
    end.state.set_phase(AgentPhase.FINISHED)
    progress.finished_sent = True
    end.reporter.wait_sent()
    end.control.check_dropped()
    log.info("%s: finished", end.ref)


def report_agent_error(end: EndJob, *, process: JobProcess | None) -> None:
    """After an agent error: stop the run's ``process`` (None: it did not start) and close the
    attempt on the server (``exited`` if not sent, then ``finished`` with the code
    ``agent_error``); waits up to 60 s for them to go."""
    progress = end.progress
    if process is not None:
        process.stop(end.grace_s)
    if not progress.exited_sent:
        reason = ExitReason.EXIT if process is not None else ExitReason.START_FAILED
        code = process.exit_code if process is not None else None
        end.reporter.send(ReportType.EXITED, exit_code=code, reason=reason, message="agent error",
                          elapsed_s=end.state.elapsed_s())
    if not progress.finished_sent:
        fields: dict[str, Any] = {"code": FinishCode.AGENT_ERROR, "message": "agent error"}
        end.reporter.send(ReportType.FINISHED, exited=progress.folded_exit, **fields)
    end.reporter.wait_sent(60)
