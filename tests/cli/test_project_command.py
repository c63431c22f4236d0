"""``e31 project ...``, ``--project`` and the default project, against a stand-in API (tests/cli/fake_api.py):
what each command sends, what it prints, where the default is kept and what wins over what."""
from __future__ import annotations

import json

import pytest
from e31_cli.config import config_path
from e31_cli.errors import Exit
from e31_cli.main import main

from tests.cli.fake_api import json_response, submitted_spec

PROJECTS = [{"name": "~alice", "role": "owner", "personal": True, "members": 1},
            {"name": "ml-team", "role": "admin", "personal": False, "members": 3},
            {"name": "vision", "role": "viewer", "personal": False, "members": 5}]
SPEC = "name: hello\nwork: {command: echo hi}\ncompute: {gpus: 1, time_limit: 5m}\n"
JOB = {"id": 5, "name": "hello", "state": "queued", "outcome": None}


def submits(fake_api) -> list[dict]:
    return [submitted_spec(c) for c in fake_api.calls if c.method == "POST" and c.url.path == "/api/v1/jobs/"]


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    return path


def test_ls_shows_name_role_members_and_marks_the_personal_project_as_default(fake_api, capsys):
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    assert main(["project", "ls"]) == Exit.OK
    lines = capsys.readouterr().out.splitlines()
    personal = next(line for line in lines if "~alice" in line)
    team = next(line for line in lines if "ml-team" in line)
    assert "owner" in personal and "(default)" in personal
    assert "admin" in team and " 3 " in f"{team} " and "(default)" not in team


def test_ls_with_json_is_the_list(fake_api, capsys):
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    assert main(["project", "ls", "--json"]) == Exit.OK
    assert json.loads(capsys.readouterr().out) == PROJECTS


def test_create_posts_the_name(fake_api, capsys):
    fake_api.on("POST", "/projects/", status=201,
                body={"name": "ml-team", "role": "owner", "personal": False, "members": 1})
    assert main(["project", "create", "ml-team"]) == Exit.OK
    assert json.loads(fake_api.calls[0].content) == {"name": "ml-team"}
    assert "Project ml-team created; you are its owner" in capsys.readouterr().out


def test_a_refused_name_names_the_field_and_exits_4(fake_api, capsys):
    fake_api.on("POST", "/projects/", status=400, body={"name": ["A project with this name already exists."]})
    assert main(["project", "create", "ml-team"]) == Exit.INVALID
    assert "name: A project with this name already exists." in capsys.readouterr().err


def test_members_add_role_and_rm_call_the_member_endpoints(fake_api, capsys):
    fake_api.on("GET", "/projects/ml-team/members/",
                body={"results": [{"username": "alice", "role": "owner"}, {"username": "bob", "role": "member"}]})
    fake_api.on("POST", "/projects/ml-team/members/", status=201, body={"username": "carol", "role": "viewer"})
    fake_api.on("PATCH", "/projects/ml-team/members/carol/", body={"username": "carol", "role": "admin"})
    fake_api.on("DELETE", "/projects/ml-team/members/carol/", lambda _r: json_response(204))
    assert main(["project", "members", "ml-team"]) == Exit.OK
    assert "bob" in capsys.readouterr().out
    assert main(["project", "add", "ml-team", "carol", "--role", "viewer"]) == Exit.OK
    assert json.loads(fake_api.calls[-1].content) == {"username": "carol", "role": "viewer"}
    assert "carol is now viewer of ml-team." in capsys.readouterr().out
    assert main(["project", "role", "ml-team", "carol", "admin"]) == Exit.OK
    assert (fake_api.calls[-1].method, json.loads(fake_api.calls[-1].content)) == ("PATCH", {"role": "admin"})
    assert main(["project", "rm", "ml-team", "carol"]) == Exit.OK
    assert fake_api.calls[-1].method == "DELETE"
    assert "carol removed from ml-team." in capsys.readouterr().out


def test_a_project_i_am_not_in_is_exit_6_in_words_and_a_refusal_says_why(fake_api, capsys):
    assert main(["project", "members", "secret-team"]) == Exit.NOT_FOUND  # the fake answers 404
    assert "no project secret-team, or you are not in it" in capsys.readouterr().err
    fake_api.on("POST", "/projects/vision/members/", status=403,
                body={"detail": "A viewer cannot change the members."})
    assert main(["project", "add", "vision", "dave"]) == Exit.AUTH
    assert "A viewer cannot change the members" in capsys.readouterr().err


def test_use_keeps_the_default_in_the_config_file_and_clear_forgets_it(fake_api, capsys):
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    assert main(["project", "use", "ml-team"]) == Exit.OK
    assert json.loads(config_path().read_text()) == {"project": "ml-team"}  # URL and token come from the env here
    assert "Default project: ml-team" in capsys.readouterr().out
    assert main(["project", "ls"]) == Exit.OK
    assert "(default)" in next(line for line in capsys.readouterr().out.splitlines() if "ml-team" in line)
    assert main(["project", "use", "~"]) == Exit.OK
    assert json.loads(config_path().read_text()) == {}
    assert main(["project", "use", "ml-team"]) == Exit.OK
    assert main(["project", "use", "--clear"]) == Exit.OK
    assert "project" not in json.loads(config_path().read_text())


def test_use_keeps_the_saved_login_and_login_keeps_the_default(fake_api, monkeypatch, capsys):
    from e31_cli import context
    from e31_cli.commands import auth
    from e31_cli.config import save_file

    monkeypatch.setattr(auth, "Api", context.Api)  # login's own check goes to the fake too
    save_file(config_path(), url="http://fake.test", token="saved-token")
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    assert main(["project", "use", "ml-team"]) == Exit.OK
    assert json.loads(config_path().read_text()) == {"url": "http://fake.test", "token": "saved-token",
                                                     "project": "ml-team"}
    fake_api.on("GET", "/pool/", body=[])
    assert main(["login", "http://fake.test", "--token", "new-token"]) == Exit.OK
    assert json.loads(config_path().read_text())["project"] == "ml-team"


def test_use_refuses_a_project_i_am_not_in_and_warns_a_viewer(fake_api, capsys):
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    assert main(["project", "use", "nope"]) == Exit.NOT_FOUND
    assert "you are in no project nope" in capsys.readouterr().err
    assert not config_path().exists()
    assert main(["project", "use", "vision"]) == Exit.OK
    assert "A viewer cannot submit" in capsys.readouterr().err
    assert main(["project", "use"]) == Exit.USAGE


def test_use_of_my_personal_project_by_name_is_the_personal_default(fake_api):
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    assert main(["project", "use", "~alice"]) == Exit.OK
    assert "project" not in json.loads(config_path().read_text())


def test_token_ls_create_and_revoke(fake_api, capsys):
    key = "feedf00d" + "2" * 32
    fake_api.on("GET", "/projects/ml-team/tokens/", body={"results": [
        {"name": "ci", "prefix": "abcdef12", "role": "member", "created_at": "2026-12-01T10:00:00Z",
         "last_used_at": None}]})
    fake_api.on("POST", "/projects/ml-team/tokens/", status=201, body={
        "name": "ci", "prefix": key[:8], "role": "member", "created_at": "2026-12-07T02:00:00Z",
        "last_used_at": None, "key": key})
    fake_api.on("DELETE", "/projects/ml-team/tokens/abcdef12/", lambda _r: json_response(204))
    assert main(["project", "token", "ls", "ml-team"]) == Exit.OK
    line = next(line for line in capsys.readouterr().out.splitlines() if "ci" in line)
    assert "abcdef12…" in line and "member" in line and "never" in line
    assert main(["project", "token", "create", "ml-team", "ci", "--role", "member"]) == Exit.OK
    assert json.loads(fake_api.calls[-1].content) == {"name": "ci", "role": "member"}
    out, err = capsys.readouterr()
    assert out == key + "\n" and "shown this once" in err
    assert main(["project", "token", "revoke", "ml-team", "abcdef12"]) == Exit.OK
    assert fake_api.calls[-1].method == "DELETE"
    assert "revoked" in capsys.readouterr().out


def test_submit_project_sets_the_spec_s_project(fake_api, spec_file):
    fake_api.on("POST", "/jobs/", status=201, body=JOB)
    assert main(["submit", str(spec_file), "--project", "ml-team"]) == Exit.OK
    assert submits(fake_api)[-1]["project"] == "ml-team"


def test_the_flag_wins_over_the_file_which_wins_over_the_default(fake_api, spec_file, monkeypatch):
    fake_api.on("POST", "/jobs/", status=201, body=JOB)
    spec_file.write_text(SPEC + "project: from-file\n")
    monkeypatch.setenv("E31_PROJECT", "from-default")
    assert main(["submit", str(spec_file), "--project", "from-flag"]) == Exit.OK
    assert main(["submit", str(spec_file)]) == Exit.OK
    assert main(["submit", str(spec_file), "--project", "~"]) == Exit.OK
    flag, file, personal = submits(fake_api)
    assert (flag["project"], file["project"], "project" in personal) == ("from-flag", "from-file", False)


def test_the_default_project_applies_when_neither_flag_nor_file_names_one(fake_api, spec_file):
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    quote = {"worst_case": "0.10", "gpus": 1, "time_limit": "5m", "by_model": [], "spend_limit": {"limit": None}}
    fake_api.on("POST", "/jobs/", lambda r: json_response(200, quote) if r.url.params.get("dry_run")
                else json_response(201, JOB))
    assert main(["project", "use", "ml-team"]) == Exit.OK
    assert main(["submit", str(spec_file)]) == Exit.OK
    assert main(["price", str(spec_file)]) == Exit.OK
    sent = submits(fake_api)
    assert sent[0]["project"] == "ml-team" and sent[0]["name"] == "hello"
    assert fake_api.calls[-1].url.params["dry_run"] == "1" and sent[1]["project"] == "ml-team"


def test_a_spec_without_a_project_is_sent_as_written(fake_api, spec_file):
    fake_api.on("POST", "/jobs/", status=201, body=JOB)
    assert main(["submit", str(spec_file)]) == Exit.OK
    from urllib.parse import parse_qs

    assert parse_qs(fake_api.calls[-1].content.decode())["spec"] == [SPEC]  # byte for byte: nothing to change


def test_ls_project_lists_the_project_s_jobs_with_their_owners(fake_api, capsys):
    jobs = [{"id": 9, "name": "train", "state": "running", "outcome": None, "owner": "bob", "project": "ml-team",
             "submitted_at": "2026-12-07T02:00:00Z", "spec": {"compute": {"gpus": 2}}, "cost": "0.5"}]
    fake_api.on("GET", "/jobs/", body={"results": jobs, "next": None})
    assert main(["ls", "--project", "ml-team"]) == Exit.OK
    assert fake_api.calls[-1].url.params["project"] == "ml-team"
    out = capsys.readouterr().out
    assert "OWNER" in out and "bob" in next(line for line in out.splitlines() if "train" in line)
    fake_api.on("GET", "/projects/", body={"results": PROJECTS})
    assert main(["ls", "--project", "~"]) == Exit.OK
    assert fake_api.calls[-1].url.params["project"] == "~alice"  # the personal project's name, asked for


def test_ls_without_a_project_shows_project_and_owner_only_when_a_team_s_job_is_listed(fake_api, capsys):
    job = {"id": 9, "name": "mine", "state": "queued", "outcome": None, "owner": "alice", "project": "~alice",
           "submitted_at": "2026-12-07T02:00:00Z", "spec": {"compute": {"gpus": 1}}}
    fake_api.on("GET", "/jobs/", body={"results": [job], "next": None})
    assert main(["ls"]) == Exit.OK
    assert "project" not in fake_api.calls[-1].url.params and "OWNER" not in capsys.readouterr().out
    fake_api.on("GET", "/jobs/", body={"results": [job, {**job, "id": 8, "owner": "bob", "project": "ml-team"}],
                                       "next": None})
    assert main(["ls"]) == Exit.OK
    out = capsys.readouterr().out
    assert "PROJECT" in out and "OWNER" in out and "bob" in out
