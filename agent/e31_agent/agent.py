"""The agent's main loop: register, heartbeat, long-poll for work, run jobs.

Each assignment runs in its own :class:`~e31_agent.job.JobRun` thread, so
a node runs several jobs at once. Cancels come in on both the work answer
and the heartbeat answer and are idempotent. When the agent stops it kills
its jobs' processes and reports nothing: the server sees the heartbeats
stop and handles the node as lost (SPEC §3).
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import threading
from collections import deque
from typing import IO

from .backoff import Backoff
from .client import Aborted, ApiClient, ApiError
from .config import AgentConfig, Workdir
from .inventory import collect
from .job import JobRun
from .models import Inventory, JobRef, RegisterAnswer, WorkAnswer
from .paths import remove_tree
from .runner import kill_marked

log = logging.getLogger(__name__)

RECENT = 1000  # finished attempts remembered, so a late repeat is not run twice


class WorkdirBusy(Exception):
    """Another agent holds the work directory."""


class RegistrationRefused(Exception):
    """The server refused to register this node (a bad token, most likely)."""


class Agent:
    """One node's agent. ``run()`` blocks until :meth:`stop` is called."""

    def __init__(self, config: AgentConfig, *, client: ApiClient | None = None) -> None:
        self.config = config
        self.workdir = Workdir(config.workdir)
        self.client = client or ApiClient(config.server, config.token)
        self.stop_event = self.client.stop  # one event ends the loops and every retry
        self.inventory: Inventory | None = None
        self.registration: RegisterAnswer | None = None
        self.jobs: dict[JobRef, JobRun] = {}
        self._recent: deque[JobRef] = deque(maxlen=RECENT)
        self._lock = threading.Lock()
        self._lockfile: IO[str] | None = None
        self._heartbeat: threading.Thread | None = None

    # -- public ------------------------------------------------------------

    def run(self) -> None:
        """Register, then serve until stopped.

        Raises :class:`WorkdirBusy` and :class:`RegistrationRefused`.
        """
        self._claim_workdir()
        try:
            self._recover()
            self.inventory = collect(workdir=self.workdir.root, simulate=self.config.simulate)
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
            log.info(
                "registered as node %s (heartbeat every %.1f s, poll wait %.0f s)",
                reg.node,
                reg.heartbeat_interval_s,
                reg.poll_wait_s,
            )
            if reg.running:
                # their processes did not survive the agent that ran them (see _recover)
                log.warning(
                    "server believes %s run here; they are lost and are not reported",
                    ", ".join(str(r) for r in reg.running),
                )
            self._heartbeat = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
            self._heartbeat.start()
            # the long poll runs in its own thread so a stop need not wait for it
            threading.Thread(target=self._poll, name="poll", daemon=True).start()
            while not self.stop_event.wait(1.0):
                pass
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Ask the agent to stop (safe from a signal handler)."""
        self.stop_event.set()

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
                answer = self.client.work(self.registration.poll_wait_s)
            except Aborted:
                return
            except Exception as exc:  # a refusal (4xx) or an answer we cannot read
                delay = backoff.next()
                log.error("work poll failed (%s); again in %.1f s", exc, delay)
                self.stop_event.wait(delay)
                continue
            backoff.reset()
            try:
                self._take(answer)
            except Exception:
                log.exception("cannot take work answer")
            if not answer.assignments:
                # jitter: agents whose polls all timed out at once do not all come back at once;
                # after real work, ask again at once: more may be waiting
                self.stop_event.wait(random.uniform(0, 0.2))

    def _beat(self) -> None:
        assert self.registration is not None
        interval = self.registration.heartbeat_interval_s
        while not self.stop_event.is_set():
            try:
                cancels = self.client.heartbeat(self.running())
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
            else:
                self._cancel(cancels)
            self.stop_event.wait(interval)

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
                run = JobRun(
                    assignment,
                    client=self.client,
                    workdir=self.workdir,
                    runtimes=self.inventory.runtimes if self.inventory else [],
                    real_gpus=not (self.inventory and self.inventory.simulated),
                    on_done=self._done,
                    predecessor=predecessor,
                    keep_files=self.config.keep_files,
                    shutdown_grace_s=self.config.shutdown_grace_s,
                )
                self.jobs[ref] = run
            log.info("assignment: %s, GPUs %s", ref, assignment.gpu_indices)
            run.start()
        self._cancel(answer.cancel)

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

    def _recover(self) -> None:
        """Clear what an agent that died left behind: processes, job dirs, temp files.

        Their attempts are lost either way; the server requeues them.
        """
        killed = kill_marked(self.workdir.scope)
        if killed:
            log.warning("killed %d processes left by an earlier agent", killed)
        for parent in (self.workdir.jobs, self.workdir.bundles, self.workdir.tmp):
            for path in parent.iterdir():
                remove_tree(path)

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
