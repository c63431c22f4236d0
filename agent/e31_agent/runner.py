"""Running a job's command in its own process group, and stopping all of it.

The command runs as ``/bin/sh -c COMMAND`` in the job dir, in a new session
(so its own process group), with a clean environment, stdout and stderr
together into one log file. Every process of the job carries
``E31_RUN_MARKER`` in its environment, so one that left the process group
(``setsid``) is still found when the job is stopped.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

MARKER_VAR = "E31_RUN_MARKER"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def new_marker(scope: str, job_id: int, attempt: int) -> str:
    """A value for ``E31_RUN_MARKER``: ``scope:job:attempt:random``.

    ``scope`` names the agent's workdir, so a restarted agent can find what
    a crashed one left behind (:func:`kill_marked`).
    """
    return f"{scope}:{job_id}:{attempt}:{secrets.token_hex(6)}"


def build_env(
    *,
    job_dir: Path,
    spec_env: dict[str, str],
    assignment_env: dict[str, str],
    gpu_indices: Sequence[int],
    marker: str,
) -> dict[str, str]:
    """The job's environment, built from nothing (the agent's own is not passed on).

    In rising precedence: PATH (the agent's Python first, then the system),
    HOME (the job dir), LANG, PYTHONUNBUFFERED (so logs stream); then
    ``spec.work.env``; then the assignment's ``env`` (``E31_JOB_ID``...);
    then ``CUDA_VISIBLE_DEVICES`` (the leased GPU indices) and the marker.
    """
    python_dir = os.path.dirname(sys.executable)
    env = {
        "PATH": f"{python_dir}:{SYSTEM_PATH}",
        "HOME": str(job_dir),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(spec_env)
    env.update(assignment_env)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indices)
    env[MARKER_VAR] = marker
    return env


def exit_status(returncode: int | None) -> int | None:
    """Popen's return code in shell terms: killed by signal N gives 128 + N."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def find_marked(
    predicate: Callable[[str], bool], *, pgid: int | None = None
) -> list[psutil.Process]:
    """Live processes in process group ``pgid`` or whose marker passes ``predicate``."""
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if pgid is not None and os.getpgid(proc.pid) == pgid:
                if _alive(proc):
                    found.append(proc)
                continue
            marker = proc.environ().get(MARKER_VAR)
        except (psutil.Error, OSError):
            continue
        if marker and predicate(marker) and _alive(proc):
            found.append(proc)
    return found


def kill_marked(scope: str) -> int:
    """SIGKILL every process a job of this workdir left (an agent that crashed).

    Returns how many were killed.
    """
    procs = find_marked(lambda m: m.startswith(f"{scope}:"))
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    _wait_gone(procs, 3.0)
    return len(procs)


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> None:
    # not psutil.wait_procs: an orphan that nobody reaps stays a zombie, and
    # a zombie is dead for our purposes
    end = time.monotonic() + timeout_s
    while any(_alive(p) for p in procs) and time.monotonic() < end:
        time.sleep(0.02)


class JobProcess:
    """One started command, its process group and everything it spawned."""

    def __init__(
        self, popen: subprocess.Popen[bytes], marker: str, teardown: Sequence[str] | None = None
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session: the shell leads its own group
        self.marker = marker
        self.teardown = list(teardown) if teardown else None
        self._lock = threading.Lock()

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        log_path: Path,
        teardown: Sequence[str] | None = None,
    ) -> JobProcess:
        """Start ``argv`` (usually ``/bin/sh -c COMMAND``); raises ``OSError``."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            popen = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        return cls(popen, env[MARKER_VAR], teardown)

    def poll(self) -> int | None:
        """The shell's return code once it ended, else None."""
        return self.popen.poll()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def processes(self) -> list[psutil.Process]:
        """Every live process of the job: its group, and anything with its marker."""
        return find_marked(lambda m: m == self.marker, pgid=self.pgid)

    def stop(self, grace_s: float) -> list[psutil.Process]:
        """SIGTERM everything, SIGKILL what is left after ``grace_s`` seconds.

        Idempotent and safe from several threads. Returns the processes still
        alive at the end (empty unless something could not be killed).
        """
        with self._lock:
            procs = self.processes()
            if procs:
                self._signal(signal.SIGTERM, procs)
                end = time.monotonic() + grace_s
                while procs and time.monotonic() < end:
                    time.sleep(0.1)  # each look scans the process table
                    self.popen.poll()
                    procs = self.processes()
            for _ in range(10):
                if not procs:
                    break
                self._signal(signal.SIGKILL, procs)
                self.popen.poll()
                _wait_gone(procs, 1.0)
                self.popen.poll()
                procs = self.processes()
            if self.teardown:
                _run_quietly(self.teardown)
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("job shell %d did not end", self.pid)
            if procs:
                log.error("processes %s of the job survived SIGKILL", [p.pid for p in procs])
            return procs

    def _signal(self, sig: int, procs: list[psutil.Process]) -> None:
        # killpg reaches members forked since the scan; only while the group
        # demonstrably exists, so a reused group id is never hit
        if any(_pgid(p) == self.pgid for p in procs):
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None


def _run_quietly(argv: Sequence[str]) -> None:
    try:
        subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("%s failed: %s", " ".join(argv), exc)


@dataclass(frozen=True)
class RunResult:
    """How a run ended: ``reason`` is ``exit``, ``time_limit``, ``cancelled``
    or ``dropped``; ``exit_code`` in shell terms (see :func:`exit_status`)."""

    reason: str
    exit_code: int | None


def supervise(
    proc: JobProcess,
    *,
    deadline: float,
    cancel: threading.Event,
    drop: threading.Event,
    grace_s: float,
    tick_s: float = 0.02,
) -> RunResult:
    """Wait for the run to end, stopping it at ``deadline`` (monotonic seconds)
    or when ``cancel``/``drop`` is set; then make sure nothing of it is left.

    Once the shell has ended, leftovers it started in the background get the
    same SIGTERM, grace, SIGKILL treatment. On ``drop`` it returns at once
    and leaves the stopping to the caller.
    """
    while True:
        if proc.poll() is not None:
            reason = "exit"
            break
        if drop.is_set():
            reason = "dropped"
            break
        if cancel.is_set():
            reason = "cancelled"
            break
        now = time.monotonic()
        if now >= deadline:
            reason = "time_limit"
            break
        cancel.wait(min(tick_s, max(0.0, deadline - now)))
    if reason == "dropped":  # the caller decides how hard to stop
        return RunResult(reason=reason, exit_code=exit_status(proc.returncode))
    if reason != "exit":
        log.info("stopping pid %d (%s), grace %.0f s", proc.pid, reason, grace_s)
    proc.stop(grace_s)
    return RunResult(reason=reason, exit_code=exit_status(proc.returncode))
