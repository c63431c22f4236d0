"""The operator's admin pages answer for every model, with data in them."""
import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from apps.jobs.services import job_submit

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
