"""``e31`` end to end (issue 16 item 1): the four examples submitted and followed, logs live, outputs
fetched and verified (and resumed), cancel, rerun, usage, price, errors and exit codes.

One stack for the module (tests/cli/conftest.py); the examples run at once, each under its own
``e31 submit --watch``, as four users' terminals would.
"""
from __future__ import annotations

import hashlib
import json
import signal
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
EXAMPLES = Path(settings.E31_EXAMPLES_DIR)
NAMES = ("training", "inference", "processing", "simulation")
LAST_LINE = "\ndone: "  # each example's last line: proof that the log streamed to its end


def no_traceback(*results) -> None:
    """Never a Python traceback shown to the user."""
    for r in results:
        assert "Traceback" not in r.stderr + r.stdout, r.stderr


def write_spec(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.yaml").write_text(text)
    return folder / "job.yaml"


@pytest.fixture(scope="module")
def examples_started(live) -> dict:
    """The four examples, each under its own ``e31 submit --watch``, all at once; started by the
    first test that asks, so that the tests that need no GPU run meanwhile."""
    return {name: live.popen("submit", "--watch", str(EXAMPLES / name / "job.yaml")) for name in NAMES}


@pytest.fixture(scope="module")
def examples(live, examples_started) -> dict[str, dict]:
    """The four examples run to their end; by name: ``{"code", "stdout", "stderr", "jobs"}``
    (the jobs from ``e31 --json ls``)."""
    out = {}
    for name, proc in examples_started.items():
        stdout, stderr = proc.communicate(timeout=180)
        out[name] = {"code": proc.returncode, "stdout": stdout, "stderr": stderr}
    listed = json.loads(live.e31("--json", "ls", "--all").stdout)
    for name in NAMES:
        spec_name = yaml_name(EXAMPLES / name / "job.yaml")
        out[name]["jobs"] = [j for j in listed if j["name"] == spec_name]
    return out


def yaml_name(path: Path) -> str:
    import yaml

    return yaml.safe_load(path.read_text())["name"]


def test_errors_are_field_by_field_with_distinct_exit_codes_and_no_traceback(live, examples_started, tmp_path):
    bad = write_spec(tmp_path / "bad", "name: bad\nwork: {command: 'true', colour: red}\n"
                                       "compute: {gpus: 1, time_limit: 5x}\noutput: {paths: []}\n")
    r = live.e31("submit", str(bad))
    assert r.returncode == 4
    assert "work.colour: Unknown field" in r.stderr and "compute.time_limit:" in r.stderr
    js = live.e31("--json", "price", str(bad))
    assert js.returncode == 4 and set(json.loads(js.stdout)["error"]["fields"]) == {"work.colour",
                                                                                     "compute.time_limit"}
    wrong = live.e31("ls", token="not-a-token")
    assert wrong.returncode == 5 and "token" in wrong.stderr.lower()
    gone = live.e31("ls", url="http://127.0.0.1:9")  # nothing listens on port 9
    assert gone.returncode == 7 and "cannot reach" in gone.stderr
    missing = live.e31("status", "999999")
    assert missing.returncode == 6
    no_file = write_spec(tmp_path / "nofile", "name: x\nwork: {command: x}\ncompute: {gpus: 1, time_limit: 1m}\n"
                                              "data: [{source: 'upload:absent.py', target: a.py}]\n")
    r2 = live.e31("submit", str(no_file))
    assert r2.returncode == 2 and "data[0].source" in r2.stderr and "absent.py" in r2.stderr
    too_big = write_spec(tmp_path / "big", "name: x\nwork: {command: x}\ncompute: {gpus: 64, time_limit: 1m}\n")
    r3 = live.e31("price", str(too_big))
    assert r3.returncode == 4 and "compute" in r3.stderr
    no_traceback(r, js, wrong, gone, missing, r2, r3)


def test_login_saves_a_checked_token_that_the_environment_overrides(live):
    r = live.e31("login", live.url, "--token", live.token, token="", url="")
    assert r.returncode == 0, r.stderr
    path = live.config_dir / "config.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text()) == {"url": live.url, "token": live.token}
    assert live.e31("ls", token="", url="").returncode == 0  # from the saved file
    assert live.e31("ls", token="wrong", url="").returncode == 5  # E31_TOKEN over the file
    refused = live.e31("login", live.url, "--token", "wrong")
    assert refused.returncode == 5
    assert json.loads(path.read_text())["token"] == live.token  # a refused token is not saved
    assert live.e31("logout").returncode == 0 and not path.exists()


def test_price_quotes_the_worst_case_of_a_spec(live):
    price = live.e31("--json", "price", str(EXAMPLES / "simulation" / "job.yaml"))
    assert price.returncode == 0, price.stdout
    quote = json.loads(price.stdout)
    assert quote["tasks"] == 8 and float(quote["worst_case"]) > 0
    assert "Worst case" in live.e31("price", str(EXAMPLES / "training" / "job.yaml")).stdout


def test_submit_watch_runs_the_four_examples_to_success_streaming_their_logs(examples):
    for name, run in examples.items():
        assert run["code"] == 0, (name, run["stderr"][-2000:])
        assert "Traceback" not in run["stderr"]
        assert "succeeded" in run["stderr"]
        if name == "simulation":  # a job array of 8: counts, then a table of its tasks
            assert len(run["jobs"]) == 8 and "8 of 8 tasks succeeded" in run["stderr"]
        else:  # the log streamed to stdout, to its last line
            assert LAST_LINE in run["stdout"], (name, run["stdout"][-1000:])
            assert "E31_JOB_ID=" in run["stdout"]
        assert all(j["outcome"] == "succeeded" for j in run["jobs"])


def test_get_downloads_verifies_and_unpacks_every_example(live, examples, tmp_path):
    for name, run in examples.items():
        job = run["jobs"][0]
        r = live.e31("--json", "get", str(job["id"]), "-o", str(tmp_path / name))
        assert r.returncode == 0, r.stdout + r.stderr
        got = json.loads(r.stdout)["bundles"][0]
        assert got["sha256"] == job["bundle"]["sha256"] and got["files"]
        assert "files" not in job["bundle"] and job["bundle"]["files_url"]  # `ls` lists, never inlines a manifest
        shown = json.loads(live.e31("--json", "status", str(job["id"])).stdout)  # one job: its manifest
        for entry in shown["bundle"]["files"]:  # the API's manifest, checked again here
            data = (tmp_path / name / entry["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["path"]
        assert not list((tmp_path / name).glob(".job-*"))  # no archive or part left behind


def test_get_resumes_a_cut_download_and_refuses_a_corrupt_one(live, examples, tmp_path):
    job = examples["training"]["jobs"][0]
    bundle = job["bundle"]
    # The CLI's own 60 s, not httpx's default 5 s: on a loaded machine (load 8-17 under a fresh clone's
    # `make test`) the web process can take longer than 5 s to start streaming the bundle.
    got = httpx.get(f"{live.url}/api/v1/jobs/{job['id']}/bundle/",
                    headers={"Authorization": f"Token {live.token}"}, timeout=60)
    assert got.status_code == 200 and len(got.content) == bundle["size_bytes"], (got.status_code, len(got.content))
    whole = got.content
    part = tmp_path / "out" / f".job-{job['id']}-bundle-rank0-{bundle['sha256'][:12]}.part"
    part.parent.mkdir()
    half = len(whole) // 2
    part.write_bytes(whole[:half])  # an interrupted download
    r = live.e31("--json", "get", str(job["id"]), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["bundles"][0]["resumed_from"] == half
    assert (tmp_path / "out" / "metrics.json").is_file()

    part = tmp_path / "bad" / part.name
    part.parent.mkdir()
    part.write_bytes(b"x" * len(whole))  # complete in size, wrong in content
    r = live.e31("get", str(job["id"]), "-o", str(tmp_path / "bad"))
    assert r.returncode == 9 and "does not match" in r.stderr
    assert not part.exists()  # removed, so the next try starts clean
    assert live.e31("get", str(job["id"]), "-o", str(tmp_path / "bad")).returncode == 0


def test_rerun_makes_a_new_job_with_the_same_spec_and_files(live, examples):
    first = examples["inference"]["jobs"][0]  # two uploads, one with a sha256 checked at staging
    r = live.e31("--json", "rerun", str(first["id"]), "--watch")
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads(r.stdout)
    assert again["id"] != first["id"] and again["outcome"] == "succeeded"
    assert again["spec"]["data"] == first["spec"]["data"]
    stranger = live.e31("rerun", str(first["id"]), token=live.stranger_token)
    assert stranger.returncode == 6 and "not found" in stranger.stderr  # as if it did not exist


def test_ls_status_and_usage(live, examples):
    training = examples["training"]["jobs"][0]
    ls = live.e31("ls")
    assert ls.returncode == 0 and "digits-mlp-training" in ls.stdout and "succeeded" in ls.stdout
    status = live.e31("status", str(training["id"]))
    assert status.returncode == 0 and "released: succeeded" in status.stdout
    usage = json.loads(live.e31("--json", "usage", "--from", "2000-01-01").stdout)
    assert training["id"] in {row["job_id"] for row in usage["leases"]}
    assert float(usage["totals"]["cost"]) > 0
    csv = live.e31("usage", "--csv")
    assert csv.returncode == 0 and csv.stdout.startswith("lease_id,job_id,")
    table = live.e31("usage", "--from", "2000-01-01", "--to", "2100-01-01")
    assert table.returncode == 0 and "leases; billed" in table.stdout


def test_logs_follow_prints_lines_while_the_job_runs(live, tmp_path):
    spec = write_spec(tmp_path, "name: ticker\n"
                                "work: {command: 'for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.6; done'}\n"
                                "compute: {gpus: 1, time_limit: 2m}\noutput: {paths: []}\n")
    quiet = live.e31("submit", "-q", str(spec))  # the id alone, for a script: ID=$(e31 submit -q job.yaml)
    assert quiet.returncode == 0 and quiet.stderr == ""
    job = {"id": int(quiet.stdout)}
    proc = live.popen("logs", "-f", str(job["id"]))
    first = proc.stdout.readline()
    seen_at = time.monotonic()
    rest, _ = proc.communicate(timeout=60)
    ended_at = time.monotonic()
    assert first.strip() == "tick 1"  # stdout is the log alone; notes go to stderr
    assert [f"tick {i}" for i in range(1, 7)] == [ln for ln in (first + rest).splitlines() if ln.startswith("tick")]
    assert ended_at - seen_at > 1.5, "the first line came only at the end: not live"
    assert proc.returncode == 0
    whole = live.e31("logs", str(job["id"]))  # the log again, whole, without -f
    assert whole.returncode == 0 and "tick 6" in whole.stdout


def test_logs_of_one_stream_and_the_page_search(live, tmp_path):
    """stdout and stderr kept apart end to end: the real agent's shim writes both, ``e31 logs
    --stderr``/``--stdout`` print one each (followed with -f too), the API searches literally."""
    spec = write_spec(tmp_path, "name: two-streams\n"
                                "work: {command: 'echo out 1; echo \"err a.b\" >&2; sleep 0.3; echo out 2; "
                                "echo err axb >&2'}\n"
                                "compute: {gpus: 1, time_limit: 2m}\noutput: {paths: []}\n")
    job_id = int(live.e31("submit", "-q", str(spec)).stdout)
    followed = live.e31("logs", "-f", "--stderr", str(job_id))
    assert followed.returncode == 0 and followed.stdout.splitlines() == ["err a.b", "err axb"]
    out = live.e31("logs", "--stdout", str(job_id))
    assert out.returncode == 0 and out.stdout.splitlines() == ["out 1", "out 2"]
    lines = json.loads(live.e31("--json", "logs", str(job_id)).stdout.splitlines()[0])
    assert "out 1" in lines["text"]
    page = httpx.get(f"{live.url}/api/v1/jobs/{job_id}/logs/", params={"q": "a.b"},
                     headers={"Authorization": f"Token {live.token}"}, timeout=60).json()
    assert [(x["stream"], x["text"]) for x in page["lines"]] == [("stderr", "err a.b")]
    assert page["lines"][0]["at"] and page["compacted"]  # released: read from the storage object


def test_a_failing_job_exits_1_and_cancel_stops_a_running_one(live, tmp_path):
    failing = write_spec(tmp_path / "f", "name: fails\nwork: {command: 'echo about to fail; exit 3'}\n"
                                         "compute: {gpus: 1, time_limit: 2m}\noutput: {paths: []}\n")
    watching = live.popen("submit", "--watch", str(failing))  # meanwhile, the cancel below

    slow = write_spec(tmp_path / "s", "name: sleeper\nwork: {command: 'echo started; sleep 120'}\n"
                                      "compute: {gpus: 1, time_limit: 5m}\noutput: {paths: []}\n")
    job = json.loads(live.e31("--json", "submit", str(slow)).stdout)
    deadline = time.monotonic() + 30
    while json.loads(live.e31("--json", "status", str(job["id"])).stdout)["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    running = live.e31("status", str(job["id"]))
    assert running.returncode == 3 and "running" in running.stdout  # not ended yet
    following = live.popen("logs", "-f", str(job["id"]))
    assert following.stdout.readline().strip() == "started"
    following.send_signal(signal.SIGINT)  # Ctrl-C stops following, not the job
    _, stderr = following.communicate(timeout=30)
    assert following.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr
    r = live.e31("--json", "cancel", str(job["id"]))
    assert r.returncode == 0 and json.loads(r.stdout)["cancel"]["effect"] == "stopping"
    r = live.e31("logs", "-f", str(job["id"]))  # follows to the end of the stop
    assert r.returncode == 1 and "started" in r.stdout
    final = live.e31("--json", "status", str(job["id"]))
    assert final.returncode == 1 and json.loads(final.stdout)["outcome"] == "cancelled"
    stdout, stderr = watching.communicate(timeout=60)
    assert watching.returncode == 1 and "about to fail" in stdout and "failed" in stderr
    assert "Traceback" not in stderr


def test_the_pipeline_example_runs_end_to_end_and_a_failed_task_cancels_evaluate(live, tmp_path):
    """Issue 25: the three steps from one YAML file; with FAIL_TASK 2, evaluate is released cancelled
    with the reason. Both pipelines at once."""
    import shutil

    failing = tmp_path / "pipeline"
    shutil.copytree(EXAMPLES / "pipeline", failing)
    path = failing / "pipeline.yaml"
    path.write_text(path.read_text().replace('FAIL_TASK: ""', 'FAIL_TASK: "2"'))
    good = live.popen("--json", "submit", "--watch", str(EXAMPLES / "pipeline" / "pipeline.yaml"))
    bad = live.popen("--json", "submit", "--watch", str(path))
    _, stderr = good.communicate(timeout=180)
    assert good.returncode == 0 and "Traceback" not in stderr, stderr
    _, stderr = bad.communicate(timeout=180)
    assert bad.returncode == 1 and "Traceback" not in stderr
    listed = json.loads(live.e31("--json", "ls", "--all").stdout)
    # the two were submitted at once: tell them apart by outcome, not by id
    evaluates = {j["outcome"]: j for j in listed if j["name"] == "linefit-evaluate"}
    assert sorted(evaluates) == ["cancelled", "succeeded"], evaluates
    cancelled = json.loads(live.e31("--json", "status", str(evaluates["cancelled"]["id"])).stdout)
    assert "its dependency can no longer be met" in json.dumps(cancelled)

