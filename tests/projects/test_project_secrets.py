"""A project's secrets and uploads (issue 25 item 2): owners set them, members see their names, the project's jobs
use them (a member's own secret of the same name wins), and no job of another project can name them."""
from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.agent_api.selectors import node_may_fetch_upload
from apps.artifacts.models import Upload
from apps.jobs.secret_refs import job_secrets_open
from apps.jobs.services.submit import job_submit
from apps.jobs.spec import SpecError
from apps.secrets.services import secret_set

from ..drive import placed
from ..factories import spec
from .conftest import client_of

URL = "/api/v1/projects/ml/secrets/"


def _set(user, name="HF_TOKEN", value="hf_team"):
    return client_of(user).post(URL, {"name": name, "value": value}, content_type="application/json")


def test_owners_set_members_list_names_and_strangers_get_404(team):
    assert _set(team.owner).status_code == 201
    assert _set(team.admin).status_code == 403
    assert _set(team.stranger).status_code == 404
    listed = client_of(team.viewer).get(URL).json()["results"]
    assert [s["name"] for s in listed] == ["HF_TOKEN"] and "hf_team" not in str(listed)
    assert client_of(team.owner).get("/api/v1/secrets/").json()["results"] == []  # not the owner's own
    assert client_of(team.member).delete(URL + "HF_TOKEN/").status_code == 403
    assert client_of(team.owner).delete(URL + "HF_TOKEN/").status_code == 204


def test_the_projects_jobs_use_its_secrets_and_no_other_job_can(team, pool):
    _set(team.owner)
    job = job_submit(owner=team.member, document=spec(project="ml", work={"command": "true", "secrets": ["HF_TOKEN"]}))
    assert job_secrets_open(owner_id=job.owner_id, spec=job.spec, project_id=job.project_id)[0] == {
        "HF_TOKEN": "hf_team"}
    secret_set(owner=team.member, name="HF_TOKEN", value="hf_mine", now=job.submitted_at)
    assert job_secrets_open(owner_id=job.owner_id, spec=job.spec, project_id=job.project_id)[0] == {
        "HF_TOKEN": "hf_mine"}
    with pytest.raises(SpecError) as e:  # the stranger's own project cannot reach ml's secret
        job_submit(owner=team.stranger, document=spec(project="other", work={"command": "true",
                                                                             "secrets": ["HF_TOKEN"]}))
    assert "work.secrets[0]" in e.value.errors
    with pytest.raises(SpecError):  # nor can the owner's personal jobs
        job_submit(owner=team.owner, document=spec(work={"command": "true", "secrets": ["HF_TOKEN"]}))


def test_a_projects_upload_serves_its_jobs_only(team, pool):
    made = client_of(team.admin).post("/api/v1/uploads/", {"file": SimpleUploadedFile("w.bin", b"weights"),
                                                           "project": "ml"})
    assert made.status_code == 201 and made.json()["project"] == "ml"
    data = [{"source": made.json()["source"], "target": "w.bin"}]
    job = job_submit(owner=team.member, document=spec(project="ml", data=data))  # a teammate's job may read it
    assert job.project == team.project
    job = placed(job)
    upload = Upload.objects.get(pk=made.json()["id"])
    node = job.leases.get().node
    assert node_may_fetch_upload(node, upload)  # the node holding the teammate's job is served it
    for user, project in ((team.admin, None), (team.stranger, "other")):  # no personal or other project's job
        with pytest.raises(SpecError) as e:
            job_submit(owner=user, document=spec(**({"project": project} if project else {}), data=data))
        assert "data[0].source" in e.value.errors
    refused = client_of(team.viewer).post("/api/v1/uploads/", {"file": SimpleUploadedFile("x", b"x"), "project": "ml"})
    assert refused.status_code == 400 and "viewer" in refused.json()["project"][0]
