"""The agent's main loop: register, heartbeat, long-poll for work, run jobs.

Each assignment runs in its own :class:`~e31_agent.job.JobRun` thread, so
a node runs several jobs at once. Cancels come in on both the work answer
and the heartbeat answer and are idempotent. When the agent is stopped
(SIGTERM) it kills its jobs' processes and reports nothing: the server sees
the heartbeats stop and handles the node as lost (SPEC §3).

An agent that *dies* (``kill -9``, a crash) leaves its jobs running under
their shims. The next agent on the same work dir takes them up again
before it registers (:meth:`Agent._recover`): a run whose shim lives, or
whose command ended with its exit recorded, is resumed; one whose shim is
gone without an exit, or that had not started its command yet, is lost:
its leftovers are killed, its files removed, and it is left out of the
heartbeats' ``running`` lists, so the server requeues it like a node loss
(not charged). A resumed run the server no longer lists at register (it
declared the node down meanwhile) is killed and dropped at once. When a
heartbeat answers ``"state": "down"`` the agent registers again.

Fencing (SPEC §6): an attempt the agent holds and the server has ended
comes back in the heartbeat's (and the work answer's) ``cancel`` list until
the agent stops listing it. An agent that has not reached the server for
the node-loss timeout (sent at register) stops its runs itself, and so does
each job's shim when the agent has not (``agent.beat``, touched on every
answer from the server, is older than that timeout): an agent killed or
frozen leaves no ghost run once the server has given its GPUs up.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import random
import stat
import sys
import threading
import time
from collections import deque
from typing import IO, Any

from e31_protocol import AgentPhase, NodeState

from . import container, images
from .backoff import Backoff
from .cgroups import JobCgroups
from .client import Aborted, ApiClient, ApiError
from .config import AgentConfig, Workdir
from .health import READY_BEATS
from .inventory import collect, gpu_health
from .job import JobRun
from .logindex import index_path
from .models import Inventory, JobRef, RegisterAnswer, WorkAnswer
from .paths import remove_tree
from .prestage import Prestager, start_prestager
from .runner import JobProcess, kill_marked
from .sandbox import Sandbox, SandboxError, detect
from .state import RunState, run_states

log = logging.getLogger(__name__)

RECENT = 1000  # finished attempts remembered, so a late repeat is not run twice
CACHE_RESEND_BEATS = 30  # the input cache list goes with a heartbeat when it changed, and every 30 beats


class WorkdirBusy(Exception):
    """Another agent holds the work directory."""


class RegistrationRefused(Exception):
    """The server refused to register this node (a bad token, most likely)."""


def resolve_job_user(name: str | None) -> tuple[int, int] | None:
    """``(uid, gid)`` the jobs run as when this process is root; None: as the agent's own user.

    ``name`` given: that user (never root). Not given: ``nobody``, provided
    other users can reach the agent's Python (the jobs' ``python``); where
    they cannot (an interpreter under ``/root``, as on a developer's box),
    jobs run as root and a warning says so. Raises ``ValueError`` when the
    named user does not exist or is root.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name or "nobody")
    except KeyError:
        raise ValueError(f"--job-user: no user named {name or 'nobody'!r}") from None
    if entry.pw_uid == 0:
        raise ValueError("--job-user: jobs must not run as root")
    if name is None and not all(others_can_reach(p) for p in (sys.executable, sys.prefix)):
        log.warning("jobs run as root: user nobody cannot reach %s; install the agent where other users can "
                    "read it, or name a user with --job-user", os.path.realpath(sys.executable))
        return None
    return entry.pw_uid, entry.pw_gid


def others_can_reach(path: str) -> bool:
    """True when users other than the owner may search every directory up to ``path``
    (links resolved) and read or run ``path`` itself."""
    real = os.path.realpath(path)
    try:
        if not os.stat(real).st_mode & (stat.S_IROTH | stat.S_IXOTH):
            return False
        parent = os.path.dirname(real)
        while True:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            if parent == os.path.dirname(parent):
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


class Agent:
    """One node's agent. ``run()`` blocks until :meth:`stop` is called."""

    def __init__(self, config: AgentConfig, *, client: ApiClient | None = None) -> None:
        self.config = config
        self.workdir = Workdir(config.workdir)
        self.client = client or ApiClient(
            config.server, config.token, backoff=lambda: Backoff(max_s=config.retry_max_s)
        )
        self.stop_event = self.client.stop  # one event ends the loops and every retry
        self.inventory: Inventory | None = None
        self.registration: RegisterAnswer | None = None
        self.jobs: dict[JobRef, JobRun] = {}
        self._recent: deque[JobRef] = deque(maxlen=RECENT)
        self._lock = threading.Lock()
        self._lockfile: IO[str] | None = None
        self._heartbeat: threading.Thread | None = None
        self._poller: threading.Thread | None = None
        self.prestager: Prestager | None = None
        self._held_images = images.HeldList(None)  # the image store's identities, once registered
        self._resumable: list[tuple[RunState, JobProcess | None]] = []
        self.sandbox: Sandbox | None = None  # every job attempt's sandbox (None: --unsafe-no-sandbox)
        self.job_user: tuple[int, int] | None = None  # unsandboxed jobs' user (agent as root)
        if config.unsafe_no_sandbox:
            log.warning("UNSAFE: jobs run without the tenant sandbox (--unsafe-no-sandbox); the server marks "
                        "this node")
            self.job_user = resolve_job_user(config.job_user)
        else:
            try:
                self.sandbox = detect(slots=config.slot_uids, deny=config.sandbox_deny)
            except SandboxError as exc:
                raise ValueError(f"{exc}. The agent runs no job outside the sandbox unless started with "
                                 "--unsafe-no-sandbox") from None
            log.info("jobs run sandboxed (%s)", f"slot uids {config.slot_uids[0]}-{config.slot_uids[1]}"
                     if self.sandbox.slots else "a user namespace of this user")
        self.cgroups: JobCgroups | None = None  # set up in run(), before any thread starts
        self._last_reached = time.monotonic()  # the last answer from the server (monotonic s)

    # -- public ------------------------------------------------------------

    def run(self) -> None:
        """Register, then serve until stopped.

        Raises :class:`WorkdirBusy` and :class:`RegistrationRefused`.
        """
        self._claim_workdir()
        try:
            if self.cgroups is None and threading.active_count() == 1:  # moving a process moves all its threads
                self.cgroups = JobCgroups.detect()
            self._recover()
            self.inventory = collect(workdir=self.workdir.root, simulate=self.config.simulate)
            self.inventory.sandboxed = self.sandbox is not None
            log.info(
                "registering %s: %d GPUs (%s)%s",
                self.inventory.hostname,
                len(self.inventory.gpus),
                ", ".join(sorted({g.model for g in self.inventory.gpus})) or "none",
                " simulated" if self.inventory.simulated else "",
            )
            try:
                self.registration = self.client.register(self.inventory)
            except Aborted:
                return
            except ApiError as exc:
                raise RegistrationRefused(str(exc)) from None
            reg = self.registration
            self._reached_server()
            log.info(
                "registered as node %s (heartbeat every %.1f s, poll wait %.0f s)",
                reg.node,
                reg.heartbeat_interval_s,
                reg.poll_wait_s,
            )
            self._resume_runs(reg.running)
            # cached inputs may be hard-linked into job dirs when jobs run as other users (slot users or
            # --job-user), who cannot write them
            slotted = self.sandbox is not None and self.sandbox.slots is not None
            runtimes = self.inventory.runtimes if self.inventory else []
            self.prestager = start_prestager(self.client, self.workdir, self.config,
                                             self.job_user or ((0, 0) if slotted else None), runtimes)
            self._held_images = images.HeldList(container.pull_runtime(runtimes))
            self._heartbeat = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._heartbeat.start()
            # the long poll runs in its own thread so a stop need not wait for it
            self._poller = threading.Thread(target=self._poll, name="poll", daemon=True)
            self._poller.start()
            while not self.stop_event.wait(1.0):
                pass
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Ask the agent to stop (safe from a signal handler)."""
        self.stop_event.set()

    def liveness(self) -> dict[str, bool]:
        """``/healthz`` of ``--health-port`` (:mod:`e31_agent.health`): each loop this agent started
        (``heartbeat``, ``poll``) still runs, or is not started yet (still registering)."""
        if self.stop_event.is_set():
            return {"heartbeat": True, "poll": True}  # a deliberate stop: the loops end by design
        return {name: thread is None or thread.is_alive()
                for name, thread in (("heartbeat", self._heartbeat), ("poll", self._poller))}

    def readiness(self) -> dict[str, bool]:
        """``/readyz``: ``registered`` with the server, and ``server``: an answer from it within
        :data:`~e31_agent.health.READY_BEATS` heartbeat intervals."""
        reg = self.registration
        heard = reg is not None and time.monotonic() - self._last_reached < READY_BEATS * reg.heartbeat_interval_s
        return {"registered": reg is not None and not self.stop_event.is_set(), "server": heard}

    def running(self) -> list[JobRef]:
        """The attempts this agent holds, from accept until ``finished`` is sent."""
        with self._lock:
            return [ref for ref, run in self.jobs.items() if not run.done]

    # -- loops -------------------------------------------------------------

    def _poll(self) -> None:
        assert self.registration is not None
        backoff = Backoff()
        while not self.stop_event.is_set():
            try:
                with self._lock:  # assignments we hold do not make the poll answer at once
                    have = list(self.jobs)
                answer = self.client.work(self.registration.poll_wait_s, have=have)
            except Aborted:
                return
            except Exception as exc:  # a refusal (4xx) or an answer we cannot read
                delay = backoff.next()
                log.error("work poll failed (%s); again in %.1f s", exc, delay)
                self.stop_event.wait(delay)
                continue
            backoff.reset()
            self._reached_server()
            try:
                self._take(answer)
            except Exception:
                log.exception("cannot take work answer")
            if self.prestager is not None:  # queued jobs' inputs into the cache, meter off
                self.prestager.update(answer.prestage, assigned=[a.job_id for a in answer.assignments])
            if not answer.assignments:
                # jitter: agents whose polls all timed out at once do not all come back at once;
                # after real work, ask again at once: more may be waiting
                self.stop_event.wait(random.uniform(0, 0.2))

    def _beat(self) -> None:
        assert self.registration is not None
        interval = self.registration.heartbeat_interval_s
        sent: list[str] | None = None  # the cache list the server last acknowledged
        beats = 0
        while not self.stop_event.is_set():
            cached = self._cached_inputs()
            # the list only when it changed, and every CACHE_RESEND_BEATS beats (a server restored
            # from a backup, a lost answer): the server keeps the last one it got
            send = cached if cached != sent or beats % CACHE_RESEND_BEATS == 0 else None
            beats += 1
            try:
                answer = self.client.heartbeat(self.running(), health=self._health(), cached_inputs=send)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
                self._stop_runs_if_cut_off()
            else:
                sent = cached if send is not None else sent
                self._reached_server()
                self._cancel(answer.cancel)
                if answer.state == NodeState.DOWN:
                    self._register_again()
            self.stop_event.wait(interval)

    @property
    def beat_path(self):
        """A file whose mtime is when this agent last reached the server; each job's shim reads it
        and stops its run when it is older than the node-loss timeout (an agent dead, frozen or cut off)."""
        return self.workdir.root / "agent.beat"

    def _reached_server(self) -> None:
        self._last_reached = time.monotonic()
        try:
            self.beat_path.touch()
        except OSError as exc:
            log.warning("cannot touch %s: %s", self.beat_path, exc)

    def _stop_runs_if_cut_off(self) -> None:
        """No word from the server for the node-loss timeout: the server has declared this node
        down and requeued its jobs, so stop them here (as slurmd does on a node marked down)."""
        loss = self.registration.node_loss_timeout_s if self.registration else None
        if not loss or time.monotonic() - self._last_reached < loss:
            return
        with self._lock:
            runs = [run for run in self.jobs.values() if not run.done and not run.dropped]
        for run in runs:
            log.warning("%s: the server has not answered for %.0f s (node-loss timeout %.0f s); stopping it",
                        run.ref, time.monotonic() - self._last_reached, loss)
            run.drop()

    def _cached_inputs(self) -> list[str] | None:
        """What the input cache and the image store hold, as identities, for the server's cache
        affinity (None: no cache here)."""
        if self.prestager is None:
            return None
        try:
            return self.prestager.inputs.cache.identities() + self._held_images.identities()
        except Exception:  # informative only: a beat never fails for it
            log.exception("cannot list the input cache")
            return None

    def _health(self) -> dict[str, Any] | None:
        try:
            return gpu_health(self.inventory)
        except Exception as exc:  # health is informative: never let it stop the heartbeat
            log.warning("GPU health not read: %s", exc)
            return None

    def _register_again(self) -> None:
        """The server declared this node down (it missed our heartbeats): announce it again.

        Attempts the server ended meanwhile answer 409 to their next report and are dropped.
        """
        assert self.inventory is not None
        log.warning("the server has this node down; registering again")
        try:
            self.registration = self.client.register(self.inventory)
        except Exception as exc:
            log.error("registering again failed: %s", exc)
            return
        listed = set(self.registration.running)
        with self._lock:
            stale = [run for ref, run in self.jobs.items() if ref not in listed and not run.done]
        for run in stale:
            log.warning("%s: the server no longer runs it here; killing it", run.ref)
            run.drop()

    # -- dispatch ----------------------------------------------------------

    def _take(self, answer: WorkAnswer) -> None:
        for assignment in answer.assignments:
            ref = assignment.ref
            with self._lock:
                if ref in self.jobs or ref in self._recent or self.stop_event.is_set():
                    continue  # repeated until our "accepted" lands
                predecessor = next(
                    (r for k, r in self.jobs.items() if k.job_id == ref.job_id), None
                )
                run = JobRun(assignment, predecessor=predecessor, **self._run_kwargs())
                self.jobs[ref] = run
            log.info("assignment: %s, GPUs %s", ref, assignment.gpu_indices)
            run.start()
        self._cancel(answer.cancel)

    def _run_kwargs(self) -> dict[str, Any]:
        real_gpus = not (self.inventory and self.inventory.simulated)
        return {
            "client": self.client,
            "workdir": self.workdir,
            "runtimes": self.inventory.runtimes if self.inventory else [],
            "real_gpus": real_gpus,
            "on_done": self._done,
            "keep_files": self.config.keep_files,
            "shutdown_grace_s": self.config.shutdown_grace_s,
            # RLIMIT_AS breaks CUDA (it maps far more address space than it uses): simulated nodes only
            "limits": {"nofile": self.config.job_nofile, "memory": not real_gpus, "beat_path": self.beat_path,
                       "loss_timeout_s": self.registration.node_loss_timeout_s if self.registration else None},
            "job_user": self.job_user,
            "cgroups": self.cgroups,
            "sandbox": self.sandbox,
            "sample_interval_s": self.config.sample_interval_s,
        }

    def _cancel(self, refs: list[JobRef]) -> None:
        for ref in refs:
            with self._lock:
                run = self.jobs.get(ref)
            if run is not None:
                run.cancel()

    def _done(self, run: JobRun) -> None:
        with self._lock:
            if self.jobs.get(run.ref) is run:
                del self.jobs[run.ref]
            self._recent.append(run.ref)

    # -- start and stop ----------------------------------------------------

    def _claim_workdir(self) -> None:
        self.workdir.create()
        lockfile = open(self.workdir.root / "agent.lock", "w")  # held while running
        try:
            fcntl.flock(lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lockfile.close()
            raise WorkdirBusy(f"another agent is using {self.workdir.root}") from None
        lockfile.write(f"{os.getpid()}\n")
        lockfile.flush()
        self._lockfile = lockfile
        if self.job_user is not None:  # the job's user must reach jobs/<id>/ (its own, 0700)
            self.workdir.jobs.chmod(0o711)

    def _recover(self) -> None:
        """Find what an agent that died left behind: runs to take up again, the rest to clear.

        A run is resumable when its command runs on under its shim, or ended
        with its exit recorded (phase ``running``), or when it was past its
        command (``output``, ``finished``). Every other run is lost: its
        processes are killed and its files removed (the server requeues it).
        """
        keep_markers: set[str] = set()
        keep_jobs: set[str] = set()
        keep_files: set[str] = set()
        for state in run_states(self.workdir.runs):
            ref = state.ref
            phase = state.phase
            process = None
            resumable = phase in (AgentPhase.RUNNING, AgentPhase.OUTPUT, AgentPhase.FINISHED)
            why = f"phase {phase}"
            try:
                state.load_assignment()
            except (ValueError, KeyError, TypeError):
                resumable, why = False, "its assignment is unreadable"
            if resumable and phase == AgentPhase.RUNNING:
                process = JobProcess.adopt(state.path)
                if process is None:
                    resumable, why = False, "its shim is gone without an exit"
            if resumable:
                log.warning("%s: left by an earlier agent in phase %s; taking it up again", ref, phase)
                self._resumable.append((state, process))
                if process is not None:
                    keep_markers.add(process.marker)
                keep_jobs.add(str(ref.job_id))
                keep_files.update({self.workdir.log_path(*_pair(ref)).name,
                                   index_path(self.workdir.log_path(*_pair(ref))).name,
                                   self.workdir.bundle_path(*_pair(ref)).name})
                continue
            log.warning("%s: lost with an earlier agent (%s); the server will requeue it", ref, why)
            state.remove()
        killed = kill_marked(self.workdir.scope, keep=frozenset(keep_markers))
        if killed:
            log.warning("killed %d processes left by an earlier agent", killed)
        for parent, keep in ((self.workdir.jobs, keep_jobs), (self.workdir.bundles, keep_files),
                             (self.workdir.logs, keep_files), (self.workdir.tmp, set())):
            for path in parent.iterdir():
                if path.name not in keep:
                    remove_tree(path)

    def _resume_runs(self, server_running: list[JobRef]) -> None:
        """Start the runs :meth:`_recover` found, those the server still runs here."""
        listed = set(server_running)
        for state, process in self._resumable:
            ref = state.ref
            if ref not in listed:
                log.warning("%s: the server no longer runs it here; killing what is left", ref)
                if process is not None:
                    process.stop(0)
                state.remove()
                remove_tree(self.workdir.job_dir(ref.job_id))
                continue
            run = JobRun.resume(state, process, **self._run_kwargs())
            with self._lock:
                self.jobs[ref] = run
            run.start()
        self._resumable = []
        lost = listed - set(self.jobs)
        if lost:
            log.warning("server believes %s run here; they are lost (left out of the heartbeats)",
                        ", ".join(str(r) for r in sorted(lost, key=lambda r: (r.job_id, r.attempt))))

    def _shutdown(self) -> None:
        self.stop_event.set()
        with self._lock:
            runs = list(self.jobs.values())
        for run in runs:
            run.shutdown()
        for run in runs:
            if not run.join(self.config.shutdown_grace_s + 15):
                log.error("%s did not stop in time", run.ref)
        if self._heartbeat is not None:
            self._heartbeat.join(5)
        self.client.close()
        if self._lockfile is not None:
            self._lockfile.close()
            self._lockfile = None


def _pair(ref: JobRef) -> tuple[int, int]:
    return ref.job_id, ref.attempt
