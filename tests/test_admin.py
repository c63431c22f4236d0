"""The operator's admin pages answer for every model, with data in them."""
import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from apps.jobs.services.submit import job_submit

from .factories import UserFactory, spec

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_admin_changelist_and_change_page_answers(pool):
    boss = UserFactory(username="boss", is_staff=True, is_superuser=True)
    job_submit(owner=boss, document=spec())
    client = Client()
    client.force_login(boss)
    for model in admin.site._registry:
        meta = model._meta
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        assert client.get(url).status_code == 200, url
        obj = model.objects.first()
        if obj is not None:
            change = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
            assert client.get(change).status_code == 200, change


def test_it_keeps_ledgers_read_only_and_cancels_through_the_service(pool):
    """Issue 12 item 10: jobs, leases, events, bundles cannot be added, edited or deleted by hand;
    an operator cancels through the action, which calls ``job_cancel``."""
    from apps.jobs.models import Job, JobEvent
    from apps.metering.models import Lease

    boss = UserFactory(username="boss", is_staff=True, is_superuser=True)
    job = job_submit(owner=boss, document=spec())
    client = Client()
    client.force_login(boss)
    for model in (Job, JobEvent, Lease):
        meta = model._meta
        add = reverse(f"admin:{meta.app_label}_{meta.model_name}_add")
        assert client.get(add).status_code == 403, add
    change = reverse("admin:jobs_job_change", args=[job.pk])
    page = client.get(change)
    assert page.status_code == 200 and b'name="_save"' not in page.content
    client.post(change, {"name": "forged", "gpus_per_node": 8})
    job.refresh_from_db()
    assert job.name != "forged" and job.gpus_per_node != 8
    delete = reverse("admin:jobs_job_delete", args=[job.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    client.post(reverse("admin:jobs_job_changelist"), {"action": "cancel_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.cancel_requested_at is not None  # rented at submit (free GPUs): the agent is told to stop
