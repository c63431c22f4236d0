"""One assignment from accept to finished, in a thread of its own.

accepted -> staging -> running -> exited -> (pack, upload) -> finished.
With nothing to stage, ``accepted`` folds into ``running``; with nothing to
pack, ``exited`` folds into ``finished`` (``exited={...}``; protocol v2):
a trivial job sends two reports, not four. ``finished`` goes last, after logs and bundle, since the server may hand
the GPUs to the next job the moment it hears it. ``cancel()`` is
idempotent; ``drop()`` (stale attempt) and ``shutdown()`` (agent stopping)
kill the processes and send nothing more.

Each step is written to the attempt's state directory
(:mod:`e31_agent.state`) before it is taken, and the command runs under a
shim that outlives the agent, so a run built by :meth:`JobRun.resume` (an
agent restarted mid-job) takes the attempt up where it was: it supervises
the still running command (deadline, cancel), or reports how it ended,
then ships the rest of the log from the last acknowledged offset, packs and
uploads (the same archive, resumed), and sends ``finished``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import container, node_inputs
from .cgroups import JobCgroups
from .client import Aborted, ApiClient, StaleAttempt
from .config import Workdir
from .logship import LogShipper
from .models import Assignment
from .packer import Bundle, pack
from .paths import remove_tree
from .reports import Reporter
from .runner import JobProcess, RunResult, build_env, new_marker, supervise
from .sandbox import SLOT_PLACEHOLDER, Sandbox, gpu_device_nodes
from .staging import Stager, StagingAborted, StagingError
from .state import RunState, read_json, write_json
from .uploader import UploadError, upload_bundle

log = logging.getLogger(__name__)

STAGING_REPORT_EVERY_S = 1.0
BACKSTOP_S = 1.0  # the shim sends its SIGTERM this long after the agent's (SIGKILL 1 s past the deadline)


class _Dropped(Exception):
    """The attempt was dropped (stale, or the agent stops): stop quietly."""


class JobRun:
    """Runs one assignment. Start with :meth:`start`; ``on_done`` is called at the end."""

    def __init__(
        self,
        assignment: Assignment,
        *,
        client: ApiClient,
        workdir: Workdir,
        runtimes: list[str],
        real_gpus: bool,
        on_done: Callable[[JobRun], None] = lambda run: None,
        predecessor: JobRun | None = None,
        keep_files: bool = False,
        shutdown_grace_s: float = 10.0,
        state: RunState | None = None,
        limits: dict[str, Any] | None = None,
        job_user: tuple[int, int] | None = None,
        cgroups: JobCgroups | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.assignment = assignment
        self.ref = assignment.ref
        self.client = client
        self.workdir = workdir
        self.runtimes = runtimes
        self.real_gpus = real_gpus
        self.on_done = on_done
        self.predecessor = predecessor
        self.keep_files = keep_files
        self.shutdown_grace_s = shutdown_grace_s
        self.state = state or RunState.create(
            workdir.run_dir(assignment.job_id, assignment.attempt), assignment.raw, assignment.deadline
        )
        self.limits = dict(limits or {})  # nofile, cpus (ids to pick from), memory_bytes cap
        self.job_user = job_user  # (uid, gid) the command runs as, when the agent is root
        self.cgroups = cgroups  # per-job cgroup v2 memory caps, where the agent may make them
        self.sandbox = sandbox  # the tenant sandbox (e31_agent.sandbox); None: --unsafe-no-sandbox
        self.resuming = False
        self.phase = "new"
        self.result: RunResult | None = None
        self.cancel_event = threading.Event()
        self.drop_event = threading.Event()  # kill and go quiet
        self.abort = threading.Event()  # end every network retry of this job
        self.stopping = False  # drop caused by the agent stopping, not by the server
        self.process: JobProcess | None = None
        self.exited_sent = False
        self.finished_sent = False
        self.folded_exit: dict[str, Any] | None = None  # the exited that finished will carry
        self.reporter = Reporter(
            client, self.ref, abort=self.abort, on_stale=self.drop, spool_path=self.state.reports_path
        )
        self.shipper: LogShipper | None = None
        self._thread = threading.Thread(
            target=self._main, name=f"job-{self.ref.job_id}-{self.ref.attempt}", daemon=True
        )

    # -- control from other threads ----------------------------------------

    @classmethod
    def resume(cls, state: RunState, process: JobProcess | None, **kwargs: Any) -> JobRun:
        """A run for an attempt a previous agent left in ``state`` (phase ``running``,
        ``output`` or ``finished``); ``process`` is its adopted command
        (:meth:`JobProcess.adopt`), None once the run had ended. ``kwargs`` as
        for the constructor. Start it with :meth:`start`.
        """
        run = cls(state.load_assignment(), state=state, **kwargs)
        run.process = process
        run.resuming = True
        return run

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float | None = None) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def cancel(self) -> None:
        """Stop the run (SIGTERM, grace, SIGKILL); outputs are still packed."""
        if not self.cancel_event.is_set() and self.phase in ("new", "staging", "running"):
            log.info("%s: cancel requested", self.ref)
        self.cancel_event.set()

    def drop(self) -> None:
        """The server no longer runs this attempt here: kill it and say nothing more."""
        self.drop_event.set()
        self.abort.set()
        self.cancel_event.set()  # wakes the supervisor at once

    def shutdown(self) -> None:
        """The agent stops: kill the job (short grace) and send nothing more."""
        self.stopping = True
        self.drop()

    # -- the lifecycle -------------------------------------------------------

    def _main(self) -> None:
        try:
            self._lifecycle()
        except (_Dropped, Aborted, StaleAttempt):
            log.info("%s: dropped", self.ref)
        except Exception:
            log.exception("%s: agent error", self.ref)
            self._fail_safe()
        finally:
            if self.process is not None:
                self.process.stop(min(self.assignment.grace_s, self.shutdown_grace_s))
            self.reporter.close()
            if not self.keep_files:
                self._clean_up()
            self.phase = "done"
            self.on_done(self)

    def _lifecycle(self) -> None:
        if self.resuming:
            self._resume()
            return
        a = self.assignment
        if self.predecessor is not None:
            self.predecessor.drop()
            self.predecessor.join(a.grace_s + 30)
        if a.spec.data:  # with nothing to stage, "running" says "accepted" too (folded)
            self.reporter.send("accepted")
        log.info("%s: accepted (%s)", self.ref, a.spec.name)
        job_dir = self._prepare_dir()

        self.phase = "staging"
        self.state.set_phase("staging")
        if a.spec.data:
            failure = self._stage(job_dir)
            if failure is not None:
                reason, message = failure
                self._end(exit_code=None, reason=reason, message=message, pack_outputs=False)
                return
        self._check_dropped()
        stop = self._stop_reason()
        if stop is not None:
            self._end(exit_code=None, reason=stop, message=None, pack_outputs=False)
            return

        try:
            self._hand_over(job_dir)
            self.process = self._start_process(job_dir)
        except (OSError, container.ContainerError) as exc:
            log.warning("%s: did not start: %s", self.ref, exc)
            self._end(exit_code=None, reason="start_failed", message=str(exc), pack_outputs=False)
            return
        self.state.set_phase("running")
        self.reporter.send("running", pid=self.process.pid, elapsed_s=self.state.elapsed_s())
        log.info("%s: running, pid %d", self.ref, self.process.pid)
        self._supervise()

    def _resume(self) -> None:
        """Take up an attempt a previous agent left (see the module docstring)."""
        phase = self.state.phase
        log.info("%s: taken up again (phase %s)", self.ref, phase)
        if phase == "running":
            if self.process is None:  # the caller found nothing to adopt
                raise _Dropped()
            self._supervise()
            return
        result = self.state.result or {"reason": "exit", "exit_code": None, "pack": False}
        self.phase = "output"
        if phase == "output":
            self._start_shipper()
            self._end(exit_code=result["exit_code"], reason=result["reason"], message=result.get("message"),
                      pack_outputs=bool(result.get("pack")), exited_queued=True, elapsed_s=result.get("elapsed_s"))
            return
        self.phase = "finishing"  # "finished" is queued: the spool sends it
        self.finished_sent = self.exited_sent = True
        self.reporter.wait_sent()
        self._check_dropped()

    def _start_shipper(self) -> None:
        a = self.assignment
        self.shipper = LogShipper(
            self.client,
            self.ref,
            self.workdir.log_path(a.job_id, a.attempt),
            abort=self.abort,
            on_stale=self.drop,
            offset_path=self.state.log_offset_path,
        )
        self.shipper.start()

    def _supervise(self) -> None:
        """Watch the started command to its end, then exited, logs, bundle, finished."""
        a = self.assignment
        assert self.process is not None
        self.phase = "running"
        self._start_shipper()
        grace = a.grace_s
        result = supervise(
            self.process,
            deadline=a.term_at,  # SIGTERM grace_s early: SIGKILL lands at the deadline
            cancel=self.cancel_event,
            drop=self.drop_event,
            grace_s=grace,
        )
        if result.reason == "dropped" or self.drop_event.is_set():
            self.process.stop(min(grace, self.shutdown_grace_s) if self.stopping else 0)
            raise _Dropped()
        self.result = result
        log.info("%s: ended (%s, exit code %s)", self.ref, result.reason, result.exit_code)
        self._end(exit_code=result.exit_code, reason=result.reason, message=None, pack_outputs=True)

    def _end(
        self,
        *,
        exit_code: int | None,
        reason: str,
        message: str | None,
        pack_outputs: bool,
        exited_queued: bool = False,
        elapsed_s: float | None = None,
    ) -> None:
        """exited, then the log, then the bundle (when there is one), then finished.

        With nothing to pack, ``exited`` is not sent on its own: ``finished`` carries it
        (folded), after the log. ``exited_queued``: the run was past ``exited`` (a resumed
        run): the report is in the spool, or (folded) goes with ``finished``. Either way the
        exit carries ``elapsed_s``, the run's length from the accept as measured here (read now,
        or, for a resumed run, as recorded when it ended), so the server bills the run, not
        the time the report took to get through (SPEC §4).
        """
        self.phase = "output"
        if not exited_queued:
            elapsed_s = self.state.elapsed_s()
        packs = pack_outputs and bool(self.assignment.spec.output_paths)
        if not packs:
            self.folded_exit = {"exit_code": exit_code, "reason": reason}
            if message:
                self.folded_exit["message"] = message
            if elapsed_s is not None:
                self.folded_exit["elapsed_s"] = elapsed_s
        if not exited_queued:
            self.state.set_result(reason=reason, exit_code=exit_code, pack=pack_outputs, message=message,
                                  elapsed_s=elapsed_s)
            if packs:
                self.reporter.send("exited", exit_code=exit_code, reason=reason, message=message,
                                   elapsed_s=elapsed_s)
            self.state.set_phase("output")
        self.exited_sent = True
        if self.shipper is not None:
            self.shipper.finish()
        self._check_dropped()
        note = None
        if packs:
            note = self._pack_and_upload()
        self._check_dropped()
        self.reporter.send("finished", message=note, exited=self.folded_exit)
        self.state.set_phase("finished")
        self.finished_sent = True
        self.reporter.wait_sent()
        self._check_dropped()
        log.info("%s: finished", self.ref)

    # -- steps -----------------------------------------------------------------

    def _prepare_dir(self) -> Path:
        job_dir = self.workdir.job_dir(self.ref.job_id)
        if job_dir.exists() or job_dir.is_symlink():  # left by an earlier attempt
            remove_tree(job_dir)
        job_dir.mkdir(mode=0o700, parents=True)
        job_dir.chmod(0o700)
        log_path = self.workdir.log_path(self.ref.job_id, self.ref.attempt)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")
        return job_dir

    def _stage(self, job_dir: Path) -> tuple[str, str] | None:
        """Stage the inputs; returns (reason, message) when the run must not start.

        Inputs already in the node's cache (pre-staged while the job waited)
        are linked in at once; every ``staging`` report says how many bytes
        were downloaded on the meter (``bytes_fetched``) and how many came
        from the cache (``bytes_cached``), which the server turns into the
        lease's staging seconds.
        """
        last = 0.0
        inputs = node_inputs.for_cache_dir(self.workdir.cache)

        def report(done: int, total: int | None) -> None:
            self.reporter.send("staging", bytes_done=done, bytes_total=total,
                               bytes_fetched=stager.fetched, bytes_cached=stager.cached)

        def progress(done: int, total: int | None) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= STAGING_REPORT_EVERY_S:
                last = now
                report(done, total)

        stager = Stager(
            client=self.client,
            job_dir=job_dir,
            tmp_dir=self.workdir.tmp,
            cache=inputs.cache,
            file_roots=inputs.file_roots,
            net_policy=inputs.net_policy,
            extract_limits=inputs.extract_limits,
            hardlink_ok=inputs.hardlink_ok and not self.assignment.spec.image,  # a container may run as root
            should_stop=lambda: self._stop_reason() is not None,
            progress=progress,
        )
        try:
            done = stager.stage(self.assignment.spec.data)
        except StagingAborted:
            self._check_dropped()
            reason = self._stop_reason() or "cancelled"
            return reason, f"stopped while staging inputs ({reason})"
        except StagingError as exc:
            log.warning("%s: staging failed: %s", self.ref, exc)
            return "staging_failed", str(exc)
        except Aborted:
            raise _Dropped() from None
        except Exception as exc:  # an unforeseen fetch error is still the input's fault
            log.exception("%s: staging failed", self.ref)
            return "staging_failed", f"{type(exc).__name__}: {exc}"
        report(done, done)
        log.info("%s: staged %d bytes (%d downloaded, %d from the cache)", self.ref, done,
                 stager.fetched, stager.cached)
        return None

    def _hand_over(self, job_dir: Path) -> None:
        """Give the job dir and what was staged into it to the job's user (agent running as root)."""
        if self.job_user is None:
            return
        import os

        uid, gid = self.job_user
        os.chown(job_dir, uid, gid)
        for root, dirs, files in os.walk(job_dir):
            for name in dirs + files:
                path = os.path.join(root, name)
                if name in files and os.lstat(path).st_nlink > 1:
                    continue  # a hard link into the node's input cache: the job may read it, never change it
                os.lchown(path, uid, gid)

    def _start_process(self, job_dir: Path) -> JobProcess:
        a = self.assignment
        marker = new_marker(self.workdir.scope, a.job_id, a.attempt)
        pinned = a.gpu_uuids if a.gpu_uuids and all(a.gpu_uuids) else a.gpu_indices
        env = build_env(
            job_dir=job_dir,
            spec_env=a.spec.env,
            assignment_env=a.env,
            gpus=pinned,
            marker=marker,
        )
        if a.spec.image:
            launch = container.wrap(
                image=a.spec.image,
                command=a.spec.command,
                runtimes=self.runtimes,
                job_dir=job_dir,
                env=env,
                gpu_indices=list(pinned),
                real_gpus=self.real_gpus,
                name=f"e31-{self.workdir.scope}-{a.job_id}-{a.attempt}",
                user=self.job_user,
                slot_user=SLOT_PLACEHOLDER if self.sandbox is not None and self.sandbox.slots else None,
                network=a.spec.network if self.sandbox is not None else None,
            )
        else:
            launch = container.plain(a.spec.command)
        env.update(launch.env)
        limits = job_limits(a, self.limits, self.job_user, cgroup=self._cgroup())
        if self.sandbox is not None:
            nodes = gpu_device_nodes(a.gpu_uuids, a.gpu_indices) if self.real_gpus and a.gpu_indices else []
            limits["sandbox"] = self.sandbox.plan(job_dir=job_dir, network=a.spec.network, gpu_nodes=nodes,
                                                  image=bool(a.spec.image))
        return JobProcess.start(
            launch.argv,
            cwd=job_dir,
            env=env,
            log_path=self.workdir.log_path(a.job_id, a.attempt),
            run_dir=self.state.path,
            teardown=launch.teardown,
            limits=limits,
        )

    def _cgroup(self) -> Path | None:
        """This run's cgroup with ``memory.max`` from the spec, when the node can make one."""
        a = self.assignment
        if self.cgroups is None or not a.memory_bytes:
            return None
        try:
            return self.cgroups.create(f"job-{a.job_id}-{a.attempt}", a.memory_bytes)
        except OSError as exc:
            log.warning("%s: no cgroup for the memory limit: %s", self.ref, exc)
            return None

    def _pack_and_upload(self) -> str | None:
        """Pack and upload the declared outputs; returns a note when that failed."""
        a = self.assignment
        bundle_path = self.workdir.bundle_path(a.job_id, a.attempt)
        bundle = _load_bundle(self.state.bundle_meta_path, bundle_path)
        if bundle is None:  # not packed yet (a resumed upload sends the archive it began with)
            try:
                bundle = pack(
                    self.workdir.job_dir(a.job_id), a.spec.output_paths, bundle_path, job_id=a.job_id,
                    max_bytes=a.output_max_bytes,
                    limits=node_inputs.for_cache_dir(self.workdir.cache).output_limits,
                )
            except OSError as exc:
                log.error("%s: packing failed: %s", self.ref, exc)
                return f"packing outputs failed: {exc}"
            write_json(self.state.bundle_meta_path, {
                "size_bytes": bundle.size_bytes, "sha256": bundle.sha256, "files": [f.to_json() for f in bundle.files],
                "not_packed": list(bundle.not_packed),
            })  # fmt: skip
        log.info("%s: bundle of %d files, %d bytes", self.ref, len(bundle.files), bundle.size_bytes)
        try:
            upload_bundle(self.client, a.job_id, a.attempt, bundle, abort=self.abort)
        except UploadError as exc:
            log.error("%s: bundle upload failed: %s", self.ref, exc)
            return f"bundle upload failed: {exc}"
        except StaleAttempt:
            self.drop()
            raise _Dropped() from None
        return not_packed_note(bundle.not_packed)

    def _fail_safe(self) -> None:
        """After an agent error: stop the run and close the attempt on the server."""
        if self.process is not None:
            self.process.stop(self.assignment.grace_s)
        if not self.exited_sent:
            reason = "exit" if self.process is not None else "start_failed"
            code = self.process.exit_code if self.process is not None else None
            self.reporter.send("exited", exit_code=code, reason=reason, message="agent error",
                               elapsed_s=self.state.elapsed_s())
        if not self.finished_sent:
            self.reporter.send("finished", message="agent error", exited=self.folded_exit)
        self.reporter.wait_sent(60)

    # -- helpers ---------------------------------------------------------------

    def _stop_reason(self) -> str | None:
        if self.drop_event.is_set():
            return "dropped"
        if self.cancel_event.is_set():
            return "cancelled"
        if time.monotonic() >= self.assignment.term_at:
            return "time_limit"
        return None

    def _check_dropped(self) -> None:
        if self.drop_event.is_set():
            raise _Dropped()

    def _clean_up(self) -> None:
        a = self.assignment
        if self.cgroups is not None and a.memory_bytes:
            self.cgroups.remove(self.cgroups.base / f"job-{a.job_id}-{a.attempt}")
        self.state.remove()
        remove_tree(self.workdir.job_dir(a.job_id))
        for path in (
            self.workdir.log_path(a.job_id, a.attempt),
            self.workdir.bundle_path(a.job_id, a.attempt),
        ):
            path.unlink(missing_ok=True)


def _load_bundle(meta_path: Path, bundle_path: Path) -> Bundle | None:
    """The bundle packed before (its ``bundle.json`` and archive), or None."""
    from .models import FileEntry

    meta = read_json(meta_path)
    if not isinstance(meta, dict) or not bundle_path.is_file() or bundle_path.stat().st_size != meta["size_bytes"]:
        return None
    files = [FileEntry(path=f["path"], size_bytes=int(f["size_bytes"]), sha256=f["sha256"]) for f in meta["files"]]
    return Bundle(path=bundle_path, size_bytes=int(meta["size_bytes"]), sha256=meta["sha256"], files=files,
                  not_packed=tuple(meta.get("not_packed", ())))


def not_packed_note(not_packed: tuple[str, ...]) -> str | None:
    """The ``finished`` message when declared files were left out (the server then records
    the outcome ``failed`` with it, SPEC §3), or None when every declared file was packed."""
    if not not_packed:
        return None
    shown = ", ".join(not_packed[:5]) + (f" and {len(not_packed) - 5} more" if len(not_packed) > 5 else "")
    return f"outputs not packed: {len(not_packed)} declared file{'s' if len(not_packed) > 1 else ''}: {shown}"


def job_limits(
    assignment: Assignment,
    node_limits: dict[str, Any],
    job_user: tuple[int, int] | None,
    *,
    cgroup: Path | None = None,
) -> dict[str, Any]:
    """What the shim applies to the command (see :mod:`e31_agent.shim`).

    ``cpus``: the first ``spec.compute.cpus`` CPU ids this agent may use
    (``sched_setaffinity``); ``cgroup``: the run's cgroup v2 dir, whose
    ``memory.max`` is ``spec.compute.memory_gb``; without one, on simulated
    nodes (``node_limits["memory"]``), ``memory_bytes``: the same figure as
    ``RLIMIT_AS`` (address space; not on real GPUs, where CUDA maps far more
    than it touches); ``nofile``: the node's ``RLIMIT_NOFILE`` for jobs;
    ``uid``/``gid``: the unprivileged user when the agent is root;
    ``stop_at`` (epoch s) and ``grace_s``: the shim stops the run itself
    ``BACKSTOP_S`` after the agent should have (a frozen or dead agent): SIGTERM at
    ``deadline - grace_s + BACKSTOP_S``, SIGKILL ``BACKSTOP_S`` past the deadline;
    ``beat_path`` and ``loss_timeout_s`` when given: the shim stops the run when the
    agent has not heard from the server for the node-loss timeout (see the shim).
    """
    import os

    limits: dict[str, Any] = {}
    if assignment.cpus:
        try:
            allowed = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            allowed = []
        if allowed and assignment.cpus < len(allowed):
            limits["cpus"] = allowed[: assignment.cpus]
    if cgroup is not None:
        limits["cgroup"] = str(cgroup)
    elif assignment.memory_bytes and node_limits.get("memory"):
        limits["memory_bytes"] = assignment.memory_bytes
    if node_limits.get("nofile"):
        limits["nofile"] = int(node_limits["nofile"])
    if job_user is not None:
        limits["uid"], limits["gid"] = job_user
    if node_limits.get("beat_path") and node_limits.get("loss_timeout_s"):
        limits["beat_path"] = str(node_limits["beat_path"])
        limits["loss_timeout_s"] = float(node_limits["loss_timeout_s"])
    # the shim's own backstop: a few seconds after the agent would have stopped the run
    limits["stop_at"] = time.time() + (assignment.term_at - time.monotonic()) + BACKSTOP_S
    limits["grace_s"] = assignment.grace_s
    return limits
