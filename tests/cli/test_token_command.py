"""``e31 token create|ls|revoke`` against a stand-in API (tests/cli/fake_api.py): what each sends, what
it prints, and that a key is printed by ``create`` only."""
from __future__ import annotations

import json

import pytest
from e31_cli.errors import Exit
from e31_cli.main import build_parser, main

from tests.cli.fake_api import json_response

KEY = "f00dfeed" + "1" * 32
IN_USE = "01234567"  # the first 8 characters of the token FakeApi.install configures
TOKENS = [
    {"id": 12, "name": "laptop", "prefix": IN_USE, "created_at": "2026-12-01T10:00:00Z",
     "last_used_at": "2026-12-06T09:30:00Z"},
    {"id": 9, "name": "ci", "prefix": "abcdef12", "created_at": "2026-11-01T10:00:00Z", "last_used_at": None},
]


def test_create_posts_the_name_and_prints_the_key_alone_on_stdout(fake_api, capsys):
    fake_api.on("POST", "/account/tokens/", status=201, body={
        "id": 13, "name": "ci runner", "prefix": KEY[:8], "created_at": "2026-12-07T02:00:00Z", "key": KEY})
    assert main(["token", "create", "ci runner"]) == Exit.OK
    assert json.loads(fake_api.calls[0].content) == {"name": "ci runner"}
    out, err = capsys.readouterr()
    assert out == KEY + "\n"
    assert "Token 13 ci runner created" in err and "shown this once" in err


def test_create_with_json_gives_the_whole_answer(fake_api, capsys):
    body = {"id": 13, "name": "ci", "prefix": KEY[:8], "created_at": "2026-12-07T02:00:00Z", "key": KEY}
    fake_api.on("POST", "/account/tokens/", status=201, body=body)
    assert main(["token", "create", "ci", "--json"]) == Exit.OK
    assert json.loads(capsys.readouterr().out) == body


def test_a_refused_name_names_the_field_and_exits_4(fake_api, capsys):
    fake_api.on("POST", "/account/tokens/", status=400, body={"name": ["Ensure this field has no more than 100 "
                                                                 "characters."]})
    assert main(["token", "create", "x" * 101]) == Exit.INVALID
    err = capsys.readouterr().err
    assert "name" in err and "100 characters" in err


def test_ls_shows_prefixes_and_dates_marks_the_token_in_use_and_never_a_key(fake_api, capsys):
    fake_api.on("GET", "/account/tokens/", body={"results": TOKENS})
    assert main(["token", "ls"]) == Exit.OK
    out = capsys.readouterr().out
    lines = out.splitlines()
    laptop = next(line for line in lines if "laptop" in line)
    ci = next(line for line in lines if " ci " in line)
    assert f"{IN_USE}…" in laptop and "(this one)" in laptop and "2026-12-0" in laptop
    assert "abcdef12…" in ci and "never" in ci and "(this one)" not in ci
    assert "0123456789abcdef0123456789abcdef01234567" not in out


def test_ls_without_tokens_says_how_to_make_one(fake_api, capsys):
    fake_api.on("GET", "/account/tokens/", body={"results": []})
    assert main(["token", "ls"]) == Exit.OK
    assert "e31 token create NAME" in capsys.readouterr().err


def test_ls_with_json_is_the_list(fake_api, capsys):
    fake_api.on("GET", "/account/tokens/", body={"results": TOKENS})
    assert main(["--json", "token", "ls"]) == Exit.OK
    assert json.loads(capsys.readouterr().out) == TOKENS


def test_revoke_deletes_the_id_and_names_the_token(fake_api, capsys):
    fake_api.on("GET", "/account/tokens/", body={"results": TOKENS})
    fake_api.on("DELETE", "/account/tokens/9/", lambda _r: json_response(204))
    assert main(["token", "revoke", "9"]) == Exit.OK
    assert [(c.method, c.url.path) for c in fake_api.calls][-1] == ("DELETE", "/api/v1/account/tokens/9/")
    out, err = capsys.readouterr()
    assert "Token 9 ci revoked." in out and "this command line uses" not in err


def test_revoking_the_token_in_use_says_to_log_in_again(fake_api, capsys):
    fake_api.on("GET", "/account/tokens/", body={"results": TOKENS})
    fake_api.on("DELETE", "/account/tokens/12/", lambda _r: json_response(204))
    assert main(["token", "revoke", "12"]) == Exit.OK
    assert "e31 login" in capsys.readouterr().err


def test_revoking_a_token_not_mine_exits_6_naming_it(fake_api, capsys):
    fake_api.on("GET", "/account/tokens/", body={"results": TOKENS})
    assert main(["token", "revoke", "777"]) == Exit.NOT_FOUND  # the fake answers 404 for any other id
    assert "you have no token 777" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["token"], "required: VERB"),
    (["token", "create"], "required: NAME"),
    (["token", "revoke", "laptop"], "invalid int value"),
    (["token", "show", "1"], "invalid choice"),
])
def test_argument_errors_exit_2(argv, says, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("E31_CONFIG_DIR", str(tmp_path / "config"))
    assert main(argv) == Exit.USAGE
    assert says in capsys.readouterr().err


def test_the_verbs_parse():
    assert build_parser().parse_args(["token", "create", "laptop"]).name == "laptop"
    assert build_parser().parse_args(["token", "revoke", "5"]).token_id == 5
    assert build_parser().parse_args(["token", "ls"]).verb == "ls"
