"""``/metrics`` (issue 26 item 1): the operator's bearer only, and series that move with the site."""
import re

import pytest

from ..factories import spec

TOKEN = "metrics-test-token"


@pytest.fixture
def scrape(client, settings):
    settings.E31_METRICS_TOKEN = TOKEN

    def get() -> dict[str, float]:
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert response.status_code == 200, response.content
        assert response["Content-Type"].startswith("text/plain")
        series = {}
        for line in response.content.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                series[name] = float(value)
        return series

    return get


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Token {TOKEN}", f"Bearer {TOKEN}x"])
def test_it_refuses_anything_but_the_operator_token(client, settings, authorization, db):
    settings.E31_METRICS_TOKEN = TOKEN
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization else {}
    response = client.get("/metrics", **headers)
    assert response.status_code == 401
    assert "e31_" not in response.content.decode()


def test_it_is_closed_when_no_token_is_configured(client, settings, db):
    settings.E31_METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_it_refuses_a_signed_in_renter_and_their_api_token(client, api, owner, settings):
    settings.E31_METRICS_TOKEN = TOKEN
    client.force_login(owner)
    assert client.get("/metrics").status_code == 401
    assert api.get("/metrics").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_its_series_move_as_a_job_is_submitted_and_rented(api, pool, scrape):
    before = scrape()
    assert before['e31_gpus{model="H100-80GB",state="free"}'] == 4
    assert before['e31_gpus{model="A100-40GB",state="free"}'] == 2
    assert before['e31_node_up{node="node-a",state="up"}'] == 1
    assert before["e31_metrics_errors"] == 0

    resp = api.post("/api/v1/jobs/", spec(compute={"gpus": 2, "gpu_model": "H100-80GB", "time_limit": "1h"}),
                    format="json")
    assert resp.status_code == 201, resp.json()
    after = scrape()
    assert after['e31_gpus{model="H100-80GB",state="leased"}'] == 2
    assert after['e31_gpus{model="H100-80GB",state="free"}'] == 2
    assert after['e31_jobs{state="rented"}'] == 1
    assert after["e31_submit_seconds_count"] == before["e31_submit_seconds_count"] + 1
    assert after["e31_scheduler_cycle_seconds_count"] > before["e31_scheduler_cycle_seconds_count"]
    assert after["e31_spend_rate_dollars_per_hour"] > before["e31_spend_rate_dollars_per_hour"]
    assert after['e31_celery_queue_length{queue="core"}'] >= 0
    buckets = [v for k, v in after.items() if re.match(r'e31_submit_seconds_bucket\{le=', k)]
    assert buckets == sorted(buckets) and buckets[-1] == after["e31_submit_seconds_count"]


def test_make_run_generates_the_bearer_once_into_var_metrics_token(settings, tmp_path, client, db):
    """``make run`` (e31site/standalone.py) with no E31_METRICS_TOKEN: one token, written 0600 into
    var/metrics_token on the first run and read again on the next, opens /metrics."""
    from e31site.standalone import metrics_token

    settings.VAR_DIR = tmp_path
    settings.E31_METRICS_TOKEN = ""
    assert metrics_token() == str(tmp_path / "metrics_token")
    token = (tmp_path / "metrics_token").read_text().strip()
    assert len(token) >= 24 and settings.E31_METRICS_TOKEN == token
    assert (tmp_path / "metrics_token").stat().st_mode & 0o777 == 0o600
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
    settings.E31_METRICS_TOKEN = ""  # the next start reads the same token
    metrics_token()
    assert settings.E31_METRICS_TOKEN == token


def test_a_token_set_in_the_environment_wins_and_nothing_is_written(settings, tmp_path):
    from e31site.standalone import metrics_token

    settings.VAR_DIR = tmp_path
    settings.E31_METRICS_TOKEN = "from-env"
    assert metrics_token() == "E31_METRICS_TOKEN"
    assert settings.E31_METRICS_TOKEN == "from-env" and not (tmp_path / "metrics_token").exists()
