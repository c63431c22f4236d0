"""The per-job supervisor: ``python -m e31_agent.shim RUN_DIR``.

The agent starts one shim per run, in a session of its own, so the job
outlives the agent: an agent killed mid-job (``kill -9``, an upgrade) finds
the shim again when it starts and takes the job up where it was
(:mod:`e31_agent.state`). The shim

1. reads ``RUN_DIR/launch.json``: ``argv``, ``cwd``, ``env``, ``log_path``,
   and optionally ``cpus`` (CPU ids for ``sched_setaffinity``),
   ``memory_bytes`` (``RLIMIT_AS``), ``nofile`` (``RLIMIT_NOFILE``),
   ``uid``/``gid`` (run the command as that user; the shim stays root),
   ``stop_at`` (epoch seconds) and ``grace_s``: the shim's own time limit,
   ``cgroup``: a cgroup v2 dir the shim moves itself into before it starts
   the command, so the command and all it forks are capped by its
   ``memory.max`` (:mod:`e31_agent.cgroups`); ``sandbox``: the plan of the
   attempt's tenant sandbox (:mod:`e31_agent.sandbox`): the shim takes a
   slot user (and holds it while it lives), hands the job dir to it and
   starts the command inside bubblewrap; for ``network: egress`` it starts
   slirp4netns before the command may run, and lets it go when the command
   has ended;
2. becomes a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux
   3.4+), so every descendant of the job that loses its parent, also one
   that double-forked and called ``setsid``, is re-parented to the shim
   rather than to init and stays findable as the shim's descendant;
3. starts the command in a new session (its own process group, led by the
   shell), stdin from ``/dev/null``, stdout and stderr through two pipes
   copied to ``log_path`` with an index of which stream each read came from
   and when (:mod:`e31_agent.logindex`); writes ``child.json`` ``{"pid": shell pid}``;
4. reaps every child; when the shell ends writes ``exit.json``
   ``{"exit_code": N}`` (shell terms: 128 + N after signal N);
5. exits once it has no child left. Processes the shell left behind keep
   it alive until the agent stops them (SIGTERM, grace, SIGKILL).

The agent enforces the time limit; the shim's ``stop_at`` (the agent's
SIGTERM time plus a second) is the backstop for an agent that is frozen or
dead: then the shim sends SIGTERM to the job's group and its descendants,
SIGKILL after ``grace_s``, and records ``"stopped": "time_limit"`` in
``exit.json``. An agent that has begun a stop writes ``RUN_DIR/stopping.json``
(``{"kill_at": epoch s}``, :data:`STOP_NOTICE`) before its SIGTERM; a backstop that finds it sends
no second SIGTERM (one could cut a trap's save short) and only SIGKILLs what is left at ``kill_at``.
With ``beat_path`` and ``loss_timeout_s`` the shim also stops the job
(``"stopped": "agent_lost"``) once that file's mtime (the agent touches it
on every answer from the server) is older than the node-loss timeout: the
server has then declared the node down and requeued the job, so the run must not go on as a ghost (SPEC §6, fencing).

The shim's own environment is a bare ``PATH`` and ``PYTHONPATH``; the job's environment is in
``launch.json`` (mode 0600), except the values of the job's secrets (issue 23): with
``"secrets_on_stdin": true`` the agent writes ``{"NAME": "value"}`` (JSON) to the shim's standard
input and closes it; the shim adds them to the command's environment and replaces each value in
the command's output by ``[secret NAME]`` before it is written to the log
(:class:`~e31_agent.redactor.Redactor`). They are kept in memory only: never a file, never a
command line.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .logindex import StreamCopier
from .oom import JOB, oom_score_adj_set, protect_supervisor

PR_SET_CHILD_SUBREAPER = 36


def set_child_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux); False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _limits(launch: dict[str, Any]):
    """The ``preexec_fn`` that applies the job's CPU set and rlimits in the child."""
    cpus = launch.get("cpus")
    memory = launch.get("memory_bytes")
    nofile = launch.get("nofile")

    def apply() -> None:
        oom_score_adj_set(JOB)  # the job before the shim and the agent (e31_agent.oom)
        if cpus:
            try:
                os.sched_setaffinity(0, cpus)
            except OSError:
                pass
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if nofile:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            cap = nofile if hard == resource.RLIM_INFINITY else min(nofile, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (cap, cap))

    return apply


def _descendants() -> list[int]:
    """Pids of this process's live descendants (by ``/proc``; Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [os.getpid()]
    while todo:
        for pid in children.get(todo.pop(), []):
            out.append(pid)
            todo.append(pid)
    return out


def _signal_all(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass
    for pid in _descendants():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


STOP_NOTICE = "stopping.json"  # the agent's word that it sent the stop's SIGTERM: {"kill_at": epoch s}


def _backstop(stop_at: float, grace_s: float, pgid: int, stopped: dict[str, str], notice: Path) -> None:
    """At ``stop_at`` (epoch s), stop the whole job: SIGTERM, ``grace_s``, SIGKILL until none is left."""
    while time.time() < stop_at:
        time.sleep(min(1.0, max(0.01, stop_at - time.time())))
    _stop_all("time_limit", grace_s, pgid, stopped, notice)


def _beat_age(beat_path: str, since: float) -> float:
    """Seconds since the agent last reached the server (the mtime of ``beat_path``; ``since``,
    the shim's start, when the file is missing or older)."""
    try:
        last = max(os.stat(beat_path).st_mtime, since)
    except OSError:
        last = since
    return time.time() - last


def _orphan_watch(beat_path: str, loss_timeout_s: float, grace_s: float, pgid: int,
                  stopped: dict[str, str], notice: Path) -> None:
    """Stop the whole job once the agent has not reached the server for ``loss_timeout_s``: the
    server then declares the node down and gives the job's GPUs up, so the run must not go on
    (the agent is dead, frozen, or cut off from the server)."""
    since = time.time()
    while _beat_age(beat_path, since) < loss_timeout_s:
        time.sleep(min(1.0, max(0.05, loss_timeout_s - _beat_age(beat_path, since))))
    print(f"no word from the agent for {loss_timeout_s:.0f} s (the node-loss timeout): stopping the job",
          flush=True)
    _stop_all("agent_lost", grace_s, pgid, stopped, notice)


_stop_lock = threading.Lock()


def _agents_kill_at(notice: Path) -> float | None:
    """When the agent's stop ends its grace (epoch s), if the agent has begun one (:data:`STOP_NOTICE`)."""
    try:
        return float(json.loads(notice.read_text())["kill_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _stop_all(reason: str, grace_s: float, pgid: int, stopped: dict[str, str], notice: Path) -> None:
    """SIGTERM the job's group and descendants, SIGKILL after ``grace_s`` until none is left;
    ``stopped["reason"]`` says why (the first stop wins; a later one leaves the stopping to it).
    Every process gets one SIGTERM: when the agent has sent it (``notice``), none from here, and the
    SIGKILL comes at the agent's ``kill_at``."""
    with _stop_lock:
        if "reason" in stopped:
            return
        stopped["reason"] = reason
    kill_at = _agents_kill_at(notice)
    if kill_at is None:
        _signal_all(pgid, signal.SIGTERM)
        kill_at = time.time() + grace_s
    while _descendants() and time.time() < kill_at:
        time.sleep(0.1)
    while _descendants():
        _signal_all(pgid, signal.SIGKILL)
        time.sleep(0.1)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _shell_terms(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _job_user(launch: dict[str, Any], prepared: Any) -> tuple[int, int] | None:
    """``(uid, gid)`` the command runs as when the shim starts it as another user (the sandbox's
    slot user, or the launch's ``uid``), else None."""
    if prepared is not None and prepared.uid is not None:
        return int(prepared.uid), int(prepared.gid)
    if prepared is None and launch.get("uid") is not None:
        return int(launch["uid"]), int(launch["gid"])
    return None


def launch_secret_values(secrets: dict[str, str]) -> dict[str, str]:
    """``{NAME: value}`` to redact from the log: the secrets as given, an apptainer
    ``APPTAINERENV_NAME`` under its job-side ``NAME``."""
    return {name.removeprefix("APPTAINERENV_"): value for name, value in secrets.items()}


def run(run_dir: Path) -> int:
    """Supervise the job described in ``run_dir``; returns the shim's exit status."""
    launch = json.loads((run_dir / "launch.json").read_text())
    secrets: dict[str, str] = {}
    if launch.get("secrets_on_stdin"):
        secrets = {str(k): str(v) for k, v in json.loads(sys.stdin.buffer.read() or b"{}").items()}
        os.close(0)
        os.open(os.devnull, os.O_RDONLY)  # fd 0 again, so nothing later opens a file as stdin
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # only the agent stops a job
    protect_supervisor()
    set_child_subreaper()
    if launch.get("cgroup"):  # before the fork: nothing of the job starts outside it
        with open(Path(launch["cgroup"]) / "cgroup.procs", "w") as fh:
            fh.write("0")
    kwargs: dict[str, Any] = {"preexec_fn": _limits(launch)}
    argv = list(launch["argv"])
    prepared = None
    if launch.get("sandbox"):
        from .sandbox import prepare

        prepared = prepare(launch["sandbox"])  # the slot user, the job dir handed over, bubblewrap's argv
        if launch["sandbox"].get("wrap", True):
            argv = prepared.argv + argv
            kwargs.update(preexec_fn=prepared.preexec(_limits(launch), stage=True), pass_fds=prepared.pass_fds)
        elif prepared.uid is not None:  # a container runtime runs the image as the slot user
            argv = [a.replace("@E31_SLOT_UID@", str(prepared.uid)).replace("@E31_SLOT_GID@", str(prepared.gid))
                    for a in argv]
    elif launch.get("uid") is not None and os.geteuid() == 0:
        kwargs.update(user=int(launch["uid"]), group=int(launch["gid"]), extra_groups=[])
    # stdout and stderr through pipes of their own, copied to the log with an index saying
    # which stream each read came from and when (e31_agent.logindex).
    copier = StreamCopier(launch["log_path"], secrets=launch_secret_values(secrets))
    out_r, out_w, err_r, err_w = copier.pipes()
    owner = _job_user(launch, prepared)
    if owner is not None and os.geteuid() == 0:
        for fd in (out_w, err_w):  # the job's own: `> /dev/stdout` or `tee /dev/stderr` reopens them
            os.fchown(fd, *owner)
    try:
        child = subprocess.Popen(
            argv,
            cwd=launch["cwd"],
            env={**launch["env"], **secrets},
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
            close_fds=True,
            **kwargs,
        )
    finally:
        os.close(out_w)
        os.close(err_w)
    copier.start(out_r, err_r)
    if prepared is not None:
        prepared.after_fork()
        try:
            prepared.start_network(child.pid)
        except OSError as exc:
            child.kill()
            child.wait()
            copier.join(2.0)
            with open(launch["log_path"], "rb") as fh:  # bubblewrap says why it ended, if it did
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - 300))
                said = fh.read().decode(errors="replace").strip().replace("\n", " | ")
            print(f"the job sandbox did not start: {exc}{f' ({said})' if said else ''}", flush=True)
            return 1
    _write_json(run_dir / "child.json", {"pid": child.pid})
    stopped: dict[str, str] = {}
    grace = float(launch.get("grace_s") or 0)
    if launch.get("stop_at"):
        threading.Thread(target=_backstop, args=(float(launch["stop_at"]), grace, child.pid, stopped,
                                                 run_dir / STOP_NOTICE), daemon=True).start()
    if launch.get("beat_path") and launch.get("loss_timeout_s"):
        threading.Thread(target=_orphan_watch, args=(launch["beat_path"], float(launch["loss_timeout_s"]), grace,
                                                     child.pid, stopped, run_dir / STOP_NOTICE),
                         daemon=True).start()
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            copier.join(5.0)  # what the last writers left in the pipes
            return 0
        except InterruptedError:
            continue
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
            copier.join(2.0)  # the output written before the end is in the log before exit.json
            result: dict[str, Any] = {"exit_code": _shell_terms(status)}
            if stopped.get("reason"):
                result["stopped"] = stopped["reason"]
            _write_json(run_dir / "exit.json", result)
            if prepared is not None:
                prepared.stop_network()  # slirp4netns ends, so the shim's last child goes


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m e31_agent.shim RUN_DIR", file=sys.stderr)
        return 2
    return run(Path(args[0]))


if __name__ == "__main__":
    sys.exit(main())
