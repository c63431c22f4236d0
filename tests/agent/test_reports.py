"""Reports of several jobs in one call (protocol v2), per-report answers, and the fallback to v1."""

import threading
import time

from e31_agent.client import ApiClient
from e31_agent.models import JobRef
from e31_agent.reports import Reporter, Spool

from .fake_server import TOKEN, FakeServer
from .test_agent import assignment, node, offer  # noqa: F401 - node is a fixture


def reporter(client, job_id, tmp_path=None, **kw):
    spool = tmp_path / f"{job_id}.jsonl" if tmp_path is not None else None
    return Reporter(client, JobRef(job_id, 1), abort=threading.Event(), on_stale=kw.pop("on_stale", lambda: None),
                    spool_path=spool)


def test_pending_reports_of_several_jobs_go_in_one_call_in_order(tmp_path):
    with FakeServer() as server:
        client = ApiClient(server.url, TOKEN)
        with server.state.lock:  # the server is busy: reports pile up (the calls out wait)
            reps = [reporter(client, j, tmp_path) for j in (1, 2, 3)]
            for r in reps[:2]:
                r.send("running", pid=1)
            deadline = time.monotonic() + 10
            while not all(r._busy for r in reps[:2]):  # both calls are out, each with one job's report
                assert time.monotonic() < deadline
                time.sleep(0.01)
            for r in reps[:2]:
                r.send("finished", exited={"exit_code": 0, "reason": "exit"})
            reps[2].send("running", pid=1)
            reps[2].send("finished", exited={"exit_code": 0, "reason": "exit"})
        assert all(r.wait_sent(10) for r in reps)
        client.close()
    batches = server.state.batches
    assert len(batches) <= 4  # 6 reports: two calls were out while they piled up, then the rest
    assert any(len({i["job_id"] for i in b}) >= 2 for b in batches)  # the first call back took its job's and job 3's
    for j in (1, 2, 3):
        sent = [(i["seq"], i["type"]) for b in batches for i in b if i["job_id"] == j]
        assert sent == [(1, "running"), (2, "finished")]  # each once, in order
        assert [r["seq"] for r in server.state.reports[j]] == [1, 2]
        assert Spool(tmp_path / f"{j}.jsonl").load() == (2, [])


def test_a_report_the_server_did_not_apply_goes_again_before_the_later_ones(tmp_path):
    with FakeServer() as server:
        client = ApiClient(server.url, TOKEN)
        with server.state.lock:
            server.state.item_fail[(2, 1)] = [500]  # job 2's first report fails once
            one, two = reporter(client, 1, tmp_path), reporter(client, 2, tmp_path)
            for r in (one, two):
                r.send("running", pid=1)
                r.send("finished", exited={"exit_code": 0, "reason": "exit"})
        assert one.wait_sent(10) and two.wait_sent(10)
        client.close()
    assert [r["seq"] for r in server.state.reports[1]] == [1, 2]  # job 1 was not held back
    assert [r["seq"] for r in server.state.reports[2]] == [1, 2]  # each once, in order
    sent_of_2 = [i["seq"] for b in server.state.batches for i in b if i["job_id"] == 2]
    assert sent_of_2.count(1) == 2 and sent_of_2[-2:] == [1, 2]  # the failed one again, then the next
    assert [b["seq"] for b in two.sent] == [1, 2]
    assert Spool(tmp_path / "2.jsonl").load() == (2, [])


def test_a_stale_attempt_in_a_batch_drops_that_attempt_only(tmp_path):
    stale = threading.Event()
    with FakeServer() as server:
        client = ApiClient(server.url, TOKEN)
        with server.state.lock:
            server.state.stale.add((2, 1))
        one, two = reporter(client, 1), reporter(client, 2, on_stale=stale.set)
        one.send("running", pid=1)
        two.send("running", pid=1)
        assert one.wait_sent(10) and two.wait_sent(10)
        assert two.send("finished") == 0  # nothing more for a stale attempt
        client.close()
    assert stale.is_set() and two.stale and not one.stale
    assert server.state.types(1) == ["running"] and server.state.types(2) == []


def test_a_server_without_the_batch_call_gets_one_call_per_report():
    with FakeServer() as server:
        server.state.batch_call = False  # protocol v1
        client = ApiClient(server.url, TOKEN)
        r = reporter(client, 4)
        r.send("accepted")
        r.send("running", pid=1)
        assert r.wait_sent(10)
        r.send("exited", exit_code=0, reason="exit")
        assert r.wait_sent(10)
        client.close()
    assert server.state.types(4) == ["accepted", "running", "exited"]
    singles = [c for c in server.state.calls if c[1] == "/api/v1/agent/jobs/4/report/"]
    assert len(singles) == 3


def test_the_long_poll_does_not_spin_on_an_assignment_it_holds(node):  # noqa: F811
    server, agent, workdir = node
    with server.state.lock:
        server.state.sticky_assignments = True  # the assignment stays offered while the job runs
    offer(server, assignment(61, "sleep 2"))
    assert server.state.wait_for(lambda: "running" in server.state.types(61), 10)
    with server.state.lock:
        before = sum(1 for c in server.state.calls if c[1] == "/api/v1/agent/work/")
    time.sleep(1.5)
    with server.state.lock:
        polls = sum(1 for c in server.state.calls if c[1] == "/api/v1/agent/work/") - before
        assert any((61, 1) in have for have in server.state.work_have)
        server.state.assignments = []
    assert polls <= 4  # about one per poll_wait_s (1 s here), not one after another
    assert server.state.wait_for(lambda: "finished" in server.state.types(61), 10)
