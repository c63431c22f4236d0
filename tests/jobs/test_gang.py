"""Multi-node jobs through the report service: each rank's reports count, the gang ends as one."""
import pytest

from apps.agent_api.models import AgentReport
from apps.agent_api.reports import agent_report
from apps.agent_api.selectors import gang_stops_for, work_with_gang_stops
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.metering.models import Lease

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


class Rank:
    """Plays the agent of one rank; every rank numbers its reports from 1."""

    def __init__(self, lease):
        self.lease = lease
        self.seq = 0

    def say(self, type_, **extra):
        self.seq += 1
        return agent_report(node=self.lease.node, job_id=self.lease.job_id,
                            report={"attempt": self.lease.attempt, "seq": self.seq, "type": type_, **extra})


@pytest.fixture
def gang(owner, pool):
    # the pool's two nodes are of two GPU models: a gang across them must ask for it (SPEC §5)
    job = job_submit(owner=owner, document=spec(compute={"gpus": 1, "nodes": 2, "mixed_models": True,
                                                         "time_limit": "10m"}))
    ranks = [Rank(lease) for lease in Lease.objects.filter(job=job).order_by("node_rank")]
    assert len(ranks) == 2
    return job, ranks


def test_reports_of_two_ranks_with_the_same_seq_both_count(gang):
    job, (r0, r1) = gang
    assert r0.say("accepted") and r1.say("accepted")  # both seq 1: neither is a duplicate
    assert not r0.lease.node == r1.lease.node
    assert all(Lease.objects.filter(job=job).values_list("accepted_at", flat=True))
    assert AgentReport.objects.filter(job=job).count() == 2


def test_a_failed_rank_stops_the_others_and_the_gang_ends_as_one(gang):
    job, (r0, r1) = gang
    for rank in (r0, r1):
        rank.say("accepted")
        rank.say("running")
    ref = {"job_id": job.pk, "attempt": 1}
    assert gang_stops_for(r0.lease.node) == []
    r1.say("exited", exit_code=3, reason="exit")
    assert Job.objects.get(pk=job.pk).state == "output"
    assert gang_stops_for(r0.lease.node) == [ref]  # rank 0 is told to stop...
    assert ref in work_with_gang_stops(r0.lease.node)["cancel"]
    assert gang_stops_for(r1.lease.node) == []  # ...rank 1 has stopped already
    r1.say("finished")
    assert Job.objects.get(pk=job.pk).state == "output"  # rank 0 still packs its outputs
    assert Lease.objects.get(pk=r0.lease.pk).released_at is None
    r0.say("exited", exit_code=143, reason="cancelled")
    assert gang_stops_for(r0.lease.node) == []
    r0.say("finished")
    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.outcome, job.exit_code) == ("released", "failed", 3)
    assert not Lease.objects.filter(job=job, released_at__isnull=True).exists()


def test_each_rank_keeps_a_log_of_its_own(gang, api):
    from apps.agent_api.reports import agent_log_append
    job, (r0, r1) = gang
    for rank in (r0, r1):
        rank.say("accepted")
    agent_log_append(node=r0.lease.node, job_id=job.pk, attempt=1, offset=0, data=b"rank 0 line 1\n")
    agent_log_append(node=r1.lease.node, job_id=job.pk, attempt=1, offset=0, data=b"rank 1 line 1\n")
    agent_log_append(node=r1.lease.node, job_id=job.pk, attempt=1, offset=14, data=b"rank 1 line 2\n")
    agent_log_append(node=r0.lease.node, job_id=job.pk, attempt=1, offset=0, data=b"rank 0 line 1\n")  # again
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/").content == b"rank 0 line 1\n"
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/?rank=1").content == b"rank 1 line 1\nrank 1 line 2\n"
    assert api.get(f"/api/v1/jobs/{job.pk}/logs/?rank=2").status_code == 400
    assert Job.objects.get(pk=job.pk).log_size == 14


def test_folded_reports_of_a_gang_end_it_as_one_too(gang):
    """Ranks with nothing staged nor declared send running and finished(exited=...) only (protocol v2)."""
    job, (r0, r1) = gang
    for rank in (r0, r1):
        rank.say("running")  # accepted folded in
    assert all(Lease.objects.filter(job=job).values_list("accepted_at", flat=True))
    ref = {"job_id": job.pk, "attempt": 1}
    r1.say("finished", exited={"exit_code": 3, "reason": "exit"})
    assert Job.objects.get(pk=job.pk).state == "output"
    assert gang_stops_for(r0.lease.node) == [ref]  # rank 0 is told to stop
    assert gang_stops_for(r1.lease.node) == []  # rank 1's finished stands for its exited
    r0.say("finished", exited={"exit_code": 143, "reason": "cancelled"})
    assert gang_stops_for(r0.lease.node) == []
    job = Job.objects.get(pk=job.pk)
    assert (job.state, job.outcome, job.exit_code) == ("released", "failed", 3)
    assert [e.to_state for e in job.events.order_by("seq") if e.to_state] == [
        "queued", "rented", "running", "output", "released"]


def test_each_rank_gets_the_environment_every_launcher_reads_and_the_gang_s_nodes(gang):
    """Issue 24 item 2: E31_* and torchrun's names on every rank, the same rendezvous on each."""
    from apps.agent_api.selectors import agent_work_for

    job, (r0, r1) = gang
    master = r0.lease.node.hostname or r0.lease.node.name
    port = str(29500 + job.pk % 1000)
    gang_nodes = [{"rank": r.lease.node_rank, "host": r.lease.node.hostname or r.lease.node.name, "gpus": 1}
                  for r in (r0, r1)]
    for rank in (r0, r1):
        [assignment] = agent_work_for(rank.lease.node)["assignments"]
        assert assignment["env"] == {
            "E31_JOB_ID": str(job.pk), "E31_ATTEMPT": "1", "E31_NODE_RANK": str(rank.lease.node_rank),
            "E31_NUM_NODES": "2", "E31_GPUS_PER_NODE": "1", "E31_WORLD_SIZE": "2", "E31_MASTER_ADDR": master,
            "E31_MASTER_PORT": port, "MASTER_ADDR": master, "MASTER_PORT": port, "NNODES": "2",
            "NODE_RANK": str(rank.lease.node_rank), "WORLD_SIZE": "2"}
        assert assignment["gang"] == gang_nodes


def test_a_gang_s_network_is_the_same_on_every_rank_and_its_attempt_s_own(gang):
    """Issue 24 item 1: one name, VXLAN id and address list per attempt, on every rank's assignment."""
    from apps.agent_api.selectors import agent_work_for, gang_network

    job, (r0, r1) = gang
    nets = [agent_work_for(r.lease.node)["assignments"][0]["gang_net"] for r in (r0, r1)]
    assert nets[0] == nets[1] == gang_network(job_id=job.pk, attempt=1, nodes=2)
    assert nets[0]["addresses"] == ["10.231.0.1", "10.231.0.2"] and nets[0]["prefix"] == 16
    again = gang_network(job_id=job.pk, attempt=2, nodes=2)
    assert again["name"] != nets[0]["name"] and again["vni"] != nets[0]["vni"]
    assert len(nets[0]["name"]) == 8 and 0 < nets[0]["vni"] < 2**24
