""""Run again" and "Edit and run" on the job page (issue 16, item 4): owner only, CSRF-protected
POST for the re-run, the spec prefilled for an edit, expired uploads said in words."""
from __future__ import annotations

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from apps.artifacts.models import Upload
from apps.jobs.models import Job

from ..factories import spec
from .conftest import signed_in


def _submit(user, *, upload: bool = True) -> Job:
    api = APIClient()
    api.force_authenticate(user)
    if upload:
        doc = spec(name="train-it", data=[{"source": "upload:train.py", "target": "code/train.py"}])
        resp = api.post("/api/v1/jobs/", {"spec": yaml.safe_dump(doc), "files": SimpleUploadedFile(
            "train.py", b"print(1)")}, format="multipart")
    else:
        resp = api.post("/api/v1/jobs/", spec(name="plain"), format="json")
    assert resp.status_code == 201, resp.json()
    return Job.objects.get(pk=resp.json()["id"])


def test_the_owner_sees_both_buttons_and_run_again_is_a_post_form(web, user, node):
    job = _submit(user)
    html = web.get(f"/jobs/{job.pk}/").content.decode()
    assert f'action="/jobs/{job.pk}/rerun/"' in html and "Run again" in html
    assert f'href="/jobs/new/?from={job.pk}"' in html and "Edit and run" in html
    form = html[html.index(f'action="/jobs/{job.pk}/rerun/"') - 40:]
    assert form.startswith('<form method="post"') or 'method="post"' in form[:80]
    assert "csrfmiddlewaretoken" in form[:400]


def test_run_again_lands_on_the_new_job(web, user, node):
    job = _submit(user)
    resp = web.post(f"/jobs/{job.pk}/rerun/")
    new = Job.objects.exclude(pk=job.pk).get()
    assert resp.status_code == 302 and resp["Location"] == f"/jobs/{new.pk}/"
    assert new.spec == job.spec and new.owner == user
    assert f"a re-run of job {job.pk}" in web.get(resp["Location"]).content.decode()


def test_run_again_is_not_a_get_and_needs_the_csrf_token(user, node):
    job = _submit(user)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert browser.get(f"/jobs/{job.pk}/rerun/").status_code == 405
    assert browser.post(f"/jobs/{job.pk}/rerun/").status_code == 403
    assert Job.objects.count() == 1


def test_a_stranger_gets_no_job_page_no_rerun_and_no_prefill(user, stranger_user, node):
    job = _submit(user)
    other = signed_in(stranger_user)
    assert other.get(f"/jobs/{job.pk}/").status_code == 404
    assert other.post(f"/jobs/{job.pk}/rerun/").status_code == 404
    assert other.get(f"/jobs/new/?from={job.pk}").status_code == 404
    assert other.get("/jobs/new/?from=nope").status_code == 404
    assert Job.objects.count() == 1


def test_run_again_with_an_upload_gone_says_which_and_stays(web, user, node):
    job = _submit(user)
    Upload.objects.all().delete()
    resp = web.post(f"/jobs/{job.pk}/rerun/", follow=True)
    html = resp.content.decode()
    assert resp.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    assert "code/train.py" in html and "no longer kept" in html
    assert Job.objects.count() == 1


def test_edit_and_run_prefills_the_spec_with_the_kept_file_by_name(web, user, node):
    job = _submit(user)
    upload = Upload.objects.get()
    html = web.get(f"/jobs/new/?from={job.pk}").content.decode()
    assert "name: train-it" in html and "source: upload:train.py" in html
    assert str(upload.pk) in html  # as the hidden "kept" file only
    assert f'name="kept" value="{upload.pk}"' in html
    assert html.count(str(upload.pk)) == 1
    # submitting the prefilled form as it is makes a job with the same file
    text = yaml.safe_dump(yaml.safe_load(html.split('name="spec_text"', 1)[1].split(">", 1)[1]
                                         .split("</textarea>", 1)[0].replace("&#x27;", "'")
                                         .replace("&quot;", '"')))
    resp = web.post("/jobs/new/", {"spec_text": text, "kept": [str(upload.pk)],
                                   "data-TOTAL_FORMS": "0", "data-INITIAL_FORMS": "0"})
    assert resp.status_code == 302, resp.content.decode()[:2000]
    new = Job.objects.exclude(pk=job.pk).get()
    assert new.spec["data"] == job.spec["data"]


@pytest.mark.parametrize("upload", [True])
def test_edit_and_run_says_when_an_upload_is_no_longer_kept(web, user, node, upload):
    job = _submit(user, upload=upload)
    Upload.objects.all().delete()
    html = web.get(f"/jobs/new/?from={job.pk}").content.decode()
    assert "no longer kept" in html and "code/train.py" in html
