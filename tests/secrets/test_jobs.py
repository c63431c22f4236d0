"""Secrets named by a spec (issue 23): checked at submit, sent to the node holding the attempt only,
a deleted one fails the start unbilled, and URL credentials shown as *** wherever a spec is shown."""
import json

import pytest
from django.utils import timezone

from apps.agent_api.selectors import agent_work_for
from apps.jobs.models import Job
from apps.metering.models import Lease
from apps.secrets.services import secret_delete, secret_set

from ..drive import Agent, placed, queued_job
from ..factories import spec

pytestmark = pytest.mark.django_db

HF = "hf_abcdefSECRETvalue42"
S3_CREDS = json.dumps({"key": "AKIAEXAMPLEKEY", "secret": "s3-Secret-Value-987", "endpoint_url": "http://s3.local"})


def _secret(owner, name: str, value: str) -> None:
    secret_set(owner=owner, name=name, value=value, now=timezone.now())


def _work(**work):
    return {"command": "echo $HF_TOKEN", "kind": "other", **work}


def test_an_unknown_secret_is_a_400_naming_work_secrets_i(api, owner, pool):
    _secret(owner, "HF_TOKEN", HF)
    resp = api.post("/api/v1/jobs/", spec(work=_work(secrets=["HF_TOKEN", "NOPE"])), format="json")
    assert resp.status_code == 400 and list(resp.json()) == ["work.secrets[1]"], resp.json()


def test_a_strangers_secret_is_unknown_to_me(api, stranger, pool):
    _secret(stranger, "HF_TOKEN", HF)
    resp = api.post("/api/v1/jobs/", spec(work=_work(secrets=["HF_TOKEN"])), format="json")
    assert resp.status_code == 400 and "work.secrets[0]" in resp.json()
    assert HF not in resp.content.decode()


@pytest.mark.parametrize("secrets,field", [
    (["hf_token"], "work.secrets[0]"),
    (["HF_TOKEN", "HF_TOKEN"], "work.secrets[1]"),
    ("HF_TOKEN", "work.secrets"),
])
def test_malformed_secret_lists_are_400s(api, owner, pool, secrets, field):
    _secret(owner, "HF_TOKEN", HF)
    resp = api.post("/api/v1/jobs/", spec(work=_work(secrets=secrets)), format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()


def test_a_secret_also_in_env_is_a_400(api, owner, pool):
    _secret(owner, "HF_TOKEN", HF)
    resp = api.post("/api/v1/jobs/", spec(work=_work(secrets=["HF_TOKEN"], env={"HF_TOKEN": "x"})), format="json")
    assert resp.status_code == 400 and "work.secrets[0]" in resp.json()


@pytest.mark.parametrize("value,source", [
    ("not json", "s3://bucket/a.bin"),
    ('["key"]', "s3://bucket/a.bin"),
    ('{"key": "k"}', "s3://bucket/a.bin"),
    ('{"key": "k", "secret": "s", "anon": false}', "s3://bucket/a.bin"),
    ('{"key": "k", "secret": "s"}', "gs://bucket/a.bin"),
    (S3_CREDS, "https://example.com/a.bin"),
])
def test_malformed_credentials_are_a_400_naming_data_i_credentials(api, owner, pool, value, source):
    _secret(owner, "BUCKET", value)
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": source, "credentials": "BUCKET"}]), format="json")
    assert resp.status_code == 400 and list(resp.json()) == ["data[0].credentials"], resp.json()
    assert "s3-Secret-Value-987" not in resp.content.decode()


def test_unknown_credentials_are_a_400(api, pool):
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": "s3://b/a.bin", "credentials": "NONE"}]), format="json")
    assert resp.status_code == 400 and "data[0].credentials" in resp.json()


def test_the_assignment_carries_the_values_to_the_holding_node_only(api, owner, pool):
    node_a, node_b = pool
    _secret(owner, "HF_TOKEN", HF)
    _secret(owner, "BUCKET", S3_CREDS)
    resp = api.post("/api/v1/jobs/", spec(work=_work(secrets=["HF_TOKEN"]),
                                          data=[{"source": "s3://b/a.bin", "credentials": "BUCKET"}]), format="json")
    assert resp.status_code == 201, resp.json()
    job = placed(Job.objects.get(pk=resp.json()["id"]))
    holder = Lease.objects.get(job=job).node
    other = node_b if holder == node_a else node_a
    [assignment] = agent_work_for(holder)["assignments"]
    assert assignment["secrets"] == {"HF_TOKEN": HF}
    assert assignment["credentials"] == {"BUCKET": S3_CREDS}
    assert assignment["spec"]["work"]["secrets"] == ["HF_TOKEN"]
    assert HF not in json.dumps(assignment["spec"])
    elsewhere = json.dumps(agent_work_for(other))
    assert HF not in elsewhere and "s3-Secret-Value-987" not in elsewhere
    # the job as its owner reads it: names, never values
    shown = api.get(f"/api/v1/jobs/{job.pk}/").content.decode()
    assert "HF_TOKEN" in shown and HF not in shown and "s3-Secret-Value-987" not in shown
    events = api.get(f"/api/v1/jobs/{job.pk}/events/").content.decode()
    assert HF not in events


def test_a_secret_deleted_before_the_start_fails_the_job_unbilled(owner, pool, frozen_clock):
    _secret(owner, "HF_TOKEN", HF)
    job = placed(queued_job(owner, work=_work(secrets=["HF_TOKEN"])))
    secret_delete(owner=owner, name="HF_TOKEN")
    holder = Lease.objects.get(job=job).node
    [assignment] = agent_work_for(holder)["assignments"]
    assert "secrets" not in assignment
    assert assignment["start_refused"] == "secret HF_TOKEN was deleted before the job started"
    frozen_clock.advance(5)  # what the agent does with it (e31_agent.job.run): start_failed at once, 0 s measured
    agent = Agent(job, frozen_clock)
    agent.say("finished", exited={"exit_code": None, "reason": "start_failed", "elapsed_s": 0.0,
                                  "message": assignment["start_refused"]})
    job.refresh_from_db()
    assert (job.state, job.outcome, job.end_reason) == ("released", "failed", "start_failed")
    assert "HF_TOKEN was deleted" in job.events.order_by("-seq").values_list("detail", flat=True)[1]
    lease = Lease.objects.get(job=job)
    assert lease.billed_seconds == 0 and lease.cost == 0


def test_rerun_and_edit_and_run_carry_names_only(client, api, owner, pool):
    _secret(owner, "HF_TOKEN", HF)
    resp = api.post("/api/v1/jobs/", spec(work=_work(secrets=["HF_TOKEN"])), format="json")
    job_id = resp.json()["id"]
    again = api.post(f"/api/v1/jobs/{job_id}/rerun/")
    assert again.status_code == 201 and again.json()["spec"]["work"]["secrets"] == ["HF_TOKEN"]
    client.force_login(owner)
    page = client.get(f"/jobs/new/?from={job_id}").content.decode()
    assert "HF_TOKEN" in page and HF not in page


URL_USER = "https://alice:pa55w0rd-XYZ@data.example.com/set.tar"
URL_SIGNED = ("https://bucket.s3.amazonaws.com/a.bin?X-Amz-Algorithm=AWS4-HMAC-SHA256"
              "&X-Amz-Credential=AKIAQUERYCRED%2F20250101&X-Amz-Signature=deadbeefSIG0123&X-Amz-Expires=300")


def test_url_credentials_are_shown_as_stars_everywhere(client, api, owner, pool):
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": URL_USER, "target": "a/"},
                                                {"source": URL_SIGNED, "target": "b/"}]), format="json")
    assert resp.status_code == 201, resp.json()
    job = Job.objects.get(pk=resp.json()["id"])
    assert job.spec["data"][0]["source"] == URL_USER  # stored as given: the agent needs it to read
    hidden = ("pa55w0rd-XYZ", "deadbeefSIG0123", "AKIAQUERYCRED")
    shown = api.get(f"/api/v1/jobs/{job.pk}/").json()["spec"]["data"]
    assert shown[0]["source"] == "https://***@data.example.com/set.tar"
    assert "X-Amz-Signature=***" in shown[1]["source"] and "X-Amz-Expires=300" in shown[1]["source"]
    client.force_login(owner)
    for page in (f"/jobs/{job.pk}/", f"/jobs/new/?from={job.pk}"):
        html = client.get(page).content.decode()
        assert not [h for h in hidden if h in html], page
    # an agent's error quoting the URL is stored redacted (events, status)
    placed(job)
    Agent(job).say("finished", exited={"exit_code": None, "reason": "staging_failed",
                                       "message": f"data[0]: {URL_USER}: HTTP 403"})
    details = " ".join(job.events.values_list("detail", flat=True))
    assert "https://***@data.example.com" in details and "pa55w0rd-XYZ" not in details


def test_a_spec_error_quoting_a_url_hides_its_credentials(api, pool):
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": "https://bob:hunter2secret@10.0.0.1/x"}]), format="json")
    assert resp.status_code == 400
    assert "hunter2secret" not in resp.content.decode()


def test_the_admin_shows_names_and_stars(client, owner, pool, django_user_model):
    _secret(owner, "HF_TOKEN", HF)
    job = queued_job(owner, work=_work(secrets=["HF_TOKEN"]), data=[{"source": URL_USER, "target": "a/"}])
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-123")
    client.force_login(admin)
    from apps.secrets.models import Secret
    pages = [f"/admin/jobs/job/{job.pk}/change/", "/admin/secrets/secret/",
             f"/admin/secrets/secret/{Secret.objects.get().pk}/change/"]
    for page in pages:
        resp = client.get(page)
        assert resp.status_code == 200, page
        html = resp.content.decode()
        assert HF not in html and "pa55w0rd-XYZ" not in html, page


def test_a_secret_no_key_opens_fails_the_start_and_the_nodes_poll_goes_on(owner, pool, settings):
    from cryptography.fernet import Fernet

    _secret(owner, "HF_TOKEN", HF)
    job = placed(queued_job(owner, work=_work(secrets=["HF_TOKEN"])))
    plain = placed(queued_job(owner))
    settings.E31_SECRETS_KEY = Fernet.generate_key().decode()  # the key was replaced, not rotated
    holders = {Lease.objects.get(job=j).node for j in (job, plain)}
    assignments = {a["job_id"]: a for node in holders for a in agent_work_for(node)["assignments"]}
    assert "cannot be opened" in assignments[job.pk]["start_refused"] and "secrets" not in assignments[job.pk]
    assert "start_refused" not in assignments[plain.pk]


def test_credentials_no_key_opens_are_a_400_at_submit(api, owner, pool, settings):
    from cryptography.fernet import Fernet

    _secret(owner, "BUCKET", S3_CREDS)
    settings.E31_SECRETS_KEY = Fernet.generate_key().decode()
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": "s3://b/a.bin", "credentials": "BUCKET"}]), format="json")
    assert resp.status_code == 400 and "cannot be opened" in resp.json()["data[0].credentials"][0]


REGISTRY_LOGIN = json.dumps({"username": "ci-bot", "password": "registry-Pass-771"})


@pytest.mark.parametrize("work, value, field", [
    (_work(image="ghcr.io/team/train:1", image_credentials="REG"), None, "work.image_credentials"),  # no secret
    (_work(image="ghcr.io/team/train:1", image_credentials="REG"), '{"user": "x"}', "work.image_credentials"),
    (_work(image="ghcr.io/team/train:1", image_credentials="REG"), "not json", "work.image_credentials"),
    (_work(image_credentials="REG"), REGISTRY_LOGIN, "work.image_credentials"),  # no image to pull
    (_work(image="Not An Image"), None, "work.image"),
])
def test_bad_image_credentials_and_references_are_a_400_naming_the_field(api, owner, pool, work, value, field):
    if value is not None:
        _secret(owner, "REG", value)
    resp = api.post("/api/v1/jobs/", spec(work=work), format="json")
    assert resp.status_code == 400 and field in resp.json(), resp.json()
    assert "registry-Pass-771" not in resp.content.decode()


def test_the_image_login_goes_to_the_holding_node_in_its_credentials(api, owner, db):
    from ..factories import node_with_gpus

    node = node_with_gpus("node-r", count=2, runtimes=["podman"])
    _secret(owner, "REG", REGISTRY_LOGIN)
    resp = api.post("/api/v1/jobs/", spec(work=_work(image="ghcr.io/team/train:1", image_credentials="REG")),
                    format="json")
    assert resp.status_code == 201, resp.json()
    placed(Job.objects.get(pk=resp.json()["id"]))
    [assignment] = agent_work_for(node)["assignments"]
    assert assignment["credentials"] == {"REG": REGISTRY_LOGIN}
    assert assignment["spec"]["work"]["image_credentials"] == "REG"
    assert "registry-Pass-771" not in api.get(f"/api/v1/jobs/{resp.json()['id']}/").content.decode()
