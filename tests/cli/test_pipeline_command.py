"""``e31 submit pipeline.yaml`` against a stand-in API (tests/cli/fake_api.py): the steps submitted in
order with ``{step: NAME}`` resolved to the job or array ids the server answered, a bad reference
refused before anything is sent, and a refusal midway that says what was and was not submitted."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from e31_cli.errors import Exit
from e31_cli.main import main

from tests.cli.fake_api import json_response, submitted_spec

PIPELINE = """\
pipeline: nightly
steps:
  preprocess:
    work: {command: python prep.py}
    data: [{source: upload:prep.py, target: prep.py}]
    compute: {gpus: 1, time_limit: 5m}
  train:
    array: 4
    after: [{step: preprocess}]
    work: {command: echo train}
    compute: {gpus: 1, time_limit: 5m}
  evaluate:
    after: [{step: train, when: succeeded}, {job: 3}]
    work: {command: echo evaluate}
    compute: {gpus: 1, time_limit: 5m}
"""
QUOTE = {"worst_case": "0.10", "gpus": 1, "time_limit": "5m", "by_model": [],
         "spend_limit": {"limit": "100.00", "spent": "0", "committed": "0", "left": "100.00", "fits": True}}


class Server:
    """``POST /jobs/``: a quote for a dry run, else a job (or an array for ``array: N``) with the next ids;
    ``refuse``: step name -> (status, body) for that step's real submit (or its dry run with ``dry``)."""

    def __init__(self, fake_api, *, refuse: dict[str, tuple[int, dict]] | None = None, dry: bool = False,
                 quote: dict | None = None):
        self.specs: list[dict] = []  # the real submits' specs, in order
        self.dry_runs: list[dict] = []
        self.next_id, self.next_array = 10, 1
        self.refuse, self.dry, self.quote = refuse or {}, dry, quote or QUOTE
        fake_api.on("POST", "/jobs/", self)

    def __call__(self, request):
        spec = submitted_spec(request)
        step = spec["name"].split("-", 1)[-1]
        if request.url.params.get("dry_run"):
            self.dry_runs.append(spec)
            if self.dry and step in self.refuse:
                return json_response(*self.refuse[step])
            return json_response(200, self.quote)
        if step in self.refuse:
            return json_response(*self.refuse[step])
        self.specs.append(spec)
        if spec.get("array"):
            ids = list(range(self.next_id, self.next_id + spec["array"]))
            self.next_id += spec["array"]
            self.next_array += 1
            return json_response(201, {"array_id": self.next_array - 1, "name": spec["name"], "size": len(ids),
                                       "job_ids": ids, "counts": {}})
        self.next_id += 1
        return json_response(201, {"id": self.next_id - 1, "name": spec["name"], "state": "queued"})


@pytest.fixture
def pipeline_file(tmp_path) -> Path:
    (tmp_path / "prep.py").write_text("print('prep')\n")
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    return path


def test_the_steps_are_submitted_in_order_each_waiting_for_the_ids_above(fake_api, pipeline_file, capsys):
    server = Server(fake_api)
    assert main(["submit", str(pipeline_file)]) == Exit.OK
    preprocess, train, evaluate = server.specs
    assert [s["name"] for s in server.specs] == ["nightly-preprocess", "nightly-train", "nightly-evaluate"]
    assert "after" not in preprocess
    assert train["after"] == [{"job": 10}] and train["array"] == 4
    assert evaluate["after"] == [{"array": 1, "when": "succeeded"}, {"job": 3}]  # a plain job entry kept
    assert len(server.dry_runs) == 3 and all("step" not in str(d.get("after")) for d in server.dry_runs)
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in
            ("preprocess", "train", "evaluate")}
    assert "job 10" in rows["preprocess"] and "array 1, jobs 11..14" in rows["train"]
    assert "job 15" in rows["evaluate"] and "array 1 (succeeded)" in rows["evaluate"]
    first = next(c for c in fake_api.calls if not c.url.params.get("dry_run"))
    assert b'filename="prep.py"' in first.content  # the step's upload: file beside the pipeline


def test_json_and_quiet_give_every_step_s_ids(fake_api, pipeline_file, capsys):
    Server(fake_api)
    assert main(["submit", str(pipeline_file), "--json"]) == Exit.OK
    body = json.loads(capsys.readouterr().out)
    assert body["pipeline"] == "nightly"
    assert [(s["step"], s.get("job_id"), s.get("array_id")) for s in body["steps"]] == [
        ("preprocess", 10, None), ("train", None, 1), ("evaluate", 15, None)]
    Server(fake_api)
    assert main(["submit", str(pipeline_file), "-q"]) == Exit.OK
    assert capsys.readouterr().out.split() == [str(i) for i in range(10, 16)]


@pytest.mark.parametrize("after, says", [
    ("[{step: evaluate}]", "step 'evaluate' comes after 'train'"),
    ("[{step: trian}]", "no step 'trian' in this pipeline (its steps: preprocess, train, evaluate)"),
    ("[{step: train}]", "step 'train' waits for itself"),
    ("[{step: preprocess, job: 4}]", "names a step and a job or array"),
    ("[{step: preprocess, wehn: ended}]", "unknown field(s) wehn"),
])
def test_a_bad_step_reference_names_it_and_nothing_is_sent(fake_api, pipeline_file, after, says, capsys):
    pipeline_file.write_text(PIPELINE.replace("after: [{step: preprocess}]", f"after: {after}"))
    assert main(["submit", str(pipeline_file)]) == Exit.USAGE
    err = capsys.readouterr().err
    assert f"steps.train.after[0]: {says}" in err and "nothing was submitted" in err
    assert fake_api.calls == []


def test_a_missing_upload_of_any_step_is_refused_before_anything_is_sent(fake_api, pipeline_file, capsys):
    (pipeline_file.parent / "prep.py").unlink()
    assert main(["submit", str(pipeline_file)]) == Exit.USAGE
    assert "steps.preprocess" in capsys.readouterr().err and fake_api.calls == []


def test_a_step_the_dry_run_refuses_stops_the_pipeline_before_any_submit(fake_api, pipeline_file, capsys):
    server = Server(fake_api, dry=True, refuse={"evaluate": (400, {"compute.gpus": ["no node has 9 GPUs"]})})
    assert main(["submit", str(pipeline_file)]) == Exit.INVALID
    err = capsys.readouterr().err
    assert "steps.evaluate.compute.gpus: no node has 9 GPUs" in err and "nothing was submitted" in err
    assert server.specs == []


def test_steps_that_do_not_fit_the_spend_limit_together_are_refused_before_any_submit(fake_api, pipeline_file,
                                                                                       capsys):
    quote = {**QUOTE, "worst_case": "40.00", "spend_limit": {**QUOTE["spend_limit"], "left": "100.00"}}
    server = Server(fake_api, quote=quote)
    assert main(["submit", str(pipeline_file)]) == Exit.INVALID
    assert "($120.00) do not fit" in capsys.readouterr().err and server.specs == []


def test_a_refusal_midway_says_which_steps_were_submitted_and_which_were_not(fake_api, pipeline_file, capsys):
    server = Server(fake_api, refuse={"evaluate": (400, {"after[1]": ["You have no job 3."]})})
    assert main(["submit", str(pipeline_file)]) == Exit.INVALID
    err = capsys.readouterr().err
    assert "steps.evaluate:" in err and "steps.evaluate.after[1]: You have no job 3." in err
    assert "submitted before it: preprocess (job 10), train (array 1, jobs 11..14)" in err
    assert "not submitted: evaluate" in err
    assert "`e31 cancel 10`" in err and "`e31 array cancel 1`" in err
    assert len(server.specs) == 2
    Server(fake_api, refuse={"evaluate": (400, {"after[1]": ["You have no job 3."]})})
    assert main(["submit", str(pipeline_file), "--json"]) == Exit.INVALID
    error = json.loads(capsys.readouterr().out)["error"]
    assert [s["step"] for s in error["submitted"]] == ["preprocess", "train"]
    assert error["not_submitted"] == ["evaluate"] and error["submitted"][1]["job_ids"] == [11, 12, 13, 14]


def test_project_applies_to_every_step_and_wins_over_the_file(fake_api, pipeline_file):
    pipeline_file.write_text("project: from-file\n" + PIPELINE.replace(
        "    work: {command: echo train}", "    project: train-own\n    work: {command: echo train}"))
    server = Server(fake_api)
    assert main(["submit", str(pipeline_file)]) == Exit.OK
    assert [s.get("project") for s in server.specs] == ["from-file", "train-own", "from-file"]
    server = Server(fake_api)
    assert main(["submit", str(pipeline_file), "--project", "ml-team"]) == Exit.OK
    assert [s.get("project") for s in server.specs] == ["ml-team"] * 3
    assert all(d.get("project") == "ml-team" for d in server.dry_runs)


def test_the_example_pipeline_resolves_to_a_job_an_array_and_a_job_after_it(fake_api, capsys):
    server = Server(fake_api)
    example = Path(__file__).resolve().parents[2] / "examples" / "pipeline" / "pipeline.yaml"
    assert main(["submit", str(example)]) == Exit.OK
    assert [s["name"] for s in server.specs] == ["linefit-preprocess", "linefit-train", "linefit-evaluate"]
    assert server.specs[1]["after"] == [{"job": 10}]
    assert server.specs[2]["after"] == [{"array": 1, "when": "succeeded"}]


def test_price_of_a_pipeline_says_to_submit_it(fake_api, pipeline_file, capsys):
    assert main(["price", str(pipeline_file)]) == Exit.USAGE
    assert "is a pipeline" in capsys.readouterr().err


def test_watch_follows_every_step_and_exits_1_when_evaluate_was_cancelled(fake_api, pipeline_file, capsys):
    Server(fake_api)
    done = {"state": "released", "attempts": 1, "log_size": 0, "cost": "0.01"}
    fake_api.on("GET", "/jobs/10/", body={**done, "id": 10, "outcome": "succeeded"})
    fake_api.on("GET", "/arrays/1/", body={"id": 1, "size": 4, "counts": {"released": 4}})
    tasks = [{**done, "id": 11 + i, "array_index": i, "outcome": "failed" if i == 2 else "succeeded"} for i in range(4)]
    fake_api.on("GET", "/jobs/", body={"results": tasks, "next": None})
    fake_api.on("GET", "/jobs/15/", body={**done, "id": 15, "outcome": "cancelled", "status_message":
                                          "job 13 failed: its dependency can no longer be met"})
    assert main(["submit", str(pipeline_file), "--watch"]) == Exit.JOB_FAILED
    out = capsys.readouterr().out
    assert "3 of 4 tasks succeeded" in next(line for line in out.splitlines() if line.startswith("train"))
    assert "cancelled (job 13 failed: its dependency can no longer be met)" in out


def test_a_dry_run_error_names_the_after_entry_as_the_file_numbers_it(fake_api, pipeline_file, capsys):
    Server(fake_api, dry=True, refuse={"evaluate": (400, {"after[0]": ["You have no job 3."]})})
    assert main(["submit", str(pipeline_file)]) == Exit.INVALID  # the dry run sent after: [{job: 3}] alone
    assert "steps.evaluate.after[1]: You have no job 3." in capsys.readouterr().err
