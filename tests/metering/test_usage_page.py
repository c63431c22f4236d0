"""The usage page, its filters and CSV (same rows, same totals), the settings page, the receipt page."""
import csv
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from rest_framework.test import APIClient

from apps.core.models import AccountProfile
from apps.metering.selectors import CSV_COLUMNS

from ..drive import Agent, finished_job, placed, queued_job, rented_job
from ..factories import UserFactory, node_with_gpus

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(db):
    return UserFactory(username="alice")


@pytest.fixture(autouse=True)
def _sessions_outlast_the_stories(settings):
    """The stories below move the frozen clock months ahead; the browser signed in at its start stays in."""
    settings.SESSION_COOKIE_AGE = 10 * 365 * 24 * 3600


@pytest.fixture
def web(user):
    client = Client()
    client.force_login(user)
    return client


def _csv(resp) -> list[dict]:
    rows = list(csv.reader(io.StringIO(resp.content.decode())))
    assert rows[0] == CSV_COLUMNS
    return [dict(zip(CSV_COLUMNS, row, strict=True)) for row in rows[1:]]


def _page_total(html: str) -> Decimal:
    return Decimal(re.search(r'data-total-cost>\$([\d,.]+)<', html).group(1).replace(",", ""))


def _lease_at(owner, clock, node, start: datetime, seconds: float, *, gpus: int = 1, name: str = "past"):
    """A job submitted at ``start``, placed on ``node`` (by its GPU model) by a scheduling cycle, run
    ``seconds`` and released 5 s later, as its agent reports it; its lease."""
    clock.set(start)
    model = node.gpus.first().model.split("-")[0]
    job = placed(queued_job(owner, name=name, compute={"gpus": gpus, "gpu_model": [model], "time_limit": "10h"}))
    job = Agent(job, clock).run(run_s=seconds, output_s=5)
    assert (job.state, job.outcome) == ("released", "succeeded")
    return job.leases.get()


def test_the_csv_has_exactly_the_rows_and_totals_of_the_page(frozen_clock, web, user):
    node = node_with_gpus("n1", count=4)
    t = datetime(2025, 1, 31, 23, tzinfo=UTC)
    _lease_at(user, frozen_clock, node, t, 9000, gpus=2, name="across-months")
    _lease_at(user, frozen_clock, node, t + timedelta(days=3), 61.4, name="short")
    _lease_at(user, frozen_clock, node, t + timedelta(days=4), 1234.5, gpus=3, name="three")
    _lease_at(UserFactory(username="bob"), frozen_clock, node, t + timedelta(days=5), 100, name="not-mine")
    query = "?from=2025-01-01&to=2025-02-28"
    html = web.get("/usage/" + query).content.decode()
    rows = _csv(web.get("/usage/csv/" + query))
    assert [r["job_name"] for r in rows] == ["three", "short", "across-months"]
    assert all(f"> {r['job_name']}" in html or f"</a> {r['job_name']}" in html for r in rows)
    assert "not-mine" not in html
    assert sum(Decimal(r["cost"]) for r in rows if r["charged"] == "yes").quantize(Decimal("0.01")) \
        == _page_total(html)
    assert {r["billed_seconds"] for r in rows} == {"9000", "62", "1235"}
    assert all(r["rented_at"].endswith("+00:00") for r in rows)


def test_filters_by_gpu_model_and_outcome_apply_to_page_and_csv(frozen_clock, web, user):
    h100, a100 = node_with_gpus("n1", count=1), node_with_gpus("n2", count=1, model="A100-40GB", memory_mb=40960)
    t = datetime(2025, 3, 3, 9, tzinfo=UTC)
    _lease_at(user, frozen_clock, h100, t, 60, name="on-h100")
    _lease_at(user, frozen_clock, a100, t + timedelta(hours=1), 60, name="on-a100")
    html = web.get("/usage/?gpu_model=A100-40GB").content.decode()
    assert "on-a100" in html and "on-h100" not in html
    assert [r["job_name"] for r in _csv(web.get("/usage/csv/?gpu_model=A100-40GB"))] == ["on-a100"]
    assert _csv(web.get("/usage/csv/?outcome=failed")) == []
    assert len(_csv(web.get("/usage/csv/?outcome=succeeded"))) == 2
    resp = web.get("/usage/?gpu_model=B200")
    assert resp.status_code == 200 and "Select a valid choice" in resp.content.decode()
    assert web.get("/usage/csv/?gpu_model=B200").status_code == 400
    assert web.get("/usage/csv/?from=2025-03-04&to=2025-03-01").status_code == 400


def test_a_running_lease_shows_its_cost_so_far_and_is_marked_running(frozen_clock, web, user):
    node_with_gpus("n1", count=4)
    Agent(rented_job(user, name="holding", compute={"gpus": 1, "time_limit": "2h"})).start()
    frozen_clock.advance(hours=1)
    html = web.get("/usage/").content.decode()
    assert '<span class="tag tag-running">running</span>' in html and "so far" in html
    assert _page_total(html) >= Decimal("2.49")  # an hour of an H100 so far
    row = _csv(web.get("/usage/csv/?outcome=running"))[0]
    assert row["outcome"] == "running" and row["released_at"] == "" and int(row["billed_seconds"]) >= 3600


def test_days_and_times_are_the_users_own(frozen_clock, web, user):
    AccountProfile.objects.create(owner=user, time_zone="Europe/Berlin")
    node = node_with_gpus("n1", count=2)
    _lease_at(user, frozen_clock, node, datetime(2025, 7, 1, 22, 30, tzinfo=UTC), 3600, name="late")
    html = web.get("/usage/?from=2025-07-02&to=2025-07-02").content.decode()
    assert "late" in html and "Europe/Berlin" in html and "Jul 2, 00:30:00" in html
    assert '"days": ["2025-07-02"]' in html
    row = _csv(web.get("/usage/csv/"))[0]
    assert row["rented_at"] == "2025-07-02T00:30:00+02:00"
    assert "late" not in web.get("/usage/?to=2025-07-01").content.decode()


def test_the_chart_data_is_per_day_and_gpu_model_and_vendored(frozen_clock, web, user):
    node = node_with_gpus("n1", count=2)
    _lease_at(user, frozen_clock, node, datetime(2025, 1, 31, 23, tzinfo=UTC), 9000, gpus=2, name="across")
    html = web.get("/usage/").content.decode()
    assert '"days": ["2025-01-31", "2025-02-01"]' in html
    assert '"gpu_hours": {"H100-80GB": [2.0, 3.0]}' in html
    assert "/static/vendor/chart.umd.min.js" in html and "cdn" not in html.lower()
    assert '<ol class="bars" id="usage-bars">' in html  # the page without JavaScript


def test_the_settings_page_sets_the_time_zone_and_shows_the_limit(web, user):
    AccountProfile.objects.create(owner=user, monthly_spend_limit=Decimal("250.00"))
    html = web.get("/account/settings/").content.decode()
    assert "$250.00 per calendar month" in html
    resp = web.post("/account/settings/", {"time_zone": "Mars/Olympus"})
    assert resp.status_code == 200 and "is not a time zone name" in resp.content.decode()
    assert web.post("/account/settings/", {"time_zone": "Asia/Tokyo"}).status_code == 302
    assert AccountProfile.objects.get(owner=user).time_zone == "Asia/Tokyo"
    assert "Asia/Tokyo" in web.get("/usage/").content.decode()


def test_the_job_page_has_a_printable_receipt_and_a_stranger_gets_404(web, user):
    node_with_gpus("n1", count=4)
    job, _ = finished_job(user, name="receipted")
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert "Receipt" in html and "Queue" in html and "Rent and run" in html and "Output" in html
    page = web.get(f"/usage/receipts/{job.pk}/")
    assert page.status_code == 200 and "receipt-page" in page.content.decode()
    stranger = Client()
    stranger.force_login(UserFactory(username="mallory"))
    assert stranger.get(f"/usage/receipts/{job.pk}/").status_code == 404


def test_the_usage_api_uses_the_users_time_zone(frozen_clock, user):

    AccountProfile.objects.create(owner=user, time_zone="Asia/Tokyo")
    node = node_with_gpus("n1", count=1)
    _lease_at(user, frozen_clock, node, datetime(2025, 7, 1, 12, tzinfo=UTC), 60)
    api = APIClient()
    api.force_authenticate(user)
    assert api.get("/api/v1/usage/").json()["leases"][0]["rented_at"] == "2025-07-01T21:00:00+09:00"


def test_the_table_is_paged_and_the_totals_and_csv_cover_every_row(frozen_clock, web, user, settings):
    from apps.web.metering import views

    node = node_with_gpus("n1", count=1)
    t = datetime(2025, 8, 1, tzinfo=UTC)
    for i in range(3):
        _lease_at(user, frozen_clock, node, t + timedelta(hours=i), 60, name=f"job-{i}")
    views.LINES_PER_PAGE, old = 2, views.LINES_PER_PAGE
    try:
        first = web.get("/usage/?gpu_model=H100-80GB").content.decode()
        second = web.get("/usage/?gpu_model=H100-80GB&page=2").content.decode()
    finally:
        views.LINES_PER_PAGE = old
    assert "job-2" in first and "job-1" in first and "job-0" not in first
    assert "job-0" in second and "Leases 3–3 of 3" in second
    assert 'href="?gpu_model=H100-80GB&amp;page=2"' in first
    assert _page_total(first) == _page_total(second) == Decimal("0.12")  # 3 x 60 s x 2.49 / 3600 = 0.1245
    assert len(_csv(web.get("/usage/csv/?gpu_model=H100-80GB&page=2"))) == 3


@pytest.mark.parametrize("query", ["to=9999-12-31", "from=0001-01-01"])
def test_days_out_of_range_are_a_field_error_not_a_crash(web, user, query):
    AccountProfile.objects.create(owner=user, time_zone="Asia/Kolkata")
    for path in ("/usage/", "/usage/csv/"):
        resp = web.get(f"{path}?{query}")
        assert resp.status_code in (200, 400), path
    assert "Must be between 1900-01-01 and 9998-12-31" in web.get(f"/usage/?{query}").content.decode()
    staff = UserFactory(username="ops", is_staff=True)
    client = Client()
    client.force_login(staff)
    assert client.get(f"/usage/report/?{query}").status_code in (200, 400)


def test_a_lease_across_a_month_end_counts_in_each_period_by_overlap(frozen_clock, web, user):
    """Issue 12 item 8: Jan 31 23:00 to Feb 1 01:30 is 1 h in January and 1.5 h in February, on the
    page, its CSV and the API (token auth, which reads dates in the account's zone too)."""

    node = node_with_gpus("n1", count=1)
    _lease_at(user, frozen_clock, node, datetime(2025, 1, 31, 23, tzinfo=UTC), 2.5 * 3600)
    api = APIClient()
    api.force_authenticate(user)
    january = api.get("/api/v1/usage/?from=2025-01-01&to=2025-02-01").json()
    february = api.get("/api/v1/usage/?from=2025-02-01&to=2025-03-01").json()
    assert january["totals"]["billed_seconds"] == 3600 and february["totals"]["billed_seconds"] == 5400
    assert january["totals"]["leases"] == february["totals"]["leases"] == 1
    page = web.get("/usage/?from=2025-02-01&to=2025-02-28")
    assert "1.5000" in page.content.decode() or "1.50" in page.content.decode()
    rows = _csv(web.get("/usage/csv/?from=2025-02-01&to=2025-02-28"))
    assert [r["billed_seconds"] for r in rows] == ["5400"]
    whole = api.get("/api/v1/usage/").json()["totals"]
    assert whole["billed_seconds"] == 9000
    assert Decimal(january["totals"]["cost"]) + Decimal(february["totals"]["cost"]) == Decimal(whole["cost"])


def test_the_usage_api_reads_dates_in_the_accounts_zone_under_token_auth(frozen_clock, user):
    """A Tokyo account's "2025-07-02" starts at 2025-07-01 15:00 UTC, under a real token."""
    from django.core.management import call_command

    AccountProfile.objects.create(owner=user, time_zone="Asia/Tokyo")
    node = node_with_gpus("n1", count=1)
    _lease_at(user, frozen_clock, node, datetime(2025, 7, 1, 16, tzinfo=UTC), 60)  # 2025-07-02 01:00 in Tokyo
    out = io.StringIO()
    call_command("issue_token", user.username, stdout=out)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {out.getvalue().strip()}")
    assert api.get("/api/v1/usage/?from=2025-07-02&to=2025-07-03").json()["totals"]["leases"] == 1
    assert api.get("/api/v1/usage/?from=2025-07-01&to=2025-07-02").json()["totals"]["leases"] == 0


@pytest.mark.django_db
def test_a_reversed_period_is_refused_naming_to():
    api = APIClient()
    api.force_authenticate(UserFactory())
    resp = api.get("/api/v1/usage/?from=9999-12-31&to=0001-01-01")
    assert resp.status_code == 400 and "to" in resp.json()
