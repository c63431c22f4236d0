"""One assignment from accept to finished, in a thread of its own.

accepted -> staging -> running -> exited -> (pack, upload) -> finished.
``finished`` goes last, after logs and bundle, since the server may hand
the GPUs to the next job the moment it hears it. ``cancel()`` is
idempotent; ``drop()`` (stale attempt) and ``shutdown()`` (agent stopping)
kill the processes and send nothing more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import container
from .client import Aborted, ApiClient, StaleAttempt
from .config import Workdir
from .logship import LogShipper
from .models import Assignment
from .packer import pack
from .paths import remove_tree
from .reports import Reporter
from .runner import JobProcess, RunResult, build_env, exit_status, new_marker, supervise
from .staging import Stager, StagingAborted, StagingError
from .uploader import UploadError, upload_bundle

log = logging.getLogger(__name__)

STAGING_REPORT_EVERY_S = 1.0


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
        self.phase = "new"
        self.result: RunResult | None = None
        self.cancel_event = threading.Event()
        self.drop_event = threading.Event()  # kill and go quiet
        self.abort = threading.Event()  # end every network retry of this job
        self.stopping = False  # drop caused by the agent stopping, not by the server
        self.process: JobProcess | None = None
        self.exited_sent = False
        self.finished_sent = False
        self.reporter = Reporter(client, self.ref, abort=self.abort, on_stale=self.drop)
        self.shipper: LogShipper | None = None
        self._thread = threading.Thread(
            target=self._main, name=f"job-{self.ref.job_id}-{self.ref.attempt}", daemon=True
        )

    # -- control from other threads ----------------------------------------

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
        a = self.assignment
        if self.predecessor is not None:
            self.predecessor.drop()
            self.predecessor.join(a.grace_s + 30)
        self.reporter.send("accepted")
        log.info("%s: accepted (%s)", self.ref, a.spec.name)
        job_dir = self._prepare_dir()

        self.phase = "staging"
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
            self.process = self._start_process(job_dir)
        except (OSError, container.ContainerError) as exc:
            self._end(exit_code=None, reason="start_failed", message=str(exc), pack_outputs=False)
            return
        self.phase = "running"
        self.reporter.send("running", pid=self.process.pid)
        log.info("%s: running, pid %d", self.ref, self.process.pid)
        self.shipper = LogShipper(
            self.client,
            self.ref,
            self.workdir.log_path(a.job_id, a.attempt),
            abort=self.abort,
            on_stale=self.drop,
        )
        self.shipper.start()

        grace = a.grace_s
        result = supervise(
            self.process,
            deadline=a.deadline,
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
        self, *, exit_code: int | None, reason: str, message: str | None, pack_outputs: bool
    ) -> None:
        """exited, then the log, then the bundle (when there is one), then finished."""
        self.phase = "output"
        self.reporter.send("exited", exit_code=exit_code, reason=reason, message=message)
        self.exited_sent = True
        if self.shipper is not None:
            self.shipper.finish()
        self._check_dropped()
        note = None
        if pack_outputs and self.assignment.spec.output_paths:
            note = self._pack_and_upload()
        self._check_dropped()
        self.reporter.send("finished", message=note)
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
        """Stage the inputs; returns (reason, message) when the run must not start."""
        last = 0.0

        def progress(done: int, total: int | None) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= STAGING_REPORT_EVERY_S:
                last = now
                self.reporter.send("staging", bytes_done=done, bytes_total=total)

        stager = Stager(
            client=self.client,
            job_dir=job_dir,
            tmp_dir=self.workdir.tmp,
            cache_dir=self.workdir.cache,
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
        self.reporter.send("staging", bytes_done=done, bytes_total=done)
        return None

    def _start_process(self, job_dir: Path) -> JobProcess:
        a = self.assignment
        marker = new_marker(self.workdir.scope, a.job_id, a.attempt)
        env = build_env(
            job_dir=job_dir,
            spec_env=a.spec.env,
            assignment_env=a.env,
            gpu_indices=a.gpu_indices,
            marker=marker,
        )
        if a.spec.image:
            launch = container.wrap(
                image=a.spec.image,
                command=a.spec.command,
                runtimes=self.runtimes,
                job_dir=job_dir,
                env=env,
                gpu_indices=a.gpu_indices,
                real_gpus=self.real_gpus,
                name=f"e31-{self.workdir.scope}-{a.job_id}-{a.attempt}",
            )
        else:
            launch = container.plain(a.spec.command)
        env.update(launch.env)
        return JobProcess.start(
            launch.argv,
            cwd=job_dir,
            env=env,
            log_path=self.workdir.log_path(a.job_id, a.attempt),
            teardown=launch.teardown,
        )

    def _pack_and_upload(self) -> str | None:
        """Pack and upload the declared outputs; returns a note when that failed."""
        a = self.assignment
        bundle_path = self.workdir.bundle_path(a.job_id, a.attempt)
        try:
            bundle = pack(
                self.workdir.job_dir(a.job_id), a.spec.output_paths, bundle_path, job_id=a.job_id
            )
        except OSError as exc:
            log.error("%s: packing failed: %s", self.ref, exc)
            return f"packing outputs failed: {exc}"
        log.info("%s: bundle of %d files, %d bytes", self.ref, len(bundle.files), bundle.size_bytes)
        try:
            upload_bundle(self.client, a.job_id, a.attempt, bundle, abort=self.abort)
        except UploadError as exc:
            log.error("%s: bundle upload failed: %s", self.ref, exc)
            return f"bundle upload failed: {exc}"
        except StaleAttempt:
            self.drop()
            raise _Dropped() from None
        return None

    def _fail_safe(self) -> None:
        """After an agent error: stop the run and close the attempt on the server."""
        if self.process is not None:
            self.process.stop(self.assignment.grace_s)
        if not self.exited_sent:
            reason = "exit" if self.process is not None else "start_failed"
            code = exit_status(self.process.returncode) if self.process is not None else None
            self.reporter.send("exited", exit_code=code, reason=reason, message="agent error")
        if not self.finished_sent:
            self.reporter.send("finished", message="agent error")
        self.reporter.wait_sent(60)

    # -- helpers ---------------------------------------------------------------

    def _stop_reason(self) -> str | None:
        if self.drop_event.is_set():
            return "dropped"
        if self.cancel_event.is_set():
            return "cancelled"
        if time.monotonic() >= self.assignment.deadline:
            return "time_limit"
        return None

    def _check_dropped(self) -> None:
        if self.drop_event.is_set():
            raise _Dropped()

    def _clean_up(self) -> None:
        a = self.assignment
        remove_tree(self.workdir.job_dir(a.job_id))
        for path in (
            self.workdir.log_path(a.job_id, a.attempt),
            self.workdir.bundle_path(a.job_id, a.attempt),
        ):
            path.unlink(missing_ok=True)
