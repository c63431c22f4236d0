"""Monthly spend limits and the priced dry run (issue 6): refused with the shortfall, nothing killed."""
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client

from apps.core.models import AccountProfile
from apps.core.types import ComputeRequest
from apps.jobs.models import Job
from apps.jobs.services.submit import job_submit
from apps.jobs.spec import compute_request
from apps.metering.limits import spend_check
from apps.metering.pricing import worst_case_price
from apps.metering.selectors import price_estimate, rate_table
from apps.scheduling.adapter import schedule_cycle

from ..drive import Agent
from ..factories import node_with_gpus, spec

pytestmark = pytest.mark.django_db

# 1 H100-80GB (2.49/GPU-h) for 1 h: 2.49
ONE_HOUR = spec(compute={"gpus": 1, "time_limit": "1h"})


@pytest.fixture
def h100(db):
    return node_with_gpus("n1", count=4)


def _limit(owner, amount: str, tz: str = "UTC") -> AccountProfile:
    return AccountProfile.objects.create(owner=owner, monthly_spend_limit=Decimal(amount), time_zone=tz)


def test_the_worst_case_is_time_limit_times_gpus_times_the_highest_accepted_rate(h100):
    assert worst_case_price(ComputeRequest(gpus=2, time_limit_s=3600), rate_table()).amount == Decimal("4.980000")
    assert worst_case_price(ComputeRequest(gpus=1, nodes=2, time_limit_s=1800, gpu_models=("A100-40GB",)),
                            rate_table()).amount == Decimal("1.290000")
    # The request comes typed from the spec (GB to MiB, the duration to seconds) at submit.
    assert compute_request({"gpus": 1, "nodes": 2, "time_limit": "30m", "gpu_model": ["A100-40GB"],
                            "memory_gb": 1}) == ComputeRequest(gpus=1, nodes=2, time_limit_s=1800,
                                                              gpu_models=("A100-40GB",), memory_mib=954)


def test_a_job_over_the_spend_limit_is_refused_with_the_shortfall(owner, api, h100):
    _limit(owner, "5.00")
    job_submit(owner=owner, document=ONE_HOUR)  # queued: its worst case, 2.49, is committed
    resp = api.post("/api/v1/jobs/", spec(compute={"gpus": 2, "time_limit": "1h"}), format="json")
    assert resp.status_code == 400
    message = resp.json()["compute"][0]
    assert "by $2.47" in message and "$2.51 of $5.00" in message  # 4.98 worst case, 5.00 - 2.49 left
    assert Job.objects.count() == 1
    assert api.post("/api/v1/jobs/", spec(compute={"gpus": 1, "time_limit": "1h"}), format="json").status_code == 201


def test_without_a_limit_nothing_is_refused(owner, api, h100):
    resp = api.post("/api/v1/jobs/", spec(compute={"gpus": 4, "time_limit": "7d"}), format="json")
    assert resp.status_code == 201


def test_charged_costs_this_month_count_and_last_months_do_not(frozen_clock, owner, h100):
    _limit(owner, "3.00")
    job = job_submit(owner=owner, document=ONE_HOUR)
    schedule_cycle()
    lease = Job.objects.get(pk=job.pk).leases.get()
    Agent(job, frozen_clock).run(run_s=30 * 60, output_s=60)  # 30 min on the meter, released a minute later
    check = spend_check(owner=owner, worst_case=Decimal("2.49"), now=lease.rented_at + timedelta(hours=1))
    assert check.spent == Decimal("1.245000") and check.committed == 0
    assert not check.fits and check.shortfall == Decimal("0.74")
    next_month = (lease.rented_at.replace(day=1) + timedelta(days=32)).replace(day=1)
    assert spend_check(owner=owner, worst_case=Decimal("2.49"), now=next_month).fits


def test_a_running_job_is_never_killed_by_the_limit(owner, api, h100):
    running = job_submit(owner=owner, document=ONE_HOUR)
    schedule_cycle()
    _limit(owner, "0.00")
    assert api.post("/api/v1/jobs/", ONE_HOUR, format="json").status_code == 400
    schedule_cycle()
    running.refresh_from_db()
    assert running.state == "rented" and running.cancel_requested_at is None
    assert running.leases.get().released_at is None


def test_the_form_shows_the_refusal_with_the_shortfall(owner, h100):
    _limit(owner, "1.00")
    web = Client()
    web.force_login(owner)
    from tests.web.test_new_job import form_data

    resp = web.post("/jobs/new/", form_data(gpus="1", gpu_model="H100", time_limit="1h", cpus="", memory_gb="",
                                            gpu_memory_gb=""))
    html = resp.content.decode()
    assert resp.status_code == 200 and "exceeds what is left of your monthly spend limit" in html
    assert "by $1.49" in html
    assert not Job.objects.exists()


def test_a_dry_run_prices_and_checks_and_creates_nothing(owner, api, h100):
    _limit(owner, "3.00")
    resp = api.post("/api/v1/jobs/?dry_run=1", spec(compute={"gpus": 2, "time_limit": "1h"}), format="json")
    assert resp.status_code == 200
    body = resp.json()
    assert body["dry_run"] is True and body["worst_case"] == "4.98"
    assert body["spend_limit"] == {**body["spend_limit"], "limit": "3.00", "left": "3.00", "fits": False,
                                   "shortfall": "1.98"}
    assert {row["gpu_model"]: row["worst_case"] for row in body["by_model"]}["H100-80GB"] == "4.98"
    assert not Job.objects.exists()


def test_a_dry_run_of_an_invalid_spec_answers_400_with_the_field(api, h100):
    resp = api.post("/api/v1/jobs/?dry_run=1", spec(compute={"gpus": 0, "time_limit": "1h"}), format="json")
    assert resp.status_code == 400 and "compute.gpus" in resp.json()


def test_a_multipart_dry_run_stores_no_file(owner, api, h100):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from apps.artifacts.models import Upload

    text = "name: t\nwork: {command: 'python train.py'}\ndata: [{source: 'upload:train.py'}]\n" \
           "compute: {gpus: 1, time_limit: 10m}\noutput: {paths: [out]}\n"
    resp = api.post("/api/v1/jobs/?dry_run=1", {"spec": text, "files": SimpleUploadedFile("train.py", b"print(1)")},
                    format="multipart")
    assert resp.status_code == 200 and resp.json()["worst_case"] == "0.42"
    assert not Upload.objects.exists() and not Job.objects.exists()


def test_the_limit_counts_the_accounts_own_month(owner, h100):
    """A month is the account's calendar month: for Pacific time, 2025-02-01 05:00Z is still January."""
    from datetime import UTC, datetime

    _limit(owner, "10.00", tz="America/Los_Angeles")
    check = spend_check(owner=owner, worst_case=Decimal(0), now=datetime(2025, 2, 1, 5, tzinfo=UTC))
    assert check.month_start == datetime(2025, 1, 1, 8, tzinfo=UTC)


def test_a_dry_run_without_a_limit_still_shows_what_was_spent_and_committed(owner, api, h100):
    job_submit(owner=owner, document=spec(compute={"gpus": 1, "time_limit": "1h"}))  # placed: committed
    resp = api.post("/api/v1/jobs/?dry_run=1", spec(compute={"gpus": 1, "time_limit": "1h"}), format="json")
    limit = resp.json()["spend_limit"]
    assert limit["limit"] is None and limit["fits"] is True
    assert Decimal(limit["committed"]) > 0


def test_the_quote_the_form_and_the_limit_price_a_worst_case_by_one_rule(owner, api, h100):
    """Issue 22: one worst-case rule (apps.metering.pricing.worst_case_price). H100-80GB (2.49/GPU-h) is
    in the pool, A100-40GB (1.29) is not: a job accepting both is priced at the H100's rate, and the
    per-model rows name only the model the pool holds."""
    compute = {"gpus": 2, "time_limit": "1h", "gpu_model": ["H100-80GB", "A100-40GB"]}
    worst = worst_case_price(compute_request(compute), rate_table(), tasks=3)
    assert (worst.amount, worst.rate_per_gpu_hour) == (Decimal("14.940000"), Decimal("2.49"))
    assert [(row["gpu_model"], amount) for row, amount in worst.by_model] == [("H100-80GB", Decimal("4.980000"))]

    quote = api.post("/api/v1/jobs/?dry_run=1", spec(compute=compute, array=3), format="json").json()
    assert (quote["worst_case"], quote["tasks"]) == ("14.94", 3)
    assert [(row["gpu_model"], row["worst_case"]) for row in quote["by_model"]] == [("H100-80GB", "4.98")]
    form = price_estimate(compute)
    assert [(row["gpu_model"], row["worst_case"]) for row in form.rows] == [("H100-80GB", Decimal("4.98"))]

    _limit(owner, "14.93")  # a cent short of the array's worst case
    resp = api.post("/api/v1/jobs/", spec(compute=compute, array=3), format="json")
    assert resp.status_code == 400 and "by $0.01" in resp.json()["compute"][0]
