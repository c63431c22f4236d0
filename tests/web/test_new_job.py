"""The new-job form: four parts, YAML paste or file, examples, errors in place, price."""
import hashlib
import re
from decimal import Decimal
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.artifacts.models import Upload
from apps.core.models import AccountProfile
from apps.jobs.examples import example_attachments, example_file, example_names
from apps.jobs.models import Job

from ..drive import queued_job
from .factories import UserFactory, node_with_gpus, spec_doc

pytestmark = pytest.mark.django_db

EXAMPLES = ["training", "inference", "processing", "simulation"]


BLANK_ROW = {"data-0-source": "", "data-0-target": "", "data-0-extract": ""}


def form_data(**overrides):
    """What a browser posts for a filled-in form (three data rows)."""
    data = {
        "spec_text": "", "example": "",
        "name": "resnet-finetune", "command": "python train.py --epochs 3", "kind": "training",
        "env": "SEED=1\nMODE=fast", "image": "",
        "gpus": "2", "nodes": "1", "gpu_model": "H100", "gpu_memory_gb": "40", "cpus": "8",
        "memory_gb": "64", "time_limit": "1h30m",
        "paths": "checkpoints/**\nmetrics.json", "retention_days": "3",
        "data-TOTAL_FORMS": "3", "data-INITIAL_FORMS": "0", "data-MIN_NUM_FORMS": "0",
        "data-MAX_NUM_FORMS": "100",
        "data-0-source": "https://example.com/data.tar.gz", "data-0-target": "data/",
        "data-0-extract": "on",
    }
    data.update(overrides)
    return data


def yaml_data(text, **overrides):
    return form_data(spec_text=text, **overrides)


def field_html(html, name):
    """The rendered <input>/<textarea> tag of field ``name``."""
    match = re.search(rf'<(input|textarea|select)[^>]*name="{re.escape(name)}"[^>]*>', html)
    assert match, f"no field {name}"
    return match.group(0)


def new_job_id(resp):
    """The job a submit redirected to; for a job array (the simulation example), its task 0."""
    assert resp.status_code == 302, resp.content.decode()[:3000]
    match = re.fullmatch(r"/(jobs|arrays)/(\d+)/", resp["Location"])
    assert match, resp["Location"]
    if match.group(1) == "arrays":
        return Job.objects.get(array_id=int(match.group(2)), array_index=0).pk
    return int(match.group(2))


# --- the page --------------------------------------------------------------
def test_the_page_has_the_four_parts_the_yaml_box_examples_and_rates(web, node):
    html = web.get("/jobs/new/").content.decode()
    for part in ("Work", "Data", "Compute", "Output", "Spec as YAML"):
        assert part in html
    for name in EXAMPLES:
        assert f'href="/jobs/new/?example={name}"' in html
    assert 'name="data-2-source"' in html and 'name="data-2-file"' in html
    assert 'name="files"' in html and "multiple" in field_html(html, "files")
    assert 'enctype="multipart/form-data"' in html
    assert "H100-80GB" in html and "$2.49" in html


# --- the four parts ----------------------------------------------------------
def test_the_form_submits_a_job_and_goes_to_its_page(web, user, node,
                                                     django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # the scheduling cycle runs
        resp = web.post("/jobs/new/", form_data(gpu_model="H100-80GB"))
    job = Job.objects.get(pk=new_job_id(resp), owner=user)
    assert job.spec["name"] == "resnet-finetune"
    assert job.spec["work"] == {"command": "python train.py --epochs 3", "image": None,
                                "env": {"SEED": "1", "MODE": "fast"}, "kind": "training", "network": "egress"}
    assert job.spec["data"] == [{"source": "https://example.com/data.tar.gz", "target": "data/",
                                 "sha256": None, "extract": True}]
    compute = job.spec["compute"]
    assert (compute["gpus"], compute["nodes"], compute["gpu_model"], compute["time_limit"]) == \
        (2, 1, ["H100-80GB"], "1h30m")
    assert (compute["gpu_memory_gb"], compute["cpus"], compute["memory_gb"]) == (40, 8, 64)
    assert job.spec["output"] == {"paths": ["checkpoints/**", "metrics.json"], "retention_days": 3}
    page = web.get(resp["Location"]).content.decode()
    assert "resnet-finetune" in page and "Rented" in page  # a free node: straight to rented
    assert f"Job {job.pk} submitted." in page


def test_the_form_asks_for_retries_and_an_out_of_range_count_is_shown_by_its_field(web, user, node):
    resp = web.post("/jobs/new/", form_data(retry_attempts="3", retry_on=["failed"]))
    job = Job.objects.get(pk=new_job_id(resp), owner=user)
    assert (job.spec["retry"], job.max_attempts) == ({"attempts": 3, "on": ["node_lost", "failed"]}, 3)
    html = web.post("/jobs/new/", form_data(retry_attempts="11")).content.decode()
    assert 'aria-invalid="true"' in field_html(html, "retry_attempts") and 'href="#id_retry_attempts"' in html


def test_bad_input_is_shown_next_to_its_field_and_nothing_is_lost(web, node):
    data = form_data(gpus="-1", time_limit="forever", **{"data-0-target": "../x"})
    resp = web.post("/jobs/new/", data)
    assert resp.status_code == 200
    assert not Job.objects.exists()
    html = resp.content.decode()
    assert "The job was not submitted" in html
    gpus = field_html(html, "gpus")
    assert 'value="-1"' in gpus and 'aria-invalid="true"' in gpus
    assert re.search(r'id="id_gpus_error"><li>Must be greater than or equal to 1', html)
    limit = field_html(html, "time_limit")
    assert 'value="forever"' in limit and 'aria-invalid="true"' in limit
    assert 'id="id_time_limit_error"' in html
    target = field_html(html, "data-0-target")
    assert 'value="../x"' in target and 'aria-invalid="true"' in target
    assert "no &#x27;..&#x27;" in html
    # the summary at the top links to the fields
    assert 'href="#id_gpus"' in html and 'href="#id_data-0-target"' in html
    # and everything else typed is still there
    assert 'value="resnet-finetune"' in field_html(html, "name")
    assert 'value="https://example.com/data.tar.gz"' in field_html(html, "data-0-source")
    assert "SEED=1\nMODE=fast</textarea>" in html
    assert re.search(r'<option value="training" selected>', html)


def test_absurd_gpu_counts_get_no_price_and_a_field_error(web, node):
    huge = "9" * 24
    resp = web.get(f"/jobs/new/estimate/?gpus={huge}&nodes=1&time_limit=1h")
    assert resp.status_code == 200
    resp = web.post("/jobs/new/", form_data(gpus=huge))
    assert resp.status_code == 200 and not Job.objects.exists()
    assert 'aria-invalid="true"' in field_html(resp.content.decode(), "gpus")


def test_a_blank_form_says_what_is_required(web, node):
    data = form_data(name="", command="", gpus="", time_limit="", paths="", **BLANK_ROW)
    html = web.post("/jobs/new/", data).content.decode()
    assert 'id="id_command_error"' in html and 'id="id_name_error"' in html
    assert 'id="id_gpus_error"' in html and 'id="id_time_limit_error"' in html


def test_an_env_line_without_equals_is_refused(web, node):
    html = web.post("/jobs/new/", form_data(env="SEED=1\njust words")).content.decode()
    assert "Line 2: write KEY=VALUE." in html
    assert not Job.objects.exists()


def test_an_env_key_the_spec_refuses_is_shown_on_env(web, node):
    html = web.post("/jobs/new/", form_data(env="lower=1")).content.decode()
    assert 'id="id_env_error"' in html and "[A-Z_][A-Z0-9_]*" in html


def test_a_request_no_node_can_hold_is_explained_in_compute(web, node):
    html = web.post("/jobs/new/", form_data(gpus="8")).content.decode()
    assert "No node has 8 GPUs" in html and "the most on one node is 4" in html
    assert 'href="#part-compute"' in html


def test_a_row_with_a_url_and_a_file_is_refused(web, node):
    upload = SimpleUploadedFile("a.txt", b"a")
    html = web.post("/jobs/new/", form_data(**{"data-0-file": upload})).content.decode()
    assert "Give a URL or a file, not both." in html
    assert not Job.objects.exists()


def test_a_row_file_is_uploaded_and_referenced(web, user, node):
    script = SimpleUploadedFile("train.py", b"print('hi')\n")
    data = form_data(**BLANK_ROW, **{"data-0-file": script})
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", data)))
    item = job.spec["data"][0]
    upload = Upload.objects.get(owner=user, name="train.py")
    assert item["source"] == f"upload:{upload.pk}" and item["target"] == "train.py"


def test_files_of_the_multiple_input_are_named_by_upload_name(web, user, node):
    files = [SimpleUploadedFile("a.csv", b"1,2\n"), SimpleUploadedFile("b.csv", b"3,4\n")]
    data = form_data(files=files, **{"data-0-source": "upload:a.csv", "data-0-target": "in/a.csv",
                                     "data-1-source": "upload:b.csv"})
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", data)))
    a, b = (Upload.objects.get(owner=user, name=n) for n in ("a.csv", "b.csv"))
    assert [d["source"] for d in job.spec["data"]] == [f"upload:{a.pk}", f"upload:{b.pk}"]


def test_files_survive_an_error_and_are_used_on_the_next_try(web, user, node):
    script = SimpleUploadedFile("train.py", b"print('hi')\n")
    data = form_data(gpus="0", **BLANK_ROW, **{"data-0-file": script})
    html = web.post("/jobs/new/", data).content.decode()
    upload = Upload.objects.get(owner=user, name="train.py")
    assert f'name="kept" value="{upload.pk}"' in html and "Already attached" in html
    retry = form_data(kept=[str(upload.pk)], **{**BLANK_ROW, "data-0-source": "upload:train.py"})
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", retry)))
    assert job.spec["data"][0]["source"] == f"upload:{upload.pk}"
    assert Upload.objects.filter(owner=user).count() == 1


class _FormFields(HTMLParser):
    """What a browser sends back for the new-job form as the page renders it (no files)."""

    def __init__(self):
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("file", "submit"):
            if a.get("type") == "checkbox":
                if "checked" in a:
                    self.fields.append((name, a.get("value") or "on"))
            else:
                self.fields.append((name, a.get("value") or ""))
        elif tag == "textarea" and name:
            self._textarea = name
            self.fields.append((name, ""))
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and "selected" in a:
            self.fields.append((self._select, a.get("value") or ""))

    def handle_data(self, data):
        if self._textarea:
            name, text = self.fields[-1]
            self.fields[-1] = (name, text + data)

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None


def resubmit_data(html, **overrides):
    """The form of the page ``html`` as a browser posts it again, with ``overrides`` typed in."""
    form = html[html.index('<form method="post" enctype="multipart/form-data"'):]
    parser = _FormFields()
    parser.feed(form[:form.index("</form>")])
    data: dict[str, list[str]] = {}
    for name, value in parser.fields:
        data.setdefault(name, []).append(unescape(value).removeprefix("\n"))
    data.update({k: [v] if isinstance(v, str) else v for k, v in overrides.items()})
    return data


def test_a_row_file_survives_a_spec_error_and_the_next_try_uses_it(web, user, node):
    data = form_data(time_limit="abc", **{"data-0-source": "", "data-0-target": "in/mydata.txt",
                                           "data-0-file": SimpleUploadedFile("mydata.txt", b"1 2 3\n")})
    html = web.post("/jobs/new/", data).content.decode()
    assert not Job.objects.exists()
    upload = Upload.objects.get(owner=user, name="mydata.txt")
    assert "Already attached" in html and f'name="kept" value="{upload.pk}"' in html
    assert 'value="upload:mydata.txt"' in field_html(html, "data-0-source")
    assert 'value="in/mydata.txt"' in field_html(html, "data-0-target")

    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", resubmit_data(html, time_limit="1h"))))
    assert job.spec["data"][0]["source"] == f"upload:{upload.pk}"
    assert job.spec["data"][0]["target"] == "in/mydata.txt"
    assert Upload.objects.filter(owner=user).count() == 1


def test_a_row_file_survives_an_error_of_the_form_itself(web, user, node):
    data = form_data(env="NO_EQUALS_SIGN", **{**BLANK_ROW, "data-0-file": SimpleUploadedFile("x.bin", b"x")})
    html = web.post("/jobs/new/", data).content.decode()
    assert "Line 1: write KEY=VALUE." in html
    upload = Upload.objects.get(owner=user, name="x.bin")
    assert 'value="upload:x.bin"' in field_html(html, "data-0-source")
    assert 'value="x.bin"' in field_html(html, "data-0-target")
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", resubmit_data(html, env="SEED=1"))))
    assert (job.spec["data"][0]["source"], job.spec["data"][0]["target"]) == (f"upload:{upload.pk}", "x.bin")


def test_a_file_chosen_again_in_the_row_replaces_the_kept_one(web, user, node):
    data = form_data(time_limit="abc", **{**BLANK_ROW, "data-0-file": SimpleUploadedFile("old.txt", b"old")})
    html = web.post("/jobs/new/", data).content.decode()
    retry = resubmit_data(html, time_limit="1h", **{"data-0-target": "",
                                                   "data-0-file": SimpleUploadedFile("new.txt", b"new")})
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", retry)))
    new = Upload.objects.get(owner=user, name="new.txt")
    assert (job.spec["data"][0]["source"], job.spec["data"][0]["target"]) == (f"upload:{new.pk}", "new.txt")


def test_a_row_with_a_url_keeps_its_url_after_an_error(web, user, node):
    data = form_data(**{"data-0-file": SimpleUploadedFile("a.txt", b"a")})
    html = web.post("/jobs/new/", data).content.decode()
    assert "Give a URL or a file, not both." in html
    assert 'value="https://example.com/data.tar.gz"' in field_html(html, "data-0-source")


def test_another_users_kept_file_is_ignored(web, node):
    other = UserFactory(username="bob")
    theirs = Upload.objects.create(owner=other, name="secret.py", size_bytes=1, sha256="0" * 64,
                                   file="x")
    data = form_data(kept=[str(theirs.pk)], **{**BLANK_ROW, "data-0-source": "upload:secret.py"})
    html = web.post("/jobs/new/", data).content.decode()
    assert "No uploaded file named &#x27;secret.py&#x27;" in html
    assert not Job.objects.exists()


# --- YAML ------------------------------------------------------------------
def test_a_pasted_yaml_spec_wins_over_the_four_parts(web, node):
    text = yaml.safe_dump(spec_doc(name="from-yaml"))
    resp = web.post("/jobs/new/", yaml_data(text, gpus="not a number"))
    job = Job.objects.get(pk=new_job_id(resp))
    assert job.name == "from-yaml" and job.spec["compute"]["gpus"] == 1


def test_broken_yaml_is_explained_and_kept_in_the_box(web, node):
    text = "name: [unclosed\nwork: {}\n"
    html = web.post("/jobs/new/", yaml_data(text)).content.decode()
    assert "Is not valid YAML at line" in html
    assert "name: [unclosed\nwork: {}\n</textarea>" in html
    assert 'id="id_spec_text_error"' in html


def test_yaml_field_errors_name_their_path_by_the_box(web, node):
    text = yaml.safe_dump(spec_doc(compute={"gpus": 0, "time_limit": "forever"}, colour="blue"))
    html = web.post("/jobs/new/", yaml_data(text)).content.decode()
    box = re.search(r'<ul class="errorlist" id="id_spec_text_error">(.*?)</ul>', html, re.S)
    errors = box.group(1)
    assert "compute.gpus: Must be greater than or equal to 1." in errors
    assert "compute.time_limit: Must be a duration" in errors
    assert "colour: Unknown field." in errors
    assert "gpus: 0" in html  # the text is still in the box
    assert not Job.objects.exists()


def test_a_yaml_file_is_submitted(web, node):
    upload = SimpleUploadedFile("job.yaml", yaml.safe_dump(spec_doc(name="from-file")).encode())
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", form_data(spec_file=upload))))
    assert job.name == "from-file"


def test_a_bad_yaml_file_lands_in_the_box_to_fix(web, node):
    upload = SimpleUploadedFile("job.yaml", b"name: fine\ncompute: {gpus: -3, time_limit: 1h}\n")
    html = web.post("/jobs/new/", form_data(spec_file=upload)).content.decode()
    assert "compute: {gpus: -3, time_limit: 1h}" in html
    assert "compute.gpus" in html


def test_yaml_with_attached_files(web, user, node):
    doc = spec_doc(data=[{"source": "upload:run.sh", "target": "run.sh"}])
    data = yaml_data(yaml.safe_dump(doc), files=[SimpleUploadedFile("run.sh", b"echo hi\n")])
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", data)))
    upload = Upload.objects.get(owner=user, name="run.sh")
    assert job.spec["data"][0]["source"] == f"upload:{upload.pk}"


# --- examples --------------------------------------------------------------
def test_there_are_four_examples():
    assert set(EXAMPLES) <= set(example_names())


@pytest.mark.parametrize("name", EXAMPLES)
def test_starting_from_an_example_prefills_the_yaml_box(web, node, name):
    html = web.get(f"/jobs/new/?example={name}").content.decode()
    text = (Path(settings.E31_EXAMPLES_DIR) / name / "job.yaml").read_text()
    assert yaml.safe_load(text)["name"] in html
    assert 'name="example" value="' + name + '"' in html
    assert "Worst case" in html or "worst case" in html


@pytest.mark.parametrize("name", EXAMPLES)
def test_submitting_an_example_attaches_its_files(web, user, node, name):
    folder = Path(settings.E31_EXAMPLES_DIR) / name
    text = (folder / "job.yaml").read_text()
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", yaml_data(text, example=name))))
    refs = [item["source"] for item in yaml.safe_load(text)["data"]]
    assert len(job.spec["data"]) == len(refs)
    for item, ref in zip(job.spec["data"], refs, strict=True):
        upload = Upload.objects.get(pk=item["source"].removeprefix("upload:"), owner=user)
        filename = ref.removeprefix("upload:")
        assert upload.name == filename
        assert upload.sha256 == hashlib.sha256((folder / filename).read_bytes()).hexdigest()


def test_a_file_chosen_by_the_user_wins_over_the_examples(web, user, node):
    text = (Path(settings.E31_EXAMPLES_DIR) / "training" / "job.yaml").read_text()
    mine = SimpleUploadedFile("train.py", b"print('my own')\n")
    job = Job.objects.get(pk=new_job_id(web.post("/jobs/new/", yaml_data(text, example="training",
                                                                          files=[mine]))))
    upload = Upload.objects.get(pk=job.spec["data"][0]["source"].removeprefix("upload:"))
    assert upload.sha256 == hashlib.sha256(b"print('my own')\n").hexdigest()


def test_an_unknown_example_is_404(web):
    assert web.get("/jobs/new/?example=../../e31site").status_code == 404
    assert web.get("/jobs/new/?example=nope").status_code == 404


def test_an_example_spec_cannot_reach_files_outside_its_directory(web, user, node):
    doc = spec_doc(data=[{"source": "upload:../../e31site/settings.py", "target": "s.py"}])
    resp = web.post("/jobs/new/", yaml_data(yaml.safe_dump(doc), example="training"))
    html = resp.content.decode()
    assert "No uploaded file named" in html
    assert not Upload.objects.filter(owner=user).exists()


def test_example_attachments_take_only_plain_names_in_the_example_dir(user):
    refs = ["../inference/infer.py", "/etc/passwd", ".hidden", "nope.py", "sub/train.py",
            "train.py"]
    found = example_attachments(owner=user, name="training", refs=refs)
    assert list(found) == ["train.py"]
    assert example_attachments(owner=user, name="../training", refs=["train.py"]) == {}


def test_example_files_do_not_follow_links_out(settings, tmp_path, user):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "job.yaml").write_text("name: demo\n")
    (tmp_path / "outside.txt").write_text("secret")
    (tmp_path / "demo" / "link.txt").symlink_to(tmp_path / "outside.txt")
    settings.E31_EXAMPLES_DIR = tmp_path
    assert example_names() == ["demo"]
    assert example_file("demo", "link.txt") is None
    assert example_file("demo", "job.yaml") is not None
    assert example_attachments(owner=user, name="demo", refs=["link.txt"]) == {}


# --- price -----------------------------------------------------------------
def test_the_estimate_is_time_limit_times_gpus_times_rate(web, node):
    resp = web.get("/jobs/new/estimate/?gpus=2&nodes=1&time_limit=2h&gpu_model=H100")
    html = resp.content.decode()
    assert "H100-80GB" in html and "$9.96" in html  # 2 h x 2 GPUs x 2.49
    assert "A100-80GB" not in html


def test_the_estimate_says_when_the_job_would_start_on_each_model(web, node):
    html = web.get("/jobs/new/estimate/?gpus=2&nodes=1&time_limit=2h").content.decode()
    assert "When it would start, if sent now" in html
    row = html[html.index('class="table table-compact quotes"'):]
    assert "<td>H100-80GB</td><td>now</td><td>now</td>" in row and "$9.96" in row


def test_the_panel_leaves_the_start_out_while_the_queue_is_long(web, node, settings, user):
    settings.E31_QUOTE_FORM_MAX_QUEUED = 0
    queued_job(user)
    html = web.get("/jobs/new/estimate/?gpus=2&nodes=1&time_limit=2h").content.decode()
    assert "$9.96" in html and "When it would start" not in html


def test_the_estimate_waits_for_a_complete_compute_part(web, node):
    html = web.get("/jobs/new/estimate/?gpus=&time_limit=soon").content.decode()
    assert "Give GPUs and a time limit" in html and "H100-80GB" in html


def test_an_example_page_estimates_its_price(web, node):
    html = web.get("/jobs/new/?example=training").content.decode()
    assert "time limit (10m) on 1 GPU" in html and "$0.42" in html  # 10 min x 1 x 2.49


# --- the price panel (issue 16) -------------------------------------------------
def test_a_model_with_a_rate_but_no_gpu_in_the_pool_is_never_quoted(web, node):
    html = web.get("/jobs/new/estimate/?gpus=1&nodes=1&time_limit=1h").content.decode()
    assert "H100-80GB" in html  # the pool's own model is quoted
    assert "H200-141GB" not in html and "RTX4090-24GB" not in html  # rates (seeded) but no GPU


def test_more_gpus_than_the_pool_has_get_no_worst_case(web, node):
    html = web.get("/jobs/new/estimate/?gpus=8&nodes=8&time_limit=1h").content.decode()
    assert "the pool has 4" in html


def test_the_panel_says_what_is_left_of_the_spend_limit(web, user, node):
    AccountProfile.objects.update_or_create(owner=user, defaults={"monthly_spend_limit": Decimal("50")})
    html = web.get("/jobs/new/").content.decode()
    assert "Your spend limit: $50.00 this month" in html and "$50.00</strong> left" in html
    assert "$50.00</strong> left" in web.get("/jobs/new/estimate/?gpus=1&time_limit=1h").content.decode()


def test_the_form_names_the_image_s_registry_login_and_a_missing_one_is_shown_by_its_field(web, node):
    html = web.post("/jobs/new/", form_data(image="ghcr.io/team/train:1", image_credentials="NOPE")).content.decode()
    assert not Job.objects.exists()
    assert 'aria-invalid="true"' in field_html(html, "image_credentials") and "no secret named NOPE" in html


def test_a_gang_one_model_cannot_hold_is_refused_on_nodes_and_the_box_lets_it_mix(web, node):
    """Issue 28 item 7: the form's nodes field carries the refusal of a gang no one GPU model could
    hold; ticking "mix GPU models" submits it."""
    node_with_gpus("node-b", count=4, model="A100-40GB", memory_mb=40960)
    html = web.post("/jobs/new/", form_data(gpus="1", nodes="2", gpu_model="", gpu_memory_gb="")).content.decode()
    assert "No 2 nodes of one GPU model can hold 1 GPU each" in html
    assert 'href="#id_nodes"' in html and not Job.objects.exists()
    web.post("/jobs/new/", form_data(gpus="1", nodes="2", gpu_model="", gpu_memory_gb="", mixed_models="on"))
    assert Job.objects.get().spec["compute"]["mixed_models"] is True
