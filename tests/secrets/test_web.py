"""The pages (issue 23): Settings, Secrets sets, replaces and deletes by name and never shows a value;
the New job form picks secrets by name, the owner's own only."""
import re

import pytest
from django.utils import timezone

from apps.jobs.models import Job
from apps.secrets.services import secret_set, secret_values

from ..web.test_new_job import form_data, new_job_id

pytestmark = pytest.mark.django_db

HF = "hf_webSecretValue_0042"


@pytest.fixture
def web(client, owner):
    client.force_login(owner)
    return client


def test_the_secrets_page_sets_replaces_and_deletes_without_showing_a_value(web, owner):
    resp = web.post("/account/secrets/", {"name": "HF_TOKEN", "value": HF}, follow=True)
    html = resp.content.decode()
    assert "Secret HF_TOKEN saved." in html and "<code>HF_TOKEN</code>" in html and HF not in html
    web.post("/account/secrets/", {"name": "HF_TOKEN", "value": HF + "-new"})
    assert secret_values(owner_id=owner.pk, names=["HF_TOKEN"]) == {"HF_TOKEN": HF + "-new"}
    resp = web.post("/account/secrets/HF_TOKEN/delete/", follow=True)
    assert "Secret HF_TOKEN deleted." in resp.content.decode()
    assert secret_values(owner_id=owner.pk, names=["HF_TOKEN"]) == {}


def test_a_bad_name_is_shown_on_its_field_and_the_value_is_not_sent_back(web):
    resp = web.post("/account/secrets/", {"name": "hf token", "value": HF})
    html = resp.content.decode()
    assert resp.status_code == 200 and "[A-Z_][A-Z0-9_]*" in html and HF not in html


def test_the_new_job_form_picks_my_secrets_by_name(web, owner, stranger, pool, django_capture_on_commit_callbacks):
    secret_set(owner=owner, name="HF_TOKEN", value=HF, now=timezone.now())
    secret_set(owner=owner, name="WANDB_API_KEY", value=HF + "w", now=timezone.now())
    secret_set(owner=stranger, name="STRANGERS_ONE", value=HF + "s", now=timezone.now())
    html = web.get("/jobs/new/").content.decode()
    assert re.search(r'<input[^>]*name="secrets"[^>]*value="HF_TOKEN"', html)
    assert "WANDB_API_KEY" in html and "STRANGERS_ONE" not in html and HF not in html
    data = form_data(gpu_model="H100", secrets=["HF_TOKEN"], **{"data-0-source": "s3://bucket/x.bin",
                                                                "data-0-credentials": "NO_SUCH", "data-0-extract": ""})
    resp = web.post("/jobs/new/", data)
    assert resp.status_code == 200 and "You have no secret named NO_SUCH" in resp.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        resp = web.post("/jobs/new/", form_data(gpu_model="H100", secrets=["HF_TOKEN"]))
    job = Job.objects.get(pk=new_job_id(resp))
    assert job.spec["work"]["secrets"] == ["HF_TOKEN"]


def test_a_strangers_secret_name_cannot_be_picked(web, stranger, pool):
    secret_set(owner=stranger, name="STRANGERS_ONE", value=HF, now=timezone.now())
    resp = web.post("/jobs/new/", form_data(gpu_model="H100", secrets=["STRANGERS_ONE"]))
    assert resp.status_code == 200 and not Job.objects.exists()
