"""A project's monthly limit (issue 25 item 3): the lower of the operator's limit and the owner's budget,
checked at submit for the project's worst case, every member's queued and running jobs counted."""
from __future__ import annotations

from decimal import Decimal

import pytest

from apps.jobs.services.submit import job_submit
from apps.jobs.spec import SpecError
from apps.metering.limits import project_spend_check

from ..factories import spec

ONE_HOUR_H100 = {"gpus": 1, "time_limit": "1h", "gpu_model": ["H100-80GB"]}


def test_a_teammates_queued_job_counts_against_the_projects_limit(team, pool):
    one = project_spend_check(project=team.project, worst_case=Decimal(0)).worst_case
    job = job_submit(owner=team.member, document=spec(project="ml", compute=ONE_HOUR_H100))
    worst = project_spend_check(project=team.project, worst_case=Decimal(0))
    assert worst.limit is None and one == 0
    team.project.spend_limit = Decimal("100.00")
    team.project.budget = None
    team.project.save()
    committed = project_spend_check(project=team.project, worst_case=Decimal(0)).committed
    assert committed > 0
    # The limit leaves room for the first job and less than another such job.
    team.project.budget = (committed * Decimal("1.5")).quantize(Decimal("0.01"))
    team.project.save()
    with pytest.raises(SpecError) as e:
        job_submit(owner=team.admin, document=spec(project="ml", compute=ONE_HOUR_H100))
    assert "project ml's monthly spend limit" in e.value.errors["compute"][0]
    assert "ask its owner (budget) or an operator (limit)" in e.value.errors["compute"][0]
    # The admin's personal project has no limit: the same job goes there.
    assert job_submit(owner=team.admin, document=spec(compute=ONE_HOUR_H100)).pk > job.pk


def test_usage_by_project_adds_up_every_members_leases_and_strangers_get_404(team, pool):
    from ..drive import finished_job
    from .conftest import client_of

    finished_job(team.member, project="ml")
    finished_job(team.admin, project="ml")
    finished_job(team.admin)  # personal: not the project's
    body = client_of(team.viewer).get("/api/v1/usage/?project=ml").json()
    assert sorted(r["owner"] for r in body["leases"]) == ["adam", "mia"]
    assert {r["project"] for r in body["leases"]} == {"ml"}
    assert sorted(m["owner"] for m in body["by_member"]) == ["adam", "mia"]
    assert len(client_of(team.admin).get("/api/v1/usage/").json()["leases"]) == 2  # one's own, every project
    assert client_of(team.stranger).get("/api/v1/usage/?project=ml").status_code == 404
    page = client_of(team.viewer).get("/usage/?project=ml")
    assert page.status_code == 200 and "By member" in page.content.decode()
    assert client_of(team.stranger).get("/usage/?project=ml").status_code == 404
    csv = client_of(team.owner).get("/usage/csv/?project=ml").content.decode().splitlines()
    assert csv[0].endswith(",project,owner") and len(csv) == 3


def test_the_operator_report_ranks_projects(team, pool):
    from ..drive import finished_job
    from ..factories import UserFactory
    from .conftest import client_of

    finished_job(team.member, project="ml")
    page = client_of(UserFactory(username="op", is_staff=True)).get("/usage/report/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Top projects" in html and "<td>ml</td>" in html


def test_a_projects_alert_shows_and_mails_its_owners_and_admins_once_spend_passes_the_threshold(
        team, pool, frozen_clock, settings, mailoutbox, django_capture_on_commit_callbacks):
    from apps.metering.models import ProjectBudgetAlert
    from apps.metering.project_budget import project_alerts_scan
    from apps.notices.services import preference_set, project_budget_email_send

    from ..drive import Agent, rented_job
    from .conftest import client_of

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    for user in (team.owner, team.admin, team.member, team.viewer):  # every one wants e-mail ...
        user.email = f"{user.username}@example.com"
        user.save()
        preference_set(user=user, email_on_release=True)
    team.project.spend_limit, team.project.alert_percent = Decimal("300.00"), 20
    team.project.save()
    agent = Agent(rented_job(team.member, project="ml", compute={"gpus": 4, "time_limit": "20h"}), frozen_clock)
    agent.start()
    assert project_alerts_scan() == 0
    frozen_clock.advance(hours=8)  # 4 GPUs x 8 h at the default H100 rate: about $80, past 20 % of $300
    with django_capture_on_commit_callbacks(execute=True):
        assert project_alerts_scan() == 1 and project_alerts_scan() == 0  # once a month
    banner = "Project ml&#x27;s spend this month"  # the page escapes the apostrophe
    assert banner in client_of(team.owner).get("/projects/").content.decode()
    assert banner in client_of(team.admin).get("/projects/").content.decode()
    assert banner not in client_of(team.member).get("/projects/").content.decode()
    # ... but only the owner and the admin are mailed, one mail each, naming the project and its page.
    assert sorted(m.to[0] for m in mailoutbox) == ["adam@example.com", "olga@example.com"]
    assert all(len(m.to) == 1 and "project ml's spend passed 20%" in m.subject for m in mailoutbox)
    assert "/projects/ml/" in mailoutbox[0].body and "$300.00" in mailoutbox[0].body
    assert project_budget_email_send(alert_id=ProjectBudgetAlert.objects.get().pk) == 0  # a second delivery
    assert len(mailoutbox) == 2


def test_a_dry_run_quotes_against_the_projects_limit_when_it_binds(team, pool):
    from .conftest import client_of

    team.project.spend_limit = Decimal("1.00")
    team.project.save()
    body = client_of(team.member).post("/api/v1/jobs/?dry_run=1", spec(project="ml", compute=ONE_HOUR_H100),
                                       content_type="application/json").json()
    assert body["spend_limit"]["project"] == "ml" and body["spend_limit"]["fits"] is False
    assert body["spend_limit"]["limit"] == "1.00"
    personal = client_of(team.member).post("/api/v1/jobs/?dry_run=1", spec(compute=ONE_HOUR_H100),
                                           content_type="application/json").json()
    assert personal["spend_limit"]["project"] is None and personal["spend_limit"]["fits"] is True
