"""Issue 28 item 7: a gang that names no GPU model goes on nodes of one model (SPEC §5), through
the real services: submit, scheduling cycles, the agent's reports."""
from __future__ import annotations

import pytest

from apps.jobs.models import Job

from ..drive import Agent, queued_job, rented_job
from ..factories import node_with_gpus

GANG = {"gpus": 4, "nodes": 2, "time_limit": "1h"}


@pytest.fixture
def mixed_pool(db):
    """node-a and node-c: 4 x H100-80GB each; node-b: 4 x A100-40GB."""
    return [node_with_gpus("node-a", count=4), node_with_gpus("node-b", count=4, model="A100-40GB", memory_mb=40960),
            node_with_gpus("node-c", count=4)]


def _models(job: Job) -> list[str]:
    return sorted(lease.lease_gpus.first().gpu.model for lease in job.leases.filter(attempt=job.attempt))


def _nodes(job: Job) -> list[str]:
    return sorted(job.leases.filter(attempt=job.attempt).values_list("node__name", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_gang_waits_for_nodes_of_one_model_then_starts_on_them(frozen_clock, owner, mixed_pool):
    holder = rented_job(owner, compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"})
    gang = queued_job(owner, compute=GANG)
    gang.refresh_from_db()
    assert gang.state == "queued"  # node-b's A100s and the other H100 node are free, but of two models
    assert gang.pending_reason.startswith("waiting for 4 GPUs on each of 2 nodes of one GPU model: the GPUs free "
                                          "now are on nodes of different models (compute.mixed_models: true")
    frozen_clock.advance(60)
    Agent(holder, frozen_clock).run(run_s=30)  # the release asks for a cycle
    gang.refresh_from_db()
    assert gang.state == "rented" and _nodes(gang) == ["node-a", "node-c"]
    assert _models(gang) == ["H100-80GB", "H100-80GB"]


@pytest.mark.django_db(transaction=True)
def test_a_gang_that_asks_for_mixed_models_starts_across_them(frozen_clock, owner, mixed_pool):
    rented_job(owner, compute={"gpus": 4, "gpu_model": ["H100"], "time_limit": "1h"})
    gang = queued_job(owner, compute={**GANG, "mixed_models": True})
    gang.refresh_from_db()
    assert gang.state == "rented" and _models(gang) == ["A100-40GB", "H100-80GB"]
    assert gang.spec["compute"]["mixed_models"] is True and gang.mixed_models
