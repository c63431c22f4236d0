"""Rates with history, edited by operators in the admin; current rates on the pool page and the job form."""
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from apps.metering.models import GpuRate
from apps.metering.rates import rate_at

from ..factories import UserFactory, node_with_gpus

pytestmark = pytest.mark.django_db


def test_an_operator_adds_a_rate_in_the_admin_and_it_applies_from_its_date():
    staff = Client()
    staff.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    start = timezone.now() + timedelta(days=1)
    resp = staff.post("/admin/metering/gpurate/add/", {
        "gpu_model": "H100-80GB", "rate_per_gpu_hour": "1.99",
        "valid_from_0": start.strftime("%Y-%m-%d"), "valid_from_1": start.strftime("%H:%M:%S")})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert GpuRate.objects.filter(gpu_model="H100-80GB").count() == 2  # the history keeps the old rate
    assert rate_at("H100-80GB", timezone.now()) == Decimal("2.49")
    assert rate_at("H100-80GB", start + timedelta(seconds=1)) == Decimal("1.99")
    assert staff.get("/admin/metering/gpurate/").status_code == 200


def test_the_pool_page_and_the_job_form_show_current_rates():
    node_with_gpus("n1", count=2)
    user = Client()
    user.force_login(UserFactory(username="alice"))
    assert "$2.49" in user.get("/pool/").content.decode()
    html = user.get("/jobs/new/").content.decode()
    assert "$2.49" in html and "Most this job can cost" in html
