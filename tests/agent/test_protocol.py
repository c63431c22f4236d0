"""The agent speaks e31_protocol's words: one phase vocabulary, report types, reasons and codes."""
import threading

import pytest
from e31_agent.client import ApiClient
from e31_agent.models import JobRef
from e31_agent.reports import Reporter
from e31_agent.state import RunState
from e31_protocol import AgentPhase

from .fake_server import TOKEN, FakeServer


@pytest.mark.parametrize(("written", "read"), [
    ("running", AgentPhase.RUNNING), ("output\n", AgentPhase.OUTPUT),
    ("new", AgentPhase.ACCEPTED), ("finishing", AgentPhase.FINISHED),  # the old in-memory words
    ("garbage", AgentPhase.ACCEPTED),
])
def test_a_stored_phase_is_read_in_the_one_vocabulary(tmp_path, written, read):
    (tmp_path / "phase").write_text(written)
    assert RunState(tmp_path).phase == read


def test_only_phases_are_written(tmp_path):
    state = RunState(tmp_path)
    state.set_phase(AgentPhase.OUTPUT)
    assert (tmp_path / "phase").read_text() == "output"
    with pytest.raises(ValueError):
        state.set_phase("finishing")  # an old word is read, never written


def test_reports_take_only_protocol_words(tmp_path):
    with FakeServer() as server:
        client = ApiClient(server.url, TOKEN)
        r = Reporter(client, JobRef(7, 1), abort=threading.Event(), on_stale=lambda: None,
                     spool_path=tmp_path / "reports.jsonl")
        for bad in (lambda: r.send("stopped"), lambda: r.send("exited", exit_code=1, reason="crashed"),
                    lambda: r.send("running", code="packing_failed"),
                    lambda: r.send("finished", code="lost_somehow")):
            with pytest.raises(ValueError):
                bad()
        r.send("finished", code="outputs_not_packed", message="outputs not packed: 1 declared file: a",
               exited={"exit_code": 0, "reason": "exit"})
        assert r.wait_sent(10)
        [sent] = server.state.reports[7]
        assert sent["code"] == "outputs_not_packed" and sent["exited"]["reason"] == "exit"
        r.close()
        client.close()
