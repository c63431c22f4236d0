"""A user's own budget (issue 16): their limit only lowers the operator's, the submit check uses the
smaller, and the alert at a threshold comes once per account and month (banner, e-mail if on)."""
from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.test import Client

from apps.core.models import AccountProfile
from apps.jobs.models import Job
from apps.metering.budget import budget_alerts_scan, profile_set_budget
from apps.metering.models import BudgetAlert
from apps.notices.models import BudgetNoticeSent
from apps.notices.services import budget_email_send, preference_set

from ..drive import Agent, rented_job
from ..factories import node_with_gpus, spec

pytestmark = pytest.mark.django_db

# 1 H100-80GB at 2.49/GPU-h: 30 min cost 1.245; a 4 h time limit's worst case is 9.96.
FOUR_HOURS = {"gpus": 1, "time_limit": "4h"}
BANNER = "has passed"


@pytest.fixture
def h100(db):
    return node_with_gpus("n1", count=4)


@pytest.fixture
def mailed(owner, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    owner.email = "owner@example.com"
    owner.save()
    preference_set(user=owner, email_on_release=True)
    return owner


def _operator_limit(owner, amount: str | None) -> AccountProfile:
    profile, _ = AccountProfile.objects.update_or_create(
        owner=owner, defaults={"monthly_spend_limit": None if amount is None else Decimal(amount)})
    return profile


def _page(owner) -> str:
    client = Client()
    client.force_login(owner)
    resp = client.get("/usage/")
    assert resp.status_code == 200
    return resp.content.decode()


def test_the_own_limit_above_the_operators_is_refused_naming_the_field_and_keeping_the_input(owner):
    _operator_limit(owner, "10.00")
    client = Client()
    client.force_login(owner)
    resp = client.post("/account/settings/", {"form": "budget", "user_spend_limit": "12.50",
                                              "alert_threshold_percent": "80"})
    assert resp.status_code == 200
    form = resp.context["budget_form"]
    assert list(form.errors) == ["user_spend_limit"]
    assert "at most the operator's limit, $10.00" in form.errors["user_spend_limit"][0]
    body = resp.content.decode()
    assert 'value="12.50"' in body and 'value="80"' in body  # nothing typed is lost
    assert AccountProfile.objects.get(owner=owner).user_spend_limit is None

    resp = client.post("/account/settings/", {"form": "budget", "user_spend_limit": "lots",
                                              "alert_threshold_percent": "0"})
    assert resp.status_code == 200
    assert set(resp.context["budget_form"].errors) == {"user_spend_limit", "alert_threshold_percent"}

    resp = client.post("/account/settings/", {"form": "budget", "user_spend_limit": "6",
                                              "alert_threshold_percent": "80"})
    assert resp.status_code == 302
    profile = AccountProfile.objects.get(owner=owner)
    assert (profile.user_spend_limit, profile.alert_threshold_percent) == (Decimal("6.00"), 80)
    assert profile.effective_spend_limit == Decimal("6.00")
    assert "$6.00" in client.get("/account/settings/").content.decode()


def test_the_service_names_each_bad_field(owner):
    _operator_limit(owner, "10.00")
    with pytest.raises(ValidationError) as refused:
        profile_set_budget(owner=owner, user_spend_limit=Decimal("10.01"), alert_threshold_percent=101)
    assert set(refused.value.message_dict) == {"user_spend_limit", "alert_threshold_percent"}
    # Without an operator's limit the user's own is the limit.
    _operator_limit(owner, None)
    profile = profile_set_budget(owner=owner, user_spend_limit=Decimal("500"), alert_threshold_percent=None)
    assert profile.effective_spend_limit == Decimal("500")


def test_the_submit_check_uses_the_smaller_limit(owner, api, h100):
    _operator_limit(owner, "100.00")
    profile_set_budget(owner=owner, user_spend_limit=Decimal("3.00"), alert_threshold_percent=None)
    resp = api.post("/api/v1/jobs/", spec(compute={"gpus": 2, "time_limit": "1h"}), format="json")
    assert resp.status_code == 400
    assert "$3.00 of $3.00" in resp.json()["compute"][0]  # 4.98 worst case against the user's 3.00
    assert api.post("/api/v1/jobs/", spec(compute={"gpus": 1, "time_limit": "1h"}), format="json").status_code == 201
    # A user's own limit alone (no operator's) is enforced too.
    _operator_limit(owner, None)
    assert api.post("/api/v1/jobs/", spec(compute={"gpus": 1, "time_limit": "1h"}), format="json").status_code == 400


def test_the_alert_comes_once_a_month_with_one_email_and_the_banner_goes_when_raised(
        frozen_clock, mailed, h100, django_capture_on_commit_callbacks):
    owner = mailed
    _operator_limit(owner, "10.00")
    profile_set_budget(owner=owner, user_spend_limit=None, alert_threshold_percent=10)  # at $1.00
    agent = Agent(rented_job(owner, compute=FOUR_HOURS), frozen_clock)
    agent.start()
    frozen_clock.advance(minutes=20)  # 0.83 so far: not yet
    assert budget_alerts_scan() == 0 and BANNER not in _page(owner)
    frozen_clock.advance(minutes=10)  # 1.245 accruing, above 1.00: the run is still going
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_scan() == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_scan() == 0  # once
    alert = BudgetAlert.objects.get(owner=owner)
    assert (alert.threshold_percent, alert.spent) == (10, Decimal("1.245000"))
    assert len(mail.outbox) == 1 and "passed 10%" in mail.outbox[0].subject
    assert "$1.25" in mail.outbox[0].body and mail.outbox[0].to == ["owner@example.com"]
    assert "has passed 10% of your monthly limit of $10.00" in _page(owner)

    profile_set_budget(owner=owner, user_spend_limit=None, alert_threshold_percent=50)  # at $5.00
    assert BANNER not in _page(owner)
    frozen_clock.advance(hours=2)  # 6.225: past the new threshold
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_scan() == 1  # the banner is back ...
    assert "has passed 50%" in _page(owner)
    assert len(mail.outbox) == 1  # ... but the e-mail is once a month
    assert budget_email_send(alert_id=alert.pk) is False  # a second delivery sends nothing
    assert BudgetNoticeSent.objects.filter(owner=owner).count() == 1


def test_a_new_month_clears_the_banner_and_may_alert_again(frozen_clock, mailed, h100,
                                                           django_capture_on_commit_callbacks):
    owner = mailed
    _operator_limit(owner, "10.00")
    profile_set_budget(owner=owner, user_spend_limit=None, alert_threshold_percent=10)
    Agent(rented_job(owner, compute=FOUR_HOURS), frozen_clock).run(run_s=30 * 60)
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_scan() == 1
    assert BANNER in _page(owner)

    frozen_clock.set(datetime(2025, 7, 1, 9, 0, tzinfo=UTC))  # July: June's spend no longer counts
    assert BANNER not in _page(owner)
    assert budget_alerts_scan() == 0
    job = rented_job(owner, compute=FOUR_HOURS)
    Agent(job, frozen_clock).run(run_s=30 * 60)
    assert Job.objects.get(pk=job.pk).state == "released"
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_scan() == 1
    assert BANNER in _page(owner)
    assert [a.month.month for a in BudgetAlert.objects.order_by("month")] == [6, 7]
    assert len(mail.outbox) == 2  # one a month


def test_no_email_when_email_notices_are_off(frozen_clock, owner, h100, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    owner.email = "owner@example.com"
    owner.save()
    _operator_limit(owner, "10.00")
    profile_set_budget(owner=owner, user_spend_limit=Decimal("4.00"), alert_threshold_percent=25)  # at $1.00
    Agent(rented_job(owner, compute={"gpus": 1, "time_limit": "1h"}), frozen_clock).run(run_s=30 * 60)
    with django_capture_on_commit_callbacks(execute=True):
        assert budget_alerts_scan() == 1
    assert "has passed 25% of your monthly limit of $4.00" in _page(owner)
    assert mail.outbox == [] and not BudgetNoticeSent.objects.exists()


def test_no_alert_without_a_threshold(frozen_clock, owner, h100):
    _operator_limit(owner, "1.00")
    Agent(rented_job(owner, compute={"gpus": 1, "time_limit": "20m"}), frozen_clock).run(run_s=20 * 60)
    assert budget_alerts_scan() == 0 and BANNER not in _page(owner)


def test_the_api_reads_and_patches_the_budget_naming_bad_fields(owner, api):
    _operator_limit(owner, "10.00")
    assert api.get("/api/v1/account/").json() == {
        "time_zone": "UTC", "monthly_spend_limit": "10.00", "user_spend_limit": None,
        "effective_spend_limit": "10.00", "alert_threshold_percent": None}
    resp = api.patch("/api/v1/account/", {"user_spend_limit": "11"}, format="json")
    assert resp.status_code == 400 and list(resp.json()) == ["user_spend_limit"]
    resp = api.patch("/api/v1/account/", {"alert_threshold_percent": 0}, format="json")
    assert resp.status_code == 400 and list(resp.json()) == ["alert_threshold_percent"]
    resp = api.patch("/api/v1/account/", {"user_spend_limit": "4.5", "alert_threshold_percent": 80}, format="json")
    assert resp.status_code == 200 and resp.json()["effective_spend_limit"] == "4.50"
    resp = api.patch("/api/v1/account/", {"alert_threshold_percent": None}, format="json")
    assert resp.json()["user_spend_limit"] == "4.50" and resp.json()["alert_threshold_percent"] is None
