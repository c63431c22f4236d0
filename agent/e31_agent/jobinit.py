"""The job's init: runs in front of ``/bin/sh -c CMD`` in the sandbox's PID namespace (SPEC §6).

Started as ``python -I -S -c SOURCE CMD...`` (:func:`argv`), stdlib only, so it
needs nothing of the agent's package inside the sandbox. It makes itself the
*child subreaper* of the namespace (every orphan of the job is re-parented to
it and reaped here), then runs the command and waits:

- **outside a stop**, when the command ends it exits at once with the
  command's status; bubblewrap then ends the namespace and what the command
  left is killed, as before;
- **during a stop** (it got SIGTERM: a cancel, the time limit, a drain), it
  sends SIGTERM on to every process of the namespace (:func:`_forward`) and, when the command's
  shell exits, keeps the namespace up until every process is gone, or the
  agent's SIGKILL after the grace ends it. So a process that traps SIGTERM
  to save its state gets the whole grace, whatever its shell does.

The exit status is the command's: its code, or the same signal re-raised.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
LATE_TERM_S = 0.05  # a stop's SIGTERM reaches the shell and this init at nearly the same time


def argv(python: str | None = None) -> list[str]:
    """The argv prefix that runs this init in front of a command: ``[python, -I, -S, -c, SOURCE]``."""
    return [python or sys.executable, "-I", "-S", "-c", Path(__file__).read_text()]


def _subreaper() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _forward() -> None:
    """SIGTERM every process of the namespace outside this init's process group (one that
    left it with ``setsid``), but PID 1. The group itself, the command's shell included, has
    the stop's own signal (``killpg``): a second SIGTERM could cut a shell's trap short."""
    group = os.getpgid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, os.getpid()):
            continue
        try:
            if os.getpgid(int(entry)) != group:
                os.kill(int(entry), signal.SIGTERM)
        except OSError:
            pass


def run(command: list[str]) -> int:
    """Run ``command`` as described above; returns its exit code (or re-raises its killing signal)."""
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        _forward()

    _subreaper()
    signal.signal(signal.SIGTERM, on_term)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    status = None
    while True:
        try:
            done, st = os.wait()
        except ChildProcessError:
            break
        if done == pid:
            status = st
            if not stopping:
                time.sleep(LATE_TERM_S)
            if not stopping:
                break  # the command ended by itself: what it left dies with the namespace
    if status is None:
        return 1
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
