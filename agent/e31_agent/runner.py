"""Running a job's command in its own process group, and stopping all of it.

The command runs as ``/bin/sh -c COMMAND`` in the job dir under a per-job
shim (:mod:`e31_agent.shim`) that outlives the agent, in a new session (so
its own process group), with a clean environment, stdout and stderr
together into one log file. Every process of the job is found when it is
stopped: it descends from the shim (a child subreaper, so double-forked
``setsid`` daemons stay its descendants), belongs to the shell's process
group, or carries ``E31_RUN_MARKER`` in its environment.
"""

from __future__ import annotations

import json
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
from typing import Any

import psutil
from e31_protocol import ExitReason

from .shim import STOP_NOTICE
from .state import read_json, write_json

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
    gpus: Sequence[str | int],
    marker: str,
) -> dict[str, str]:
    """The job's environment, built from nothing (the agent's own is not passed on).

    In rising precedence: PATH (the agent's Python first, then the system),
    HOME (the job dir), LANG, PYTHONUNBUFFERED (so logs stream); then
    ``spec.work.env``; then the assignment's ``env`` (``E31_JOB_ID``...);
    then ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES`` (the leased
    GPUs, by UUID when the server sent them, else by index) and the marker.
    """
    python_dir = os.path.dirname(os.path.abspath(sys.executable))
    env = {
        "PATH": f"{python_dir}:{SYSTEM_PATH}",
        "HOME": str(job_dir),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(spec_env)
    env.update(assignment_env)
    visible = ",".join(str(g) for g in gpus)
    env["CUDA_VISIBLE_DEVICES"] = visible
    env["NVIDIA_VISIBLE_DEVICES"] = visible or "void"
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


def kill_marked(scope: str, *, keep: frozenset[str] = frozenset()) -> int:
    """SIGKILL every process a job of this workdir left (an agent that crashed),
    except those whose marker is in ``keep`` (runs taken up again).

    Returns how many were killed.
    """
    procs = find_marked(lambda m: m.startswith(f"{scope}:") and m not in keep)
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
    """One started command under its shim (:mod:`e31_agent.shim`), and everything it spawned.

    The shim leads a session of its own and is a child subreaper; the command's
    shell leads another (``pgid`` = the shell's pid). The job's processes are
    the shim's descendants, the members of that group, and anything carrying
    the run's marker, the shim itself excluded.
    """

    def __init__(
        self,
        *,
        run_dir: Path,
        shim_pid: int,
        shim_create_time: float,
        child_pid: int,
        marker: str,
        teardown: Sequence[str] | None = None,
        popen: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.shim_pid = shim_pid
        self.shim_create_time = shim_create_time
        self.pid = child_pid
        self.pgid = child_pid  # start_new_session: the shell leads its own group
        self.marker = marker
        self.teardown = list(teardown) if teardown else None
        self._popen = popen  # set when this agent started the shim (so it reaps it)
        self._exit_code: int | None = None
        self.stopped_by: str | None = None  # "time_limit" when the shim's backstop stopped the run
        self._lock = threading.Lock()

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        log_path: Path,
        run_dir: Path,
        teardown: Sequence[str] | None = None,
        limits: dict[str, Any] | None = None,
        start_timeout_s: float = 60.0,
        secret_env: dict[str, str] | None = None,
    ) -> JobProcess:
        """Start ``argv`` (usually ``/bin/sh -c COMMAND``) under a new shim.

        ``limits`` may hold ``cpus`` (list of CPU ids), ``memory_bytes``,
        ``nofile``, ``uid`` and ``gid`` (see the shim). Writes
        ``launch.json`` and ``shim.json`` in ``run_dir``. Raises ``OSError``
        when the shim cannot start the command within ``start_timeout_s`` (60 s: a shim that exits
        fails at once; the wait only covers a slow start, e.g. the sandbox's set-up on a loaded
        host, which at 15 s once failed a job "did not start: no word" in a full CI run).
        ``secret_env``: variables whose values are secrets (issue 23): never written to
        ``launch.json`` nor put on a command line; they go to the shim through a pipe on its
        standard input, and the shim redacts them from the log.
        """
        log_path.parent.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in ("child.json", "exit.json", STOP_NOTICE):
            (run_dir / name).unlink(missing_ok=True)
        launch = {"argv": list(argv), "cwd": str(cwd), "env": env, "log_path": str(log_path), **(limits or {})}
        if secret_env:
            launch["secrets_on_stdin"] = True
        write_json(run_dir / "launch.json", launch)
        package_root = str(Path(__file__).resolve().parent.parent)
        with open(run_dir / "shim.log", "ab") as shim_log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "e31_agent.shim", str(run_dir)],
                cwd=run_dir,
                env={"PATH": SYSTEM_PATH, "PYTHONPATH": package_root, "LANG": "C.UTF-8"},
                stdin=subprocess.PIPE if secret_env else subprocess.DEVNULL,
                stdout=shim_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        if secret_env:
            assert popen.stdin is not None
            try:
                popen.stdin.write(json.dumps(secret_env).encode())
                popen.stdin.close()
            except OSError:  # the shim died at once: the wait below says why
                pass
        end = time.monotonic() + start_timeout_s
        child = None
        while child is None:
            child = read_json(run_dir / "child.json")
            if child is not None:
                break
            if popen.poll() is not None or time.monotonic() > end:
                if popen.poll() is None:
                    popen.kill()
                    popen.wait()
                tail = (run_dir / "shim.log").read_bytes()[-500:].decode(errors="replace").strip()
                raise OSError(f"the command did not start: {tail.splitlines()[-1] if tail else 'no word'}")
            time.sleep(0.01)
        create_time = psutil.Process(popen.pid).create_time()
        write_json(run_dir / "shim.json", {"pid": popen.pid, "create_time": create_time,
                                           "child_pid": int(child["pid"]), "marker": env[MARKER_VAR],
                                           "teardown": list(teardown) if teardown else None})
        return cls(run_dir=run_dir, shim_pid=popen.pid, shim_create_time=create_time,
                   child_pid=int(child["pid"]), marker=env[MARKER_VAR], teardown=teardown, popen=popen)

    @classmethod
    def adopt(cls, run_dir: Path) -> JobProcess | None:
        """The run a previous agent started in ``run_dir``, when its shim still runs
        or its command has ended (``exit.json``); None when it is lost (the shim
        is gone without recording an exit, or never started)."""
        shim = read_json(run_dir / "shim.json")
        if not isinstance(shim, dict):
            return None
        proc = cls(run_dir=run_dir, shim_pid=int(shim["pid"]), shim_create_time=float(shim["create_time"]),
                   child_pid=int(shim["child_pid"]), marker=str(shim["marker"]), teardown=shim.get("teardown"))
        if proc._shim_alive() or proc.poll() is not None:
            return proc
        return None

    # -- state ---------------------------------------------------------------

    def _shim(self) -> psutil.Process | None:
        """The live shim, or None (gone, a zombie, or its pid reused)."""
        if self._popen is not None and self._popen.poll() is not None:
            return None
        try:
            proc = psutil.Process(self.shim_pid)
            if abs(proc.create_time() - self.shim_create_time) > 0.01 or not _alive(proc):
                return None
            return proc
        except psutil.Error:
            return None

    def _shim_alive(self) -> bool:
        return self._shim() is not None

    def poll(self) -> int | None:
        """The command's exit code (shell terms) once its shell ended, else None."""
        if self._exit_code is None:
            data = read_json(self.run_dir / "exit.json")
            if isinstance(data, dict):
                self._exit_code = int(data["exit_code"])
                self.stopped_by = data.get("stopped")
        return self._exit_code

    @property
    def exit_code(self) -> int | None:
        return self.poll()

    @property
    def lost(self) -> bool:
        """The shim is gone without recording how the command ended."""
        if self.poll() is not None or self._shim_alive():
            return False
        return self.poll() is None  # it may have written exit.json just before it went

    def processes(self) -> list[psutil.Process]:
        """Every live process of the job: the shim's descendants, the shell's group,
        and anything with the run's marker (never the shim itself)."""
        found: dict[int, psutil.Process] = {}
        shim = self._shim()
        if shim is not None:
            try:
                for proc in shim.children(recursive=True):
                    if _alive(proc):
                        found[proc.pid] = proc
            except psutil.Error:
                pass
        for proc in find_marked(lambda m: m == self.marker, pgid=self.pgid):
            found.setdefault(proc.pid, proc)
        found.pop(self.shim_pid, None)
        return list(found.values())

    # -- stopping ------------------------------------------------------------

    def stop(self, grace_s: float) -> list[psutil.Process]:
        """SIGTERM everything (once: the shim is told, see :meth:`_notify_shim`), SIGKILL what is
        left after ``grace_s`` seconds.

        Idempotent and safe from several threads. Returns the processes still
        alive at the end (empty unless something could not be killed). Waits
        (at most 5 s) for the shim to record the exit and go.
        """
        with self._lock:
            procs = self.processes()
            if procs:
                self._notify_shim(grace_s)
                self._signal(signal.SIGTERM, procs)
                end = time.monotonic() + grace_s
                while procs and time.monotonic() < end:
                    time.sleep(0.1)  # each look scans the process table
                    procs = self.processes()
            for _ in range(10):
                if not procs:
                    break
                self._signal(signal.SIGKILL, procs)
                _wait_gone(procs, 1.0)
                procs = self.processes()
            if self.teardown:
                _run_quietly(self.teardown)
            self._wait_shim(5.0)
            if procs:
                log.error("processes %s of the job survived SIGKILL", [p.pid for p in procs])
            return procs

    def _notify_shim(self, grace_s: float) -> None:
        """Tell the shim a stop has begun (:data:`~e31_agent.shim.STOP_NOTICE`), so its backstop,
        should it fire in the grace, sends no second SIGTERM. A full disk loses only the notice."""
        try:
            write_json(self.run_dir / STOP_NOTICE, {"kill_at": time.time() + grace_s})
        except OSError as exc:
            log.warning("stop notice for shim %d not written: %s", self.shim_pid, exc)

    def _wait_shim(self, timeout_s: float) -> None:
        if self._popen is not None:
            try:
                self._popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.error("job shim %d did not end", self.shim_pid)
            return
        end = time.monotonic() + timeout_s
        while self._shim_alive() and time.monotonic() < end:
            time.sleep(0.02)

    def _signal(self, sig: int, procs: list[psutil.Process]) -> None:
        # killpg reaches members forked since the scan; only while the group
        # demonstrably exists, so a reused group id is never hit. Each process gets the signal
        # once: a second SIGTERM while a shell runs its trap can kill it before the trap's exit
        grouped = {p.pid for p in procs if _pgid(p) == self.pgid}
        if grouped:
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                grouped = set()
        for proc in procs:
            if proc.pid in grouped:
                continue
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
    """How a run ended: ``reason`` is an :class:`~e31_protocol.ExitReason` (``exit``,
    ``time_limit``, ``cancelled``) or :data:`DROPPED`; ``exit_code`` in shell terms
    (see :func:`exit_status`)."""

    reason: ExitReason | str
    exit_code: int | None


DROPPED = "dropped"  # RunResult.reason of a dropped run: the caller stops it and reports nothing


def supervise(
    proc: JobProcess,
    *,
    deadline: float,
    cancel: threading.Event,
    drop: threading.Event,
    grace_s: float,
    tick_s: float = 0.05,
    lost_every: int = 20,
) -> RunResult:
    """Wait for the run to end, stopping it at ``deadline`` (monotonic seconds)
    or when ``cancel``/``drop`` is set; then make sure nothing of it is left.

    A cancel or a drop wakes it at once; the command's end (its ``exit.json``) is looked for
    every ``tick_s`` seconds, a shim gone without one every ``lost_every`` ticks (a process-table
    read: the costly look; issue 27 item 3). Once the shell has ended, leftovers it started in the
    background get the same SIGTERM, grace, SIGKILL treatment. On ``drop`` it returns at once
    and leaves the stopping to the caller.
    """
    ticks = 0
    while True:
        ticks += 1
        if proc.poll() is not None or (ticks % lost_every == 0 and proc.lost):
            reason: ExitReason | str = ExitReason.EXIT
            break
        if drop.is_set():
            reason = DROPPED
            break
        if cancel.is_set():
            reason = ExitReason.CANCELLED
            break
        now = time.monotonic()
        if now >= deadline:
            reason = ExitReason.TIME_LIMIT
            break
        cancel.wait(min(tick_s, max(0.0, deadline - now)))
    if reason == DROPPED:  # the caller decides how hard to stop
        return RunResult(reason=reason, exit_code=proc.exit_code)
    if reason == ExitReason.EXIT and proc.stopped_by == ExitReason.TIME_LIMIT:  # agent frozen; the shim stopped it
        reason = ExitReason.TIME_LIMIT
    if reason != ExitReason.EXIT:
        log.info("stopping pid %d (%s), grace %.0f s", proc.pid, reason, grace_s)
    proc.stop(grace_s)
    return RunResult(reason=reason, exit_code=proc.exit_code)
