"""``/healthz`` and ``/readyz`` (issue 26 item 2): unauthenticated, cheap, no detail leaked."""
import socket

import pytest

from apps.ops import health


@pytest.fixture(autouse=True)
def _fresh_answer(monkeypatch):
    monkeypatch.setattr(health, "_kept", None)  # each test sees its own checks, not a kept answer


def test_it_answers_healthz_to_anyone(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_it_is_ready_when_database_redis_storage_and_schema_answer(client, db):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok", "storage": "ok",
                                                          "migrations": "ok"}}


def test_it_is_not_ready_when_redis_does_not_answer_and_says_nothing_of_why(client, db, settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["redis"] == "failing" and body["checks"]["database"] == "ok"
    assert str(port) not in response.content.decode() and "Error" not in response.content.decode()


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_it_refuses_writes(client, method):
    assert getattr(client, method)("/readyz").status_code == 405


def test_a_flood_of_probes_costs_one_check_per_two_seconds(client, db, monkeypatch):
    calls = []
    monkeypatch.setitem(health.CHECKS, "database", lambda: calls.append(1) or True)
    for _ in range(50):
        assert client.get("/readyz").status_code == 200
    assert len(calls) == 1
