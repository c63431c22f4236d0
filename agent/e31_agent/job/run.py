"""The run of one assignment, in a thread of its own: the steps in order, and its control
(cancel, drop, shutdown) from other threads. The steps are the sibling modules."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from e31_protocol import AgentPhase, ExitReason, ReportType

from .. import container
from ..cgroups import JobCgroups
from ..client import Aborted, ApiClient, StaleAttempt
from ..config import Workdir
from ..logindex import index_path
from ..logship import LogShipper
from ..models import Assignment
from ..paths import remove_tree
from ..reports import Reporter
from ..runner import DROPPED, JobProcess, RunResult, supervise
from ..sampler import INTERVAL_S as SAMPLE_INTERVAL_S
from ..sampler import UsageSampler
from ..sandbox import Sandbox
from ..state import RunState
from .base import Control, Dropped, Progress
from .checkpoint import restore_checkpoint
from .launch import LaunchJob, pull_image, start_process
from .pack import PackJob
from .prepare import hand_over, prepare_dir
from .report import EndJob, report_agent_error, report_end
from .stage import StageJob, stage_inputs
from .upload import UploadJob

log = logging.getLogger(__name__)


class JobRun:
    """Runs one assignment. Start with :meth:`start`; ``on_done`` is called at the end.

    ``phase`` is an :class:`e31_protocol.AgentPhase`, the same word the attempt's state
    directory holds (``accepted`` until staging begins); :attr:`done` is True once the thread
    ended.

    The run composes what each step is handed, built once here: :attr:`staging`
    (:class:`~.stage.StageJob`), :attr:`launch` (:class:`~.launch.LaunchJob`) and :attr:`ending`
    (:class:`~.report.EndJob`, with the packer's :class:`~.pack.PackJob` and the upload's
    :class:`~.upload.UploadJob`), sharing its stop signals (:attr:`control`) and how far it got
    (:attr:`progress`). No step sees the run itself.
    """

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
        sample_interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        self.assignment = assignment
        self.ref = assignment.ref
        self.client = client
        self.workdir = workdir
        self.on_done = on_done
        self.predecessor = predecessor
        self.keep_files = keep_files
        self.shutdown_grace_s = shutdown_grace_s
        self.state = state or RunState.create(
            workdir.run_dir(assignment.job_id, assignment.attempt), assignment.raw, assignment.deadline
        )
        self.cgroups = cgroups  # per-job cgroup v2 memory caps, where the agent may make them
        self.resuming = False
        self._done = False
        self.result: RunResult | None = None
        self.control = Control(term_at=assignment.term_at)
        self.progress = Progress()
        self.stopping = False  # drop caused by the agent stopping, not by the server
        self.process: JobProcess | None = None
        self.reporter = Reporter(
            client, self.ref, abort=self.control.abort, on_stale=self.drop, spool_path=self.state.reports_path
        )
        self.shipper: LogShipper | None = None
        self.real_gpus = real_gpus
        self.sample_interval_s = sample_interval_s  # seconds between usage samples; 0: none taken
        self.sampler: UsageSampler | None = None
        a = assignment
        self.staging = StageJob(
            ref=self.ref, data=a.spec.data, in_container=bool(a.spec.image), cache_dir=workdir.cache,
            tmp_dir=workdir.tmp, client=client, reporter=self.reporter, control=self.control,
            credentials=a.credentials,
        )
        self.launch = LaunchJob(
            assignment=a, scope=workdir.scope, log_path=workdir.log_path(a.job_id, a.attempt),
            run_dir=self.state.path, runtimes=runtimes, real_gpus=real_gpus,
            limits=dict(limits or {}),  # nofile, cpus (ids to pick from), memory_bytes cap
            job_user=job_user,  # (uid, gid) the command runs as, when the agent is root
            cgroups=cgroups,
            sandbox=sandbox,  # the tenant sandbox (e31_agent.sandbox); None: --unsafe-no-sandbox
        )
        self.ending = EndJob(
            ref=self.ref, state=self.state, reporter=self.reporter, control=self.control, progress=self.progress,
            grace_s=a.grace_s,
            pack=PackJob(
                ref=self.ref, job_dir=workdir.job_dir(a.job_id), output_paths=a.packed_paths,
                declared_paths=a.spec.output_paths,
                max_bytes=a.output_max_bytes, bundle_path=workdir.bundle_path(a.job_id, a.attempt),
                meta_path=self.state.bundle_meta_path, cache_dir=workdir.cache,
            ),
            upload=UploadJob(ref=self.ref, client=client, control=self.control),
        )
        self._thread = threading.Thread(
            target=self._main, name=f"job-{self.ref.job_id}-{self.ref.attempt}", daemon=True
        )

    @property
    def phase(self) -> AgentPhase:
        """Where the run is (:class:`e31_protocol.AgentPhase`), as its steps wrote it."""
        return self.progress.phase

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
        return self._done

    def cancel(self) -> None:
        """Stop the run (SIGTERM, grace, SIGKILL); outputs are still packed."""
        if not self.control.cancel.is_set() and not self._done and self.phase in (
            AgentPhase.ACCEPTED, AgentPhase.STAGING, AgentPhase.RUNNING,
        ):
            log.info("%s: cancel requested", self.ref)
        self.control.cancel.set()

    def drop(self) -> None:
        """The server no longer runs this attempt here: kill it and say nothing more."""
        self.control.drop_now()

    @property
    def dropped(self) -> bool:
        """True once the run was dropped (:meth:`drop`, :meth:`shutdown`, a stale attempt)."""
        return self.control.drop.is_set()

    def shutdown(self) -> None:
        """The agent stops: kill the job (short grace) and send nothing more."""
        self.stopping = True
        self.drop()

    # -- the lifecycle -------------------------------------------------------

    def _main(self) -> None:
        try:
            self._lifecycle()
        except (Dropped, Aborted, StaleAttempt):
            log.info("%s: dropped", self.ref)
        except Exception:
            log.exception("%s: agent error", self.ref)
            report_agent_error(self.ending, process=self.process)
        finally:
            if self.sampler is not None:
                self.sampler.finish(timeout_s=1.0)
            if self.process is not None:
                self.process.stop(min(self.assignment.grace_s, self.shutdown_grace_s))
            self.reporter.close()
            if not self.keep_files:
                self._clean_up()
            self._done = True
            self.on_done(self)

    def _lifecycle(self) -> None:
        """accepted -> staging -> running -> (exited, log, pack, upload, finished)."""
        if self.resuming:
            self._resume()
            return
        a = self.assignment
        if self.predecessor is not None:
            self.predecessor.drop()
            self.predecessor.join(a.grace_s + 30)
        if a.start_refused:  # a secret the spec names is gone: fail at the start, nothing billed (0 s)
            log.warning("%s: did not start: %s", self.ref, a.start_refused)
            report_end(self.ending, shipper=self.shipper, exit_code=None, reason=ExitReason.START_FAILED,
                       message=a.start_refused,
                       with_outputs=False, elapsed_s=0.0)
            return
        if a.spec.data or a.spec.image or a.checkpoint_files:  # nothing to stage: "running" says "accepted" too
            self.reporter.send(ReportType.ACCEPTED)
        log.info("%s: accepted (%s)", self.ref, a.spec.name)
        job_dir = prepare_dir(self.workdir, self.ref)

        self.progress.phase = AgentPhase.STAGING
        self.state.set_phase(AgentPhase.STAGING)
        if a.checkpoint_files:  # before the inputs: an input of the same name wins
            failure_words = restore_checkpoint(a, self.client, job_dir, self.control)
            if failure_words is not None:
                report_end(self.ending, shipper=self.shipper, exit_code=None, reason=ExitReason.STAGING_FAILED,
                           message=failure_words, with_outputs=False)
                return
        if a.spec.data:
            failure = stage_inputs(self.staging, job_dir)
            if failure is not None:
                reason, message = failure
                report_end(self.ending, shipper=self.shipper, exit_code=None, reason=reason, message=message,
                           with_outputs=False)
                return
        if a.spec.image:
            failure = pull_image(self.launch, self.reporter)
            if failure is not None:
                report_end(self.ending, shipper=self.shipper, exit_code=None, reason=ExitReason.STAGING_FAILED,
                           message=failure, with_outputs=False)
                return
        self.control.check_dropped()
        stop = self.control.stop_reason()
        if stop is not None:
            report_end(self.ending, shipper=self.shipper, exit_code=None, reason=stop, message=None,
                       with_outputs=False)
            return

        try:
            hand_over(job_dir, self.launch.job_user)
            self.process = start_process(self.launch, job_dir)
        except (OSError, container.ContainerError) as exc:
            log.warning("%s: did not start: %s", self.ref, exc)
            report_end(self.ending, shipper=self.shipper, exit_code=None, reason=ExitReason.START_FAILED,
                       message=str(exc), with_outputs=False)
            return
        self.state.set_phase(AgentPhase.RUNNING)
        self.reporter.send(ReportType.RUNNING, pid=self.process.pid, elapsed_s=self.state.elapsed_s())
        log.info("%s: running, pid %d", self.ref, self.process.pid)
        self._supervise()

    def _resume(self) -> None:
        """Take up an attempt a previous agent left (see :mod:`e31_agent.job`)."""
        phase = self.state.phase
        log.info("%s: taken up again (phase %s)", self.ref, phase)
        if phase == AgentPhase.RUNNING:
            if self.process is None:  # the caller found nothing to adopt
                raise Dropped()
            self._supervise()
            return
        result = self.state.result or {"reason": ExitReason.EXIT, "exit_code": None, "pack": False}
        self.progress.phase = AgentPhase.OUTPUT
        if phase == AgentPhase.OUTPUT:
            self._start_shipper()
            report_end(self.ending, shipper=self.shipper, exit_code=result["exit_code"],
                       reason=ExitReason(result["reason"]), message=result.get("message"),
                       with_outputs=bool(result.get("pack")), exited_queued=True, elapsed_s=result.get("elapsed_s"))
            return
        self.progress.phase = AgentPhase.FINISHED  # "finished" is queued: the spool sends it
        self.progress.finished_sent = self.progress.exited_sent = True
        self.reporter.wait_sent()
        self.control.check_dropped()

    def _start_shipper(self) -> None:
        a = self.assignment
        self.shipper = LogShipper(
            self.client,
            self.ref,
            self.workdir.log_path(a.job_id, a.attempt),
            abort=self.control.abort,
            on_stale=self.drop,
            offset_path=self.state.log_offset_path,
        )
        self.shipper.start()

    def _start_sampler(self) -> None:
        """Usage samples of the running command for the job page's charts (:mod:`e31_agent.sampler`)."""
        a = self.assignment
        if self.sample_interval_s <= 0 or self.process is None:
            return
        self.sampler = UsageSampler(
            self.client, self.ref, self.process.processes,
            gpus=[{"index": i, "uuid": u} for i, u in
                  zip(a.gpu_indices, a.gpu_uuids or [""] * len(a.gpu_indices), strict=False)],
            real_gpus=self.real_gpus, abort=self.control.abort, interval_s=self.sample_interval_s,
            elapsed_s=self.state.elapsed_s,
        )
        self.sampler.start()

    def _supervise(self) -> None:
        """Watch the started command to its end, then exited, logs, bundle, finished."""
        a = self.assignment
        assert self.process is not None
        self.progress.phase = AgentPhase.RUNNING
        self._start_shipper()
        self._start_sampler()
        grace = a.grace_s
        result = supervise(
            self.process,
            deadline=a.term_at,  # SIGTERM grace_s early: SIGKILL lands at the deadline
            cancel=self.control.cancel,
            drop=self.control.drop,
            grace_s=grace,
        )
        if self.sampler is not None:
            self.sampler.finish()
        if result.reason == DROPPED or self.control.drop.is_set():
            self.process.stop(min(grace, self.shutdown_grace_s) if self.stopping else 0)
            raise Dropped()
        self.result = result
        log.info("%s: ended (%s, exit code %s)", self.ref, result.reason, result.exit_code)
        report_end(self.ending, shipper=self.shipper, exit_code=result.exit_code, reason=ExitReason(result.reason),
                   message=None, with_outputs=True)

    def _clean_up(self) -> None:
        a = self.assignment
        if self.cgroups is not None and a.memory_bytes:
            self.cgroups.remove(self.cgroups.base / f"job-{a.job_id}-{a.attempt}")
        self.state.remove()
        remove_tree(self.workdir.job_dir(a.job_id))
        for path in (
            self.workdir.log_path(a.job_id, a.attempt),
            index_path(self.workdir.log_path(a.job_id, a.attempt)),
            self.workdir.bundle_path(a.job_id, a.attempt),
        ):
            path.unlink(missing_ok=True)
