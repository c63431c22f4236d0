"""Factories for the browser tests: users, a node with GPUs, jobs in each step of their life."""
from __future__ import annotations

import hashlib
import io
import itertools
import tarfile
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from apps.artifacts.services import bundle_complete, bundle_put_chunk
from apps.jobs.models import Job
from apps.jobs.services import agent_report, job_submit, log_append
from apps.pool.choices import NodeState
from apps.pool.models import Gpu, Node
from apps.pool.scheduling import schedule_cycle

PASSWORD = "web-tests-pw"
_gpu_ids = itertools.count(1)


class WebUserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"web-user-{n}")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class WebNodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"web-node-{n}")
    state = NodeState.UP
    hostname = factory.LazyAttribute(lambda o: f"{o.name}.local")
    cpus = 32
    memory_bytes = 256 * 10**9
    disk_bytes = 10**12
    simulated = True
    last_heartbeat_at = factory.LazyFunction(timezone.now)
    registered_at = factory.LazyFunction(timezone.now)


def node_with_gpus(*, count: int = 4, model: str = "H100-80GB", memory_mb: int = 81559,
                   **kwargs: Any) -> Node:
    """A node that is up with ``count`` GPUs of ``model``."""
    node = WebNodeFactory(**kwargs)
    Gpu.objects.bulk_create([
        Gpu(node=node, index=i, uuid=f"GPU-web-{next(_gpu_ids)}", model=model, memory_mb=memory_mb)
        for i in range(count)
    ])
    return node


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

    def log(self, data: bytes, offset: int = 0) -> None:
        log_append(node=self.lease.node, job_id=self.job.pk, attempt=self.job.attempt,
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
    """A job run to release: log written, outputs bundled. Returns the job and its archive."""
    job = rented_job(owner, **overrides)
    agent = Agent(job)
    agent.say("accepted")
    agent.say("running")
    if log:
        agent.log(log)
    agent.say("exited", exit_code=exit_code, reason="exit")
    archive = agent.bundle(files) if files else None
    agent.say("finished")
    job.refresh_from_db()
    return job, archive
