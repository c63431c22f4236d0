"""API client: auth header, what is retried and what is not."""

import threading

import pytest
from e31_agent.backoff import Backoff
from e31_agent.client import Aborted, ApiClient, ApiError, StaleAttempt
from e31_agent.models import JobRef

from .fake_server import TOKEN, FakeServer

REPORT = "/api/v1/agent/jobs/3/report/"


@pytest.fixture
def server():
    with FakeServer() as server:
        yield server


def _client(server, token=TOKEN) -> ApiClient:
    return ApiClient(server.url, token, backoff=lambda: Backoff(initial_s=0.01, max_s=0.05))


def _tries(server, path) -> int:
    return sum(1 for _, p in server.state.calls if p == path)


def test_it_retries_network_errors_5xx_and_429(server):
    server.state.fail[("POST", REPORT)] = [0, 502, 429, 500]
    client = _client(server)
    assert client.report(3, {"attempt": 1, "seq": 1, "type": "accepted"}) == {"duplicate": False}
    assert _tries(server, REPORT) == 5
    # the retry of an applied seq is harmless
    assert client.report(3, {"attempt": 1, "seq": 1, "type": "accepted"}) == {"duplicate": True}
    client.close()


def test_it_does_not_retry_4xx(server):
    server.state.fail[("POST", REPORT)] = [400]
    client = _client(server)
    with pytest.raises(ApiError) as err:
        client.report(3, {"attempt": 1, "seq": 1, "type": "accepted"})
    assert err.value.status == 400 and _tries(server, REPORT) == 1
    client.close()


def test_a_bad_token_is_refused_at_once(server):
    client = _client(server, token="wrong")
    with pytest.raises(ApiError) as err:
        client.heartbeat([])
    assert err.value.status == 401
    client.close()


def test_stale_attempt_is_its_own_error(server):
    server.state.stale.add((3, 1))
    client = _client(server)
    with pytest.raises(StaleAttempt):
        client.report(3, {"attempt": 1, "seq": 1, "type": "running"})
    with pytest.raises(StaleAttempt):
        client.log_chunk(3, 1, 0, b"x")
    client.close()


def test_stale_is_read_from_the_code_and_from_an_older_servers_words(server):
    """Protocol v3 answers ``code: stale_attempt``; a v2 server only says so in ``detail``."""
    server.state.stale.add((3, 1))
    client = _client(server)
    with pytest.raises(StaleAttempt) as err:
        client.report(3, {"attempt": 1, "seq": 1, "type": "running"})
    assert err.value.code == "stale_attempt"
    server.state.protocol = 2
    with pytest.raises(StaleAttempt) as err:
        client.report(3, {"attempt": 1, "seq": 2, "type": "running"})
    assert err.value.code == ""
    client.close()


def test_other_409s_are_not_stale(server):
    client = _client(server)
    with pytest.raises(ApiError) as err:
        client.log_chunk(3, 1, 100, b"x")  # past the end of what the server has
    assert err.value.status == 409 and not isinstance(err.value, StaleAttempt)
    assert err.value.code == "log_refused"
    client.close()


def test_abort_ends_the_retries(server):
    server.state.fail[("POST", REPORT)] = [503] * 1000
    abort = threading.Event()
    threading.Timer(0.3, abort.set).start()
    client = _client(server)
    with pytest.raises(Aborted):
        client.report(3, {"attempt": 1, "seq": 1, "type": "accepted"}, abort=abort)
    client.close()


def test_heartbeat_and_work(server):
    server.state.cancel.append({"job_id": 9, "attempt": 2})
    client = _client(server)
    assert client.heartbeat([JobRef(9, 2)]).cancel == [JobRef(9, 2)]
    assert server.state.heartbeats == [{"running": [{"job_id": 9, "attempt": 2}]}]
    answer = client.work(0)
    assert answer.assignments == [] and answer.cancel == [JobRef(9, 2)]
    client.close()


def test_backoff_doubles_to_the_cap():
    backoff = Backoff()
    delays = [backoff.next() for _ in range(10)]
    assert 0.25 <= delays[0] <= 0.5
    assert all(15 <= d <= 30 for d in delays[7:])
    backoff.reset()
    assert backoff.next() <= 0.5
