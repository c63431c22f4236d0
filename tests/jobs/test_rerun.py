"""``POST /api/v1/jobs/{id}/rerun/`` (issue 16 item 4): same spec, same uploads, owner only."""
import pytest
import yaml
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.artifacts.models import Upload
from apps.jobs.models import Job
from apps.jobs.rerun import job_rerun

from ..factories import spec

pytestmark = pytest.mark.django_db


def submit_with_upload(api) -> dict:
    doc = spec(data=[{"source": "upload:train.py", "target": "train.py"}])
    files = SimpleUploadedFile("train.py", b"print(1)")
    resp = api.post("/api/v1/jobs/", {"spec": yaml.safe_dump(doc), "files": files}, format="multipart")
    assert resp.status_code == 201, resp.json()
    return resp.json()


def test_it_runs_a_job_again_with_the_same_spec_and_uploads(api, pool):
    first = submit_with_upload(api)
    resp = api.post(f"/api/v1/jobs/{first['id']}/rerun/")
    assert resp.status_code == 201, resp.json()
    again = resp.json()
    assert again["id"] != first["id"] and again["rerun_of"] == first["id"]
    assert again["spec"] == first["spec"]  # the same upload:<id>: the same file is staged
    assert again["name"] == first["name"] and again["attempts"] == 1
    assert Upload.objects.count() == 1  # nothing was copied
    details = [e["detail"] for e in api.get(f"/api/v1/jobs/{again['id']}/events/").json()]
    assert f"re-run of job {first['id']}" in details


def test_a_stranger_gets_404_and_no_job(api, stranger_api, pool):
    first = submit_with_upload(api)
    resp = stranger_api.post(f"/api/v1/jobs/{first['id']}/rerun/")
    assert resp.status_code == 404
    assert Job.objects.count() == 1


def test_it_names_the_input_whose_upload_is_no_longer_kept(api, pool):
    first = submit_with_upload(api)
    Upload.objects.all().delete()
    resp = api.post(f"/api/v1/jobs/{first['id']}/rerun/")
    assert resp.status_code == 400
    message = resp.json()["data[0].source"][0]
    assert "train.py" in message and "upload:" not in message
    assert Job.objects.count() == 1


def test_a_task_of_an_array_is_run_again_as_one_job(api, pool):
    resp = api.post("/api/v1/jobs/", spec(array=3), format="json")
    assert resp.status_code == 201, resp.json()
    again = api.post(f"/api/v1/jobs/{resp.json()['job_ids'][1]}/rerun/").json()
    assert again["array_id"] is None and again["spec"].get("array") is None


def test_the_service_refuses_a_job_of_someone_else(owner, stranger, api, pool):
    job = Job.objects.get(pk=submit_with_upload(api)["id"])
    with pytest.raises(PermissionDenied):
        job_rerun(job=job, by=stranger)


def test_it_is_in_the_openapi_schema(api):
    schema = yaml.safe_load(api.get("/api/schema/").content)
    assert "201" in schema["paths"]["/api/v1/jobs/{id}/rerun/"]["post"]["responses"]
