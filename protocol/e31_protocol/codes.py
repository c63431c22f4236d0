"""The protocol's words: enums of what agents and the server say, and machine-readable codes.

Every value here travels as a plain JSON string (a :class:`~enum.StrEnum` compares equal to
its value), so an agent and a server that both use this module never match message text:
``message`` and ``detail`` fields are for people, ``code`` and ``type`` fields for programs.
"""

from __future__ import annotations

from enum import StrEnum


class ReportType(StrEnum):
    """``type`` of a job report (``POST jobs/<id>/report/`` and each item of ``POST reports/``)."""

    ACCEPTED = "accepted"
    STAGING = "staging"
    RUNNING = "running"
    EXITED = "exited"
    FINISHED = "finished"


class ExitReason(StrEnum):
    """``reason`` of an ``exited`` report (also of the ``exited`` a ``finished`` carries)."""

    EXIT = "exit"  # the command ended by itself (``exit_code`` says how)
    TIME_LIMIT = "time_limit"  # stopped at the deadline
    CANCELLED = "cancelled"  # stopped on the server's cancel
    STAGING_FAILED = "staging_failed"  # an input could not be fetched; the command never started
    START_FAILED = "start_failed"  # the command could not be started (no runtime, bad image...)


class AgentPhase(StrEnum):
    """How far an attempt got on the agent: the one vocabulary of the agent's phases.

    The words are the protocol's own (those of the report each phase begins with, and
    ``output`` for the server's job state between ``exited`` and ``finished``), written to
    ``WORKDIR/runs/<job>-<attempt>/phase`` and held in memory alike:

    ``accepted``  the assignment was taken, nothing started yet;
    ``staging``   inputs are being fetched;
    ``running``   the command was started (its shim lives);
    ``output``    the run ended (``result.json`` says how): log, pack, upload;
    ``finished``  the ``finished`` report is queued.

    Use :meth:`parse` to read a stored or older value: agents before protocol v3 also used
    ``new`` (for ``accepted``) and ``finishing`` (for ``finished``) in memory.
    """

    ACCEPTED = "accepted"
    STAGING = "staging"
    RUNNING = "running"
    OUTPUT = "output"
    FINISHED = "finished"

    @classmethod
    def parse(cls, value: str, default: AgentPhase | None = None) -> AgentPhase:
        """The phase ``value`` names, older words mapped (``new``, ``finishing``).

        Raises:
            ValueError: ``value`` is no phase and no ``default`` was given.
        """
        value = (value or "").strip()
        try:
            return cls(value)
        except ValueError:
            pass
        if value in LEGACY_PHASES:
            return LEGACY_PHASES[value]
        if default is not None:
            return default
        raise ValueError(f"unknown agent phase {value!r}")


LEGACY_PHASES: dict[str, AgentPhase] = {
    "new": AgentPhase.ACCEPTED,
    "finishing": AgentPhase.FINISHED,
}


class PrestageState(StrEnum):
    """``state`` of one job in ``POST prestage/``."""

    FETCHING = "fetching"
    DONE = "done"
    FAILED = "failed"


class HealthSource(StrEnum):
    """``health.source`` of a heartbeat: where the GPU figures come from."""

    NVML = "nvml"
    SIMULATED = "simulated"
    NONE = "none"


class NodeState(StrEnum):
    """``state`` of the heartbeat answer: the node as the server sees it (``down``: register again).

    Defined here once: the server's :class:`apps.core.choices.NodeState` (the node's column, with
    labels) is derived from it, in this order (SPEC §5).
    """

    UP = "up"
    DRAINING = "draining"
    DOWN = "down"


class FinishCode(StrEnum):
    """``code`` of a ``finished`` report: what went wrong with the outputs (protocol v3).

    Absent when all went well. The first three mean the declared outputs did not all come back
    (:data:`LOST_OUTPUT`): the server then releases a job that exited 0 as ``failed``, with the
    report's ``message`` as the reason shown.
    """

    BUNDLE_UPLOAD_FAILED = "bundle_upload_failed"  # packed, but the upload failed for good
    PACKING_FAILED = "packing_failed"  # nothing packed (an output cap, a bad pattern, an I/O error)
    OUTPUTS_NOT_PACKED = "outputs_not_packed"  # the bundle went up, some declared files are not in it
    AGENT_ERROR = "agent_error"  # the agent failed on its side; the run was stopped


LOST_OUTPUT: frozenset[FinishCode] = frozenset({
    FinishCode.BUNDLE_UPLOAD_FAILED, FinishCode.PACKING_FAILED, FinishCode.OUTPUTS_NOT_PACKED,
})

# Protocol v2 agents send no ``code``: their ``finished`` message begins with these words.
# Read only by :func:`finish_code`, for one version (dropped with protocol v4).
LEGACY_FINISH_PREFIXES: dict[str, FinishCode] = {
    "bundle upload failed": FinishCode.BUNDLE_UPLOAD_FAILED,
    "packing outputs failed": FinishCode.PACKING_FAILED,
    "outputs not packed": FinishCode.OUTPUTS_NOT_PACKED,
    "agent error": FinishCode.AGENT_ERROR,
}


def finish_code(report: dict) -> FinishCode | None:
    """The :class:`FinishCode` of a ``finished`` report, or None when it has none.

    The ``code`` field when there is one (an unknown code is None); else, for an agent of
    protocol v2, the code its ``message`` stands for (:data:`LEGACY_FINISH_PREFIXES`).
    """
    code = report.get("code")
    if code:
        try:
            return FinishCode(code)
        except ValueError:
            return None
    message = str(report.get("message") or "")
    for prefix, legacy in LEGACY_FINISH_PREFIXES.items():
        if message.startswith(prefix):
            return legacy
    return None


class ErrorCode(StrEnum):
    """``code`` of an error answer (``{"detail": "...", "code": "..."}``, protocol v3)."""

    STALE_ATTEMPT = "stale_attempt"  # 409: the server no longer runs this attempt on this node
    NOT_ON_NODE = "not_on_node"  # 404: no such job or attempt on this node
    OFFSET_MISMATCH = "offset_mismatch"  # 409 on a bundle call: ``received_bytes`` says where to go on
    LOG_REFUSED = "log_refused"  # 409 on a log chunk the server cannot take (offset past the stream)
    NOT_APPLIED = "not_applied"  # 503 in a report batch: an earlier report of the attempt failed
    SERVER_ERROR = "server_error"  # 500 in a report batch: send it again


def is_stale(status: int, body: object) -> bool:
    """Whether an answer to a per-job call says "this attempt is over here".

    404, or 409 with ``code: stale_attempt``. A server of protocol v2 sends no code: its 409
    ``{"detail": "stale attempt"}`` is read for one version (dropped with protocol v4). A 409
    carrying ``received_bytes`` (bundle calls) is an offset answer, never stale.
    """
    if status == 404:
        return True
    if status != 409:
        return False
    if isinstance(body, dict):
        if "received_bytes" in body:
            return False
        if body.get("code"):
            return body["code"] == ErrorCode.STALE_ATTEMPT
        return "stale" in str(body.get("detail", "")).lower()  # protocol v2 server
    return "stale" in str(body).lower()  # protocol v2 server behind a proxy that rewrote the body
