"""``e31-agent --health-port`` (issue 26 item 2): ``/healthz`` while the agent's loops live,
``/readyz`` once it is registered and while the server answers; bodies say ok or failing only."""

import threading
import time

import httpx
import pytest
from e31_agent.agent import Agent
from e31_agent.cli import parse_args
from e31_agent.config import AgentConfig
from e31_agent.health import HealthServer

from .fake_server import TOKEN, FakeServer


def probe(server: HealthServer, path: str) -> tuple[int, dict]:
    response = httpx.get(f"http://127.0.0.1:{server.port}{path}", timeout=5)
    return response.status_code, response.json()


@pytest.fixture
def fake():
    with FakeServer() as server:
        yield server


@pytest.fixture
def agent(fake, tmp_path):
    agent = Agent(AgentConfig(server=fake.url, token=TOKEN, workdir=tmp_path / "w", simulate="1xH100-80GB",
                              shutdown_grace_s=1, unsafe_no_sandbox=True))
    probes = HealthServer(liveness=agent.liveness, readiness=agent.readiness).start()
    runner = threading.Thread(target=agent.run, daemon=True)
    agent.start = runner.start  # each test starts it when it wants
    yield agent, probes
    agent.stop()
    if runner.is_alive():
        runner.join(15)  # before the fake server closes under its long poll
    probes.stop()


def wait_status(probes: HealthServer, path: str, status: int, timeout_s: float = 10) -> dict:
    """Probe ``path`` until it answers ``status`` (polls every 0.1 s); its body."""
    deadline = time.monotonic() + timeout_s
    code, body = probe(probes, path)
    while code != status and time.monotonic() < deadline:
        time.sleep(0.1)
        code, body = probe(probes, path)
    assert code == status, body
    return body


def test_it_is_live_at_once_and_ready_once_registered(agent, fake):
    agent, probes = agent
    assert probe(probes, "/healthz") == (200, {"status": "ok", "checks": {"heartbeat": "ok", "poll": "ok"}})
    assert probe(probes, "/readyz") == (503, {"status": "failing",
                                              "checks": {"registered": "failing", "server": "failing"}})
    agent.start()
    body = wait_status(probes, "/readyz", 200)
    assert body == {"status": "ok", "checks": {"registered": "ok", "server": "ok"}}
    assert probe(probes, "/healthz")[0] == 200
    assert probe(probes, "/nothing")[0] == 404


def test_it_is_not_ready_when_the_server_stops_answering_and_says_nothing_of_why(agent, fake):
    agent, probes = agent
    agent.start()
    wait_status(probes, "/readyz", 200)
    with fake.state.lock:  # the server stops answering: heartbeats and polls fail (interval 0.3 s)
        fake.state.fail[("POST", "/api/v1/agent/heartbeat")] = [503] * 1000
        fake.state.fail[("GET", "/api/v1/agent/work")] = [503] * 1000
    body = wait_status(probes, "/readyz", 503)
    assert body == {"status": "failing", "checks": {"registered": "ok", "server": "failing"}}
    assert fake.url not in str(body) and TOKEN not in str(body)
    assert probe(probes, "/healthz")[0] == 200  # the agent itself lives: no restart wanted


def test_a_dead_loop_fails_healthz(agent, fake):
    agent, probes = agent
    agent.start()
    wait_status(probes, "/readyz", 200)
    agent._poller = threading.Thread(target=lambda: None)  # a poll thread that has ended
    agent._poller.start()
    agent._poller.join()
    assert probe(probes, "/healthz") == (503, {"status": "failing", "checks": {"heartbeat": "ok", "poll": "failing"}})


def test_the_flag_defaults_off_and_refuses_a_port_out_of_range(monkeypatch):
    monkeypatch.delenv("E31_AGENT_HEALTH_PORT", raising=False)
    base = ["--server", "http://127.0.0.1:1", "--token", "t"]
    assert parse_args(base).health_port == 0
    assert parse_args([*base, "--health-port", "9031"]).health_port == 9031
    with pytest.raises(SystemExit):
        parse_args([*base, "--health-port", "70000"])
