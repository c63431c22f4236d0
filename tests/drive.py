"""Drive a job to a state through the real services, as the product does (issue 13).

No helper here writes a state, an outcome or a time stamp: a job is submitted (``job_submit``),
placed by a scheduling cycle (``schedule_cycle``), run by its agent's reports (``agent_report``, as
the agent endpoints call it), cancelled (``job_cancel``), stopped at its time limit
(``jobs_enforce_time_limits``) or lost with its node (``nodes_mark_lost``). Times come from the
clock: a test that needs exact times takes the ``frozen_clock`` fixture (``tests/clock.py``) and
moves it between the steps (``clock.advance(seconds)``); the services read it as "now".
"""
from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from apps.agent_api.reports import agent_log_append, agent_report
from apps.artifacts.services import bundle_complete, bundle_put_chunk
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.pool.models import Node
from apps.pool.services import node_set_drain
from apps.scheduling.adapter import schedule_cycle

from .clock import FrozenClock
from .factories import spec


def spec_doc(**overrides: Any) -> dict:
    """:func:`tests.factories.spec` named ``web-job``; top-level parts replaced by ``overrides``."""
    return spec(**{"name": "web-job", **overrides})


def queued_job(owner, **overrides: Any) -> Job:
    """A job submitted through the real service at the clock's now. Submitting asks for a cycle
    (tests/cycles.py runs it at once), so it waits only when no node can take it yet."""
    return job_submit(owner=owner, document=spec_doc(**overrides))


def placed(job: Job) -> Job:
    """``job`` after one scheduling cycle at the clock's now, asserted ``rented`` (its lease open)."""
    schedule_cycle()
    job = Job.objects.get(pk=job.pk)
    assert job.state == "rented", f"job {job.pk} is {job.state}: {job.pending_reason}"
    return job


def rented_job(owner, **overrides: Any) -> Job:
    """A job submitted and placed on a node by a scheduling cycle."""
    return placed(queued_job(owner, **overrides))


class Agent:
    """Plays the job's node agent (rank 0 of its current attempt) through the services its endpoints
    call. With ``clock`` (a :class:`~tests.clock.FrozenClock`), :meth:`run` moves it between steps."""

    def __init__(self, job: Job, clock: FrozenClock | None = None):
        self.job = Job.objects.get(pk=job.pk)
        self.lease = self.job.leases.get(attempt=self.job.attempt, node_rank=0)
        self.clock = clock
        self.seq = 0

    def say(self, type_: str, **extra: Any) -> bool:
        """Send one report (``accepted``, ``staging``, ``running``, ``exited``, ``finished``...) as the
        agent sends it; returns what :func:`agent_report` returns (False: a duplicate)."""
        self.seq += 1
        return agent_report(node=self.lease.node, job_id=self.job.pk,
                            report={"attempt": self.job.attempt, "seq": self.seq, "type": type_, **extra})

    def _wait(self, seconds: float) -> None:
        if seconds:
            if self.clock is None:
                raise ValueError(f"Agent: a step of {seconds} s needs the frozen clock (Agent(job, clock))")
            self.clock.advance(seconds)

    def start(self, *, staging_s: float = 0) -> Job:
        """``accepted``, then ``running`` ``staging_s`` seconds later; returns the job, ``running``."""
        self.say("accepted")
        self._wait(staging_s)
        self.say("running")
        return Job.objects.get(pk=self.job.pk)

    def end(self, exit_code: int | None = 0, reason: str = "exit", files: dict[str, bytes] | None = None, *,
            run_s: float = 0, output_s: float = 0) -> Job:
        """After ``run_s`` seconds the command ends (``exited``); ``output_s`` seconds later the
        outputs are uploaded (an empty bundle when ``files`` is None) and ``finished`` releases the job."""
        self._wait(run_s)
        self.say("exited", exit_code=exit_code, reason=reason)
        self._wait(output_s)
        self.bundle(files or {})
        self.say("finished")
        return Job.objects.get(pk=self.job.pk)

    def run(self, exit_code: int | None = 0, reason: str = "exit", files: dict[str, bytes] | None = None, *,
            staging_s: float = 0, run_s: float = 0, output_s: float = 0) -> Job:
        """The whole run as a real agent reports it (:meth:`start` then :meth:`end`); returns the job as
        it is after ``finished`` (released)."""
        self.start(staging_s=staging_s)
        return self.end(exit_code, reason, files, run_s=run_s, output_s=output_s)

    def log(self, data: bytes, offset: int = 0, *, stream: str = "combined", at=None) -> int:
        """Post log bytes as the agent does (``stream``/``at`` as a stream-aware agent says them);
        returns the size the server holds."""
        return agent_log_append(node=self.lease.node, job_id=self.job.pk, attempt=self.job.attempt,
                                offset=offset, data=data, stream=stream, at=at)

    def bundle(self, files: dict[str, bytes], *, packer: bool = False) -> bytes:
        """Pack ``files`` and upload the archive; returns its bytes. By default a ``tar.gz``
        without offsets (as agents before issue 15 packed); ``packer=True`` packs with the real
        agent packer (:func:`e31_agent.packer.pack`: a plain tar whose manifest gives each
        file's offset, as agents pack today)."""
        if packer:
            return self._bundle_packed(files)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        archive = buf.getvalue()
        digest = hashlib.sha256(archive).hexdigest()
        attempt = self.job.attempt
        bundle_put_chunk(job=self.job, attempt=attempt, offset=0, data=archive, sha256=digest)
        manifest = [
            {"path": name, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in files.items()
        ]
        bundle_complete(job=self.job, attempt=attempt, size_bytes=len(archive), sha256=digest,
                        files=manifest, retention_days=7)
        return archive

    def _bundle_packed(self, files: dict[str, bytes]) -> bytes:
        """Write ``files`` into a job dir, pack it with the agent's packer and upload the archive."""
        from e31_agent.packer import pack

        with tempfile.TemporaryDirectory() as tmp:
            job_dir = Path(tmp, "job")
            for name, data in files.items():
                Path(job_dir, name).parent.mkdir(parents=True, exist_ok=True)
                Path(job_dir, name).write_bytes(data)
            job_dir.mkdir(exist_ok=True)
            packed = pack(job_dir, ["**"], Path(tmp, "out", "bundle.tar"), job_id=self.job.pk)
            archive = packed.path.read_bytes()
        attempt = self.job.attempt
        bundle_put_chunk(job=self.job, attempt=attempt, offset=0, data=archive, sha256=packed.sha256)
        bundle_complete(job=self.job, attempt=attempt, size_bytes=packed.size_bytes, sha256=packed.sha256,
                        files=[f.to_json() for f in packed.files], retention_days=7)
        return archive


def finished_job(owner, *, exit_code: int = 0, log: bytes = b"hello\n",
                 files: dict[str, bytes] | None = None, clock: FrozenClock | None = None, run_s: float = 0,
                 output_s: float = 0, packer: bool = False, **overrides: Any) -> tuple[Job, bytes | None]:
    """A job run to release: log written, outputs bundled (an empty bundle when ``files`` is None,
    as a real agent uploads for declared outputs that matched nothing). With ``clock``, the command
    runs ``run_s`` seconds and the outputs take ``output_s``; ``packer``: packed by the agent's
    packer (a plain tar with offsets, see :meth:`Agent.bundle`). Returns the job and its archive (None
    when ``files`` is None)."""
    job = rented_job(owner, **overrides)
    agent = Agent(job, clock)
    agent.start()
    if log:
        agent.log(log)
    agent._wait(run_s)
    agent.say("exited", exit_code=exit_code, reason="exit")
    agent._wait(output_s)
    archive = agent.bundle(files or {}, packer=packer)
    agent.say("finished")
    job.refresh_from_db()
    return job, archive if files else None


def pool_drain(drain: bool = True) -> None:
    """Drain every node (``node_set_drain``, as the operator does): jobs submitted now wait in the
    queue; ``pool_drain(False)`` opens the pool again (its cycle places them at the clock's now)."""
    for node in Node.objects.all():
        node_set_drain(node=node, drain=drain)
