"""What the agent keeps on disk about each attempt it runs, so a restarted agent finds it again.

One directory per attempt, ``WORKDIR/runs/<job_id>-<attempt>/`` (mode 0700,
out of the jobs' reach), holding small files, each written whole
(temporary file, fsync, rename) so a crash never leaves half of one:

``assignment.json``
    the assignment as the server sent it, plus the deadline as
    ``deadline_mono`` (``time.monotonic()`` seconds, valid for ``boot_id``)
    and ``deadline_wall`` (epoch seconds, used after a reboot).
``phase``
    how far the attempt got, an :class:`e31_protocol.AgentPhase`: ``accepted``,
    ``staging``, ``running`` (the shim started), ``output`` (the run ended;
    ``result.json`` holds how), ``finished`` (the ``finished`` report is queued).
``launch.json``, ``shim.json``, ``child.json``, ``exit.json``
    the per-job shim's input and output (:mod:`e31_agent.shim`).
``reports.jsonl``
    the report spool (:mod:`e31_agent.reports`).
``log.offset``
    bytes of the log the server acknowledged (:mod:`e31_agent.logship`).
``bundle.json``
    the packed bundle's size, sha256 and files, written before its upload
    starts, so a resumed upload sends the very same archive.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from e31_protocol import AgentPhase, ExitReason

from .models import Assignment, JobRef
from .paths import remove_tree


def boot_id() -> str:
    """This boot's id (Linux); monotonic clock readings are comparable within one boot only."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_json(path: Path, data: Any) -> None:
    """:func:`write_atomic` of ``data`` as JSON."""
    write_atomic(path, json.dumps(data).encode())


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class RunState:
    """The state directory of one attempt (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, path: Path, raw_assignment: dict[str, Any], deadline_mono: float) -> RunState:
        """Make the directory and store the assignment with its deadline (monotonic seconds)."""
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        state = cls(path)
        left = deadline_mono - time.monotonic()
        write_json(path / "assignment.json", {
            "assignment": raw_assignment, "deadline_mono": deadline_mono,
            "deadline_wall": time.time() + left, "boot_id": boot_id(),
            "accepted_mono": time.monotonic(), "accepted_wall": time.time(),
        })  # fmt: skip
        return state

    def elapsed_s(self) -> float | None:
        """Seconds since this agent accepted the assignment, on the monotonic clock (the wall clock
        after a reboot); None when the state predates the field. Sent as ``elapsed_s`` (SPEC §4)."""
        data = read_json(self.path / "assignment.json")
        if not isinstance(data, dict) or "accepted_mono" not in data:
            return None
        if data.get("boot_id") and data["boot_id"] == boot_id():
            elapsed = time.monotonic() - float(data["accepted_mono"])
        else:
            elapsed = time.time() - float(data["accepted_wall"])
        return round(max(0.0, elapsed), 3)

    def load_assignment(self) -> Assignment:
        """The stored assignment with its deadline on this process's monotonic clock.

        Raises ``ValueError`` (or ``KeyError``) when the file is missing or bad.
        """
        data = read_json(self.path / "assignment.json")
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: no assignment")
        now = time.monotonic()
        if data.get("boot_id") and data["boot_id"] == boot_id():
            left = float(data["deadline_mono"]) - now
        else:
            left = float(data["deadline_wall"]) - time.time()
        raw = dict(data["assignment"])
        raw["deadline_in_s"] = max(0.0, left)
        return Assignment.from_json(raw, received_at=now)

    @property
    def ref(self) -> JobRef:
        job_id, attempt = self.path.name.split("-")
        return JobRef(int(job_id), int(attempt))

    @property
    def phase(self) -> AgentPhase:
        """The last phase written, ``accepted`` when none was (or it is unreadable); older
        words are mapped (:meth:`AgentPhase.parse`)."""
        try:
            value = (self.path / "phase").read_text()
        except OSError:
            return AgentPhase.ACCEPTED
        return AgentPhase.parse(value, default=AgentPhase.ACCEPTED)

    def set_phase(self, phase: AgentPhase) -> None:
        """Record ``phase`` (written whole). Raises ``ValueError`` for a word that is no phase."""
        write_atomic(self.path / "phase", AgentPhase(phase).value.encode())

    @property
    def result(self) -> dict[str, Any] | None:
        """``{"reason", "exit_code", "pack"}`` once the run ended, else None."""
        return read_json(self.path / "result.json")

    def set_result(self, *, reason: ExitReason, exit_code: int | None, pack: bool, message: str | None = None,
                   elapsed_s: float | None = None) -> None:
        result: dict = {"reason": ExitReason(reason).value, "exit_code": exit_code, "pack": pack}
        if elapsed_s is not None:  # measured at the end: a resumed run reports the same
            result["elapsed_s"] = elapsed_s
        if message:  # a folded exited (sent with finished) needs it after a restart
            result["message"] = message
        write_json(self.path / "result.json", result)

    @property
    def reports_path(self) -> Path:
        return self.path / "reports.jsonl"

    @property
    def log_offset_path(self) -> Path:
        return self.path / "log.offset"

    @property
    def bundle_meta_path(self) -> Path:
        return self.path / "bundle.json"

    def remove(self) -> None:
        remove_tree(self.path)


def run_states(runs_dir: Path) -> list[RunState]:
    """Every attempt's state directory under ``runs_dir``, oldest job first."""
    if not runs_dir.is_dir():
        return []
    found = []
    for path in runs_dir.iterdir():
        parts = path.name.split("-")
        if path.is_dir() and len(parts) == 2 and all(p.isdigit() for p in parts):
            found.append(RunState(path))
    return sorted(found, key=lambda s: (s.ref.job_id, s.ref.attempt))
