"""Issue 22 item 4: one builder of the scheduler's view of a job. The submit check (a job not
saved yet), the live cycle (the job's queued row) and the simulator (a trace job) all build their
:class:`JobRequest` with :func:`apps.scheduling.core.job_request`, so they read the same columns."""
from __future__ import annotations

import pytest

from apps.core.units import gb_to_mib
from apps.jobs.services.submit import job_submit, unsaved_job
from apps.jobs.spec import parse_spec
from apps.scheduling.core import JobRequest, job_request
from apps.scheduling.ports import job_queue
from apps.scheduling.simulator.engine import trace_request
from apps.scheduling.simulator.swf import TraceJob

from ..factories import node_with_gpus, spec

COMPUTE = {"gpus": 2, "nodes": 1, "gpu_model": ["H100"], "gpu_memory_gb": 40, "cpus": 8, "memory_gb": 16,
           "time_limit": "30m"}


@pytest.mark.django_db
def test_the_queued_row_and_the_unsaved_job_give_the_same_request(owner):
    node_with_gpus("node-a", count=4, runtimes=["podman"])
    document = spec(compute=COMPUTE, work={"command": "python train.py", "kind": "training", "image": "python:3.11"})
    job = job_submit(owner=owner, document=document)
    [row] = [r for r in job_queue().queued() if r.job_id == job.pk]

    queued = job_request(row, job_id=row.job_id, account=row.owner_id, submitted_at_s=row.submitted_at_s,
                         predicted_runtime_s=600.0, inputs=("https://example.org/a",), input_bytes=10)
    unsaved = unsaved_job(parse_spec(document), owner)
    checked = job_request(unsaved, job_id=job.pk, account=unsaved.owner_id, submitted_at_s=row.submitted_at_s,
                          predicted_runtime_s=600.0, inputs=("https://example.org/a",), input_bytes=10)

    assert queued == checked
    assert queued == JobRequest(
        job_id=job.pk, account=str(owner.pk), submitted_at=job.submitted_at.timestamp(), gpus_per_node=2, nodes=1,
        time_limit_s=1800, gpu_models=("H100",), gpu_memory_mib=gb_to_mib(40), cpus=8,
        memory_mib=gb_to_mib(16), needs_runtime=True, priority_boost=0, predicted_runtime_s=600.0,
        inputs=("https://example.org/a",), input_bytes=10)


def test_a_trace_job_asks_only_for_its_size():
    tj = TraceJob(job_id=7, account="12", submit=50.0, gpus=8, gpus_per_node=4, nodes=2, time_limit_s=3600,
                  run_s=100.0, recorded_wait_s=None)
    assert trace_request(tj) == JobRequest(job_id=7, account="12", submitted_at=50.0, gpus_per_node=4, nodes=2,
                                           time_limit_s=3600)
