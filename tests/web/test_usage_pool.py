"""Usage (my leases, totals, CSV) and the pool summary."""
import csv
import io
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.metering.selectors import CSV_COLUMNS

from .factories import finished_job, node_with_gpus, rented_job

pytestmark = pytest.mark.django_db


def test_usage_lists_my_leases_with_totals(web, user, stranger_user, node):
    job, _ = finished_job(user, name="billed-job")
    finished_job(stranger_user, name="not-mine")
    lease = job.leases.get()
    html = web.get("/usage/").content.decode()
    assert "billed-job" in html and "not-mine" not in html
    assert "1 × H100-80GB" in html and node.name in html
    assert f"${lease.cost_display}" in html
    assert "Released · Succeeded" in html
    assert re.search(r'<span class="yes"><svg class="icon icon-check"[^>]*>.*?</svg> yes</span>', html, re.S)
    assert "Billed GPU-hours" in html and "Billed seconds" in html
    assert "Billed GPU-hours and cost by day" in html


def test_usage_shows_an_open_lease_without_cost(web, user, node):
    rented_job(user, name="holding")
    html = web.get("/usage/").content.decode()
    assert "holding" in html and "Rented" in html


def test_usage_filters_by_day(web, user, node):
    finished_job(user, name="today-job")
    today = timezone.localdate()
    assert "today-job" in web.get(f"/usage/?from={today}&to={today}").content.decode()
    tomorrow = today + timedelta(days=1)
    html = web.get(f"/usage/?from={tomorrow}").content.decode()
    assert "today-job" not in html and "No leases in these days" in html
    html = web.get(f"/usage/?to={today - timedelta(days=1)}").content.decode()
    assert "today-job" not in html


def test_usage_explains_a_bad_date(web, user):
    resp = web.get("/usage/?from=yesterday")
    assert resp.status_code == 200
    assert "Enter a valid date" in resp.content.decode()
    assert web.get("/usage/csv/?from=yesterday").status_code == 400


def test_usage_csv_has_the_same_rows(web, user, stranger_user, node):
    job, _ = finished_job(user, name="csv-job")
    finished_job(stranger_user, name="not-mine")
    resp = web.get("/usage/csv/")
    assert resp.status_code == 200
    assert resp["Content-Type"].startswith("text/csv")
    assert "attachment" in resp["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(resp.content.decode())))
    assert rows[0] == CSV_COLUMNS
    assert len(rows) == 2
    row = dict(zip(CSV_COLUMNS, rows[1], strict=True))
    assert row["job_id"] == str(job.pk) and row["job_name"] == "csv-job" and row["charged"] == "yes"
    assert row["rented_at"].endswith("+00:00")


def test_usage_csv_link_keeps_the_filter(web, user):
    html = web.get("/usage/?from=2024-01-01&to=2024-01-31").content.decode()
    assert 'href="/usage/csv/?from=2024-01-01&amp;to=2024-01-31"' in html


def test_pool_shows_models_with_total_free_and_rate(web, user, node):
    node_with_gpus(count=2, model="A100-40GB", memory_mb=40960)
    rented_job(user)
    html = web.get("/pool/").content.decode()
    assert "H100-80GB" in html and "A100-40GB" in html
    assert "$2.49" in html and "$1.29" in html
    assert "3 in use" not in html and "1 in use" in html
    assert node.name not in html  # the node list is for staff


def test_pool_shows_nodes_to_staff(staff_web, node):
    html = staff_web.get("/pool/").content.decode()
    assert node.name in html and "Up" in html and "H100-80GB" in html


def test_an_empty_pool_says_so(web):
    html = web.get("/pool/").content.decode()
    assert "No GPU nodes are up" in html
