"""A job's compute requirements are copied into typed columns at submit (issue 13, part 3), so the
scheduler reads columns, never the spec; memory in MiB."""
import pytest

from apps.jobs.arrays import array_submit
from apps.jobs.queue import DatabaseJobQueue
from apps.jobs.services.submit import job_submit
from apps.scheduling.ports import job_queue

from ..factories import UserFactory, node_with_gpus, spec


@pytest.mark.django_db
def test_submit_fills_the_typed_columns_from_the_spec():
    node_with_gpus(count=4, cpus=64, memory_bytes=512 * 10**9, runtimes=["docker"])
    owner = UserFactory()
    job = job_submit(owner=owner, document=spec(
        work={"command": "true", "kind": "other", "image": "python:3.12"},
        compute={"gpus": 2, "gpu_model": ["H100"], "gpu_memory_gb": 80, "cpus": 8, "memory_gb": 64,
                 "time_limit": "1h"}))
    job.refresh_from_db()
    assert (job.gpu_models, job.gpu_memory_mib, job.cpus, job.memory_mib, job.needs_runtime) == (
        ["H100"], 76294, 8, 61036, True)
    plain = job_submit(owner=owner, document=spec())
    plain.refresh_from_db()
    assert (plain.gpu_models, plain.gpu_memory_mib, plain.cpus, plain.memory_mib, plain.needs_runtime) == (
        [], 0, 0, 0, False)


@pytest.mark.django_db
def test_every_task_of_an_array_has_the_columns_and_the_port_reads_them():
    for _ in range(2):
        node_with_gpus(count=1, cpus=16, memory_bytes=64 * 10**9, state="draining")
    submitted = array_submit(owner=UserFactory(), document=spec(
        array=3, compute={"gpus": 1, "cpus": 4, "memory_gb": 16, "time_limit": "10m"}))
    assert isinstance(job_queue(), DatabaseJobQueue)
    rows = [r for r in job_queue().queued() if r.job_id in submitted.job_ids]
    assert len(rows) == 3
    assert {(r.cpus, r.memory_mib, r.gpu_models, r.needs_runtime) for r in rows} == {(4, 15259, (), False)}
