"""Step 4 and 7, report the end: ``exited``, then the rest of the log, then the bundle (steps 5
and 6, when there is one), then ``finished`` (docs/agent-protocol.md, "Order of reports")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from e31_protocol import AgentPhase, ExitReason, FinishCode, ReportType

from ..packer import Bundle
from .pack import pack_outputs
from .upload import upload_outputs

if TYPE_CHECKING:
    from .run import JobRun

log = logging.getLogger(__name__)


def report_end(
    run: JobRun,
    *,
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
    back, ``finished`` carries a :class:`~e31_protocol.FinishCode` and a message.

    Raises:
        Dropped: the attempt was dropped meanwhile.
    """
    run.phase = AgentPhase.OUTPUT
    if not exited_queued and elapsed_s is None:  # given: a start refused before anything ran (0 s)
        elapsed_s = run.state.elapsed_s()
    packs = with_outputs and bool(run.assignment.spec.output_paths)
    if not packs:
        run.folded_exit = {"exit_code": exit_code, "reason": ExitReason(reason).value}
        if message:
            run.folded_exit["message"] = message
        if elapsed_s is not None:
            run.folded_exit["elapsed_s"] = elapsed_s
    if not exited_queued:
        run.state.set_result(reason=reason, exit_code=exit_code, pack=with_outputs, message=message,
                             elapsed_s=elapsed_s)
        if packs:
            run.reporter.send(ReportType.EXITED, exit_code=exit_code, reason=reason, message=message,
                              elapsed_s=elapsed_s)
        run.state.set_phase(AgentPhase.OUTPUT)
    run.exited_sent = True
    if run.shipper is not None:
        run.shipper.finish()
    run.check_dropped()
    problem = None
    if packs:
        packed = pack_outputs(run)
        problem = upload_outputs(run, packed) if isinstance(packed, Bundle) else packed
    run.check_dropped()
    run.reporter.send(ReportType.FINISHED, exited=run.folded_exit,
                      **({"code": problem.code, "message": problem.message} if problem else {}))
    run.state.set_phase(AgentPhase.FINISHED)
    run.finished_sent = True
    run.reporter.wait_sent()
    run.check_dropped()
    log.info("%s: finished", run.ref)


def report_agent_error(run: JobRun) -> None:
    """After an agent error: stop the run and close the attempt on the server (``exited`` if not
    sent, then ``finished`` with the code ``agent_error``); waits up to 60 s for them to go."""
    if run.process is not None:
        run.process.stop(run.assignment.grace_s)
    if not run.exited_sent:
        reason = ExitReason.EXIT if run.process is not None else ExitReason.START_FAILED
        code = run.process.exit_code if run.process is not None else None
        run.reporter.send(ReportType.EXITED, exit_code=code, reason=reason, message="agent error",
                          elapsed_s=run.state.elapsed_s())
    if not run.finished_sent:
        fields: dict[str, Any] = {"code": FinishCode.AGENT_ERROR, "message": "agent error"}
        run.reporter.send(ReportType.FINISHED, exited=run.folded_exit, **fields)
    run.reporter.wait_sent(60)
