"""A quote before submit (issue 29 item 4): ``dry_run=1`` answers, per GPU model the spec accepts
and the pool has, the likely start and "no later than" bound the scheduler would give the job now,
with the worst case at that model's rate, soonest first."""
from datetime import datetime, timedelta

import pytest

from apps.jobs.models import Job

from ..factories import spec

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_that_fits_both_models_is_quoted_on_each_the_free_one_first(api, pool):
    # pool: node-a 4 x H100-80GB, node-b 2 x A100-40GB; a 1-hour job takes every H100
    busy = api.post("/api/v1/jobs/", spec(compute={"gpus": 4, "gpu_model": ["H100-80GB"], "time_limit": "1h"}),
                    format="json")
    assert busy.status_code == 201 and Job.objects.get(pk=busy.json()["id"]).state == "rented"
    quote = api.post("/api/v1/jobs/?dry_run=1", spec(compute={"gpus": 2, "time_limit": "30m"}), format="json")
    assert quote.status_code == 200, quote.json()
    quotes = quote.json()["quotes"]
    assert [q["gpu_model"] for q in quotes] == ["A100-40GB", "H100-80GB"]
    now = datetime.fromisoformat(quotes[0]["estimated_start_at"])
    assert quotes[0]["latest_start_at"] == quotes[0]["estimated_start_at"]  # free now: starts at once
    h100 = datetime.fromisoformat(quotes[1]["estimated_start_at"])
    assert now < h100 <= now + timedelta(hours=1, seconds=5)  # when the 1-hour job's GPUs come back at the latest
    assert datetime.fromisoformat(quotes[1]["latest_start_at"]) >= h100
    by_model = {row["gpu_model"]: row["worst_case"] for row in quote.json()["by_model"]}
    assert {q["gpu_model"]: q["worst_case"] for q in quotes} == by_model
    assert Job.objects.count() == 1  # a quote stores nothing


def test_a_model_the_spec_names_is_the_only_one_quoted(api, pool):
    quote = api.post("/api/v1/jobs/?dry_run=1", spec(compute={"gpus": 1, "gpu_model": ["A100-40GB"],
                                                              "time_limit": "10m"}), format="json").json()
    assert [q["gpu_model"] for q in quote["quotes"]] == ["A100-40GB"]
