"""Factories for the browser tests: users, a node with GPUs, jobs in each step of their life."""
from __future__ import annotations

import hashlib
import io
import tarfile
from typing import Any

from apps.agent_api.reports import agent_log_append, agent_report
from apps.artifacts.services import bundle_complete, bundle_put_chunk
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.pool.scheduling import schedule_cycle

from ..factories import PASSWORD, UserFactory, node_with_gpus

# Users and nodes come from the shared factories; the browser tests add jobs in each step.
__all__ = ["PASSWORD", "UserFactory", "node_with_gpus"]


def spec_doc(**overrides: Any) -> dict:
    """A valid spec document; top-level parts replaced by ``overrides``."""
    doc = {
        "name": "web-job",
        "work": {"command": "echo hello", "kind": "other"},
        "compute": {"gpus": 1, "time_limit": "10m"},
        "output": {"paths": ["out/**"]},
    }
    doc.update(overrides)
    return doc


def queued_job(owner, **overrides: Any) -> Job:
    """A job submitted through the real service; no scheduling cycle has run, so it waits."""
    return job_submit(owner=owner, document=spec_doc(**overrides))


def rented_job(owner, **overrides: Any) -> Job:
    """A job placed on a node by one scheduling cycle."""
    job = queued_job(owner, **overrides)
    schedule_cycle()
    job.refresh_from_db()
    assert job.state == "rented", job.pending_reason
    return job


class Agent:
    """Plays the job's node agent through the services its endpoints call."""

    def __init__(self, job: Job):
        self.job = Job.objects.get(pk=job.pk)
        self.lease = self.job.leases.get(attempt=self.job.attempt)
        self.seq = 0

    def say(self, type_: str, **extra: Any) -> None:
        self.seq += 1
        agent_report(node=self.lease.node, job_id=self.job.pk,
                     report={"attempt": self.job.attempt, "seq": self.seq, "type": type_, **extra})

    def run(self, exit_code: int | None = 0, reason: str = "exit", files: dict[str, bytes] | None = None) -> Job:
        """The whole run as a real agent reports it (outputs bundled, empty when ``files`` is None);
        returns the job as it is after ``finished``."""
        self.say("accepted")
        self.say("running")
        self.say("exited", exit_code=exit_code, reason=reason)
        self.bundle(files or {})
        self.say("finished")
        return Job.objects.get(pk=self.job.pk)

    def log(self, data: bytes, offset: int = 0) -> None:
        agent_log_append(node=self.lease.node, job_id=self.job.pk, attempt=self.job.attempt,
                   offset=offset, data=data)

    def bundle(self, files: dict[str, bytes]) -> bytes:
        """Pack ``files`` as the agent would and upload the archive; returns its bytes."""
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


def finished_job(owner, *, exit_code: int = 0, log: bytes = b"hello\n",
                 files: dict[str, bytes] | None = None,
                 **overrides: Any) -> tuple[Job, bytes | None]:
    """A job run to release: log written, outputs bundled (an empty bundle when ``files`` is None,
    as a real agent uploads for declared outputs that matched nothing). Returns the job and its
    archive (None when ``files`` is None)."""
    job = rented_job(owner, **overrides)
    agent = Agent(job)
    agent.say("accepted")
    agent.say("running")
    if log:
        agent.log(log)
    agent.say("exited", exit_code=exit_code, reason="exit")
    archive = agent.bundle(files or {})
    agent.say("finished")
    job.refresh_from_db()
    return job, archive if files else None
