"""The jobs API: submit in three formats, bad input, and what a stranger sees."""
import io

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from rest_framework.test import APIClient

from apps.jobs.models import Job

from ..factories import spec

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)
def test_it_accepts_json_and_rents_at_once_when_gpus_are_free(api, pool):
    resp = api.post("/api/v1/jobs/", spec(), format="json")
    assert resp.status_code == 201
    assert api.get(f"/api/v1/jobs/{resp.json()['id']}/").json()["state"] == "rented"


def test_it_accepts_yaml(api, pool):
    resp = api.post("/api/v1/jobs/", yaml.safe_dump(spec(name="from-yaml")), content_type="application/yaml")
    assert resp.status_code == 201, resp.json()
    assert resp.json()["name"] == "from-yaml"


def test_it_explains_broken_yaml(api, pool):
    resp = api.post("/api/v1/jobs/", "name: [unclosed", content_type="application/yaml")
    assert resp.status_code == 400
    assert "line" in resp.json()["spec"][0]


@pytest.mark.parametrize("text", ["a: &x [*x]", "a: &a [1, 1]\nb: [*a, *a]"])
def test_it_refuses_yaml_aliases_without_expanding_them(api, pool, text):
    resp = api.post("/api/v1/jobs/?dry_run=1", text, content_type="application/yaml")
    assert resp.status_code == 400
    assert "aliases" in resp.json()["spec"][0]


def test_it_accepts_multipart_with_attached_files(api, pool):
    script = SimpleUploadedFile("train.py", b"print('hi')\n")
    doc = spec(data=[{"source": "upload:train.py", "target": "train.py"}])
    resp = api.post("/api/v1/jobs/", {"spec": yaml.safe_dump(doc), "files": [script]}, format="multipart")
    assert resp.status_code == 201, resp.json()
    source = resp.json()["spec"]["data"][0]["source"]
    assert source.startswith("upload:") and source != "upload:train.py"


def test_it_refuses_an_upload_it_does_not_have(api, pool):
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": "upload:nope.py"}]), format="json")
    assert resp.status_code == 400 and "data[0].source" in resp.json()


def test_it_refuses_another_users_upload(api, stranger_api, pool):
    up = stranger_api.post("/api/v1/uploads/", {"file": SimpleUploadedFile("x.bin", b"x")}, format="multipart")
    assert up.status_code == 201
    resp = api.post("/api/v1/jobs/", spec(data=[{"source": up.json()["source"]}]), format="json")
    assert resp.status_code == 400 and "data[0].source" in resp.json()


def test_it_refuses_file_urls_outside_allowed_roots(api, pool, settings):
    settings.E31_FILE_ROOTS = ["/srv/datasets"]
    bad = api.post("/api/v1/jobs/", spec(data=[{"source": "file:///etc/passwd"}]), format="json")
    assert bad.status_code == 400 and "data[0].source" in bad.json()
    sneaky = api.post("/api/v1/jobs/", spec(data=[{"source": "file:///srv/datasets/../../etc/passwd"}]),
                      format="json")
    assert sneaky.status_code == 400
    ok = api.post("/api/v1/jobs/", spec(data=[{"source": "file:///srv/datasets/a.csv"}]), format="json")
    assert ok.status_code == 201


@pytest.mark.parametrize("compute,words", [
    ({"gpus": 16, "gpu_model": ["H100"], "time_limit": "1h"},
     "No node has 16 GPUs of model H100; the most on one node is 4."),
    ({"gpus": 1, "gpu_model": ["L40S"], "time_limit": "1h"},
     "No node has GPUs of model L40S; the pool has A100-40GB, H100-80GB."),
    ({"gpus": 1, "gpu_memory_gb": 120, "time_limit": "1h"},
     "No GPU has 120 GB; the largest has 85.5 GB (H100-80GB)."),
    ({"gpus": 1, "gpu_model": ["A100"], "gpu_memory_gb": 80, "time_limit": "1h"},
     "No GPU of model A100 has 80 GB; the largest has 42.9 GB (A100-40GB)."),
    ({"gpus": 4, "nodes": 2, "gpu_model": ["H100"], "time_limit": "1h"},
     "Only 1 node can hold 4 H100; the job asks for 2 such nodes."),
    ({"gpus": 3, "gpu_model": ["A100"], "gpu_memory_gb": 42, "time_limit": "1h"},
     "No node has 3 GPUs of model A100 with 42 GB or more each; the most on one node is 2."),
])
def test_it_refuses_what_no_node_could_ever_hold(api, pool, compute, words):
    resp = api.post("/api/v1/jobs/", spec(compute=compute), format="json")
    assert resp.status_code == 400
    assert words in resp.json()["compute"][0]
    assert not Job.objects.exists()


def test_it_refuses_a_gang_no_one_gpu_model_could_hold(api, pool):
    """Issue 28 item 7: node-a (H100) and node-b (A100) could each hold a rank, but a gang that
    names no model goes on one model: refused at submit, naming compute.nodes and the way out."""
    resp = api.post("/api/v1/jobs/", spec(compute={"gpus": 1, "nodes": 2, "time_limit": "1h"}), format="json")
    assert resp.status_code == 400
    assert resp.json()["compute.nodes"] == [
        "No 2 nodes of one GPU model can hold 1 GPU each: the pool has 1 such node of A100-40GB and 1 of "
        "H100-80GB; set compute.mixed_models: true to let the gang mix models, or ask for fewer nodes."]
    assert not Job.objects.exists()
    mixed = api.post("/api/v1/jobs/", spec(compute={"gpus": 1, "nodes": 2, "mixed_models": True, "time_limit": "1h"}),
                     format="json")
    assert mixed.status_code == 201 and mixed.json()["spec"]["compute"]["mixed_models"] is True


def test_mixed_models_is_a_boolean_left_out_of_the_stored_spec_when_false(api, pool):
    bad = api.post("/api/v1/jobs/", spec(compute={"gpus": 1, "mixed_models": "yes", "time_limit": "1h"}),
                   format="json")
    assert bad.status_code == 400 and "compute.mixed_models" in bad.json()
    plain = api.post("/api/v1/jobs/", spec(), format="json")
    assert plain.status_code == 201 and "mixed_models" not in plain.json()["spec"]["compute"]


@pytest.mark.parametrize("body", [b"\xff\xfe", b"[1, 2", b"null", b"12", b'"x"', b"{" * 5000])
def test_it_never_answers_500_to_junk(api, pool, body):
    for ctype in ("application/json", "application/yaml"):
        resp = api.post("/api/v1/jobs/", body, content_type=ctype)
        assert 400 <= resp.status_code < 500, (ctype, body, resp.status_code)


@pytest.mark.django_db(transaction=True)
def test_it_filters_by_state_and_rejects_unknown_states(api, pool):
    api.post("/api/v1/jobs/", spec(), format="json")
    assert api.get("/api/v1/jobs/?state=rented").json()["count"] == 1
    assert api.get("/api/v1/jobs/?state=queued").json()["count"] == 0
    assert api.get("/api/v1/jobs/?state=bogus").status_code == 400


def test_a_stranger_sees_nothing_of_anothers_job(api, stranger_api, pool):
    job_id = api.post("/api/v1/jobs/", spec(), format="json").json()["id"]
    for path in ("", "events/", "logs/", "bundle/"):
        assert stranger_api.get(f"/api/v1/jobs/{job_id}/{path}").status_code == 404
    assert stranger_api.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404
    assert stranger_api.get("/api/v1/jobs/").json()["count"] == 0
    assert stranger_api.get("/api/v1/usage/").json()["leases"] == []


def test_anonymous_requests_are_refused(pool):
    assert APIClient().get("/api/v1/jobs/").status_code in (401, 403)


def test_token_auth_works(owner, pool):
    out = io.StringIO()
    call_command("issue_token", "owner", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {out.getvalue().strip()}")
    assert client.get("/api/v1/jobs/").status_code == 200


def test_the_schema_and_pool_answer(api, pool):
    assert api.get("/api/schema/").status_code == 200
    rows = {r["gpu_model"]: r for r in api.get("/api/v1/pool/").json()}
    assert rows["H100-80GB"]["total"] == 4 and rows["H100-80GB"]["free"] == 4
    assert rows["H100-80GB"]["rate_per_gpu_hour"] == "2.4900"


@pytest.mark.parametrize("when", ["garbage", "2024-02-30", "2024-13-01", "2024-01-01T25:00:00",
                                  "2026-11-30T00:00:00+99:00", "9999-12-31T23:59:59-23:59"])
def test_usage_refuses_impossible_dates_with_400(api, when):
    resp = api.get("/api/v1/usage/", {"from": when})
    assert resp.status_code == 400 and "from" in resp.json()


def test_usage_csv_and_typed_json(api, pool):
    assert api.get("/api/v1/usage/?format=csv")["Content-Type"].startswith("text/csv")
    assert api.get("/api/v1/usage/").json()["totals"]["leases"] == 0


def test_logs_name_the_bad_parameter(api, pool):
    job_id = api.post("/api/v1/jobs/", spec(), format="json").json()["id"]
    assert "attempt" in api.get(f"/api/v1/jobs/{job_id}/logs/?attempt=abc").json()
    assert "offset" in api.get(f"/api/v1/jobs/{job_id}/logs/?offset=-1").json()
    assert "past the end" in api.get(f"/api/v1/jobs/{job_id}/logs/?offset=99999").json()["offset"][0]
    assert api.get(f"/api/v1/jobs/{job_id}/logs/?offset=0").status_code == 200


def test_anonymous_api_calls_answer_401(pool):
    resp = APIClient().get("/api/v1/jobs/")
    assert resp.status_code == 401 and resp.has_header("WWW-Authenticate")


def test_nul_anywhere_in_a_spec_is_refused(api, pool):
    doc = spec(work={"command": "x", "image": "ub\x00untu"})
    resp = api.post("/api/v1/jobs/", doc, format="json")
    assert resp.status_code == 400 and "work.image" in resp.json()


def test_a_json_spec_with_a_duplicate_key_is_a_400_naming_the_key(api, pool):
    body = '{"name": "dup", "work": {"command": "true"}, "compute": {"gpus": 1, "gpus": 8, "time_limit": "5m"}}'
    resp = api.post("/api/v1/jobs/", body, content_type="application/json")
    assert resp.status_code == 400
    assert "duplicate key 'gpus'" in resp.json()["spec"][0]
    assert api.post("/api/v1/jobs/", "{bad", content_type="application/json").status_code == 400
    assert api.post("/api/v1/jobs/", '{"a": NaN}', content_type="application/json").status_code == 400
