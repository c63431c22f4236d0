"""``e31`` without a server: argument errors, spec files, API error bodies, archives, exit codes."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile

import httpx
import pytest
from e31_cli.client import Api, error_from, flatten_errors
from e31_cli.config import Settings
from e31_cli.download import unpack, verify
from e31_cli.errors import CliError, Exit
from e31_cli.follow import outcome_exit, poll_interval
from e31_cli.main import main
from e31_cli.specfile import read_spec


@pytest.fixture(autouse=True)
def no_login(tmp_path, monkeypatch):
    """No saved login and no E31_* variables, unless a test sets them."""
    monkeypatch.setenv("E31_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("E31_URL", raising=False)
    monkeypatch.delenv("E31_TOKEN", raising=False)


@pytest.mark.parametrize("argv, says", [
    ([], "required: COMMAND"),
    (["frobnicate"], "invalid choice"),
    (["status"], "required: ID"),
    (["status", "seven"], "invalid int value"),
    (["ls", "--limit", "many"], "invalid int value"),
    (["ls", "--state", "sleeping"], "invalid choice"),
    (["logs", "-f"], "required: ID"),
    (["get", "1", "--bogus"], "unrecognized arguments"),
])
def test_argument_errors_exit_2_with_a_message_and_no_traceback(argv, says, capsys):
    assert main(argv) == Exit.USAGE
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_with_json_an_argument_error_is_a_json_document(capsys):
    assert main(["--json", "status", "x"]) == Exit.USAGE
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == 2 and "invalid int value" in error["message"]


def test_json_is_accepted_before_and_after_the_command(capsys, tmp_path):
    for argv in (["--json", "ls"], ["ls", "--json"]):
        assert main(argv) == Exit.USAGE  # not logged in, but the flag was understood
        assert "no server URL or token" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_without_a_login_it_says_how_to_log_in(capsys):
    assert main(["ls"]) == Exit.USAGE
    assert "e31 login" in capsys.readouterr().err


def test_a_missing_spec_file_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("E31_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("E31_TOKEN", "t")
    assert main(["submit", "no/such/job.yaml"]) == Exit.USAGE
    assert "no such file" in capsys.readouterr().err


def test_an_unreachable_server_exits_7(capsys, monkeypatch):
    monkeypatch.setenv("E31_URL", "http://127.0.0.1:9")  # nothing listens on port 9
    monkeypatch.setenv("E31_TOKEN", "t")
    assert main(["status", "1"]) == Exit.NETWORK
    assert "cannot reach http://127.0.0.1:9" in capsys.readouterr().err


def test_login_without_a_token_on_stdin_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main(["login", "http://127.0.0.1:9"]) == Exit.USAGE
    assert "no token given" in capsys.readouterr().err


def test_spec_files_attach_their_uploads_from_beside_the_spec(tmp_path):
    (tmp_path / "train.py").write_text("print(1)")
    (tmp_path / "job.yaml").write_text(
        "name: t\ndata:\n - {source: 'upload:train.py', target: train.py}\n"
        " - {source: 'upload:0b9a3f52-8c1e-4a0e-9f3a-3d3c2b1a0f00', target: old.bin}\n"
        " - {source: 'https://example.org/x', target: x}\n")
    spec = read_spec(tmp_path / "job.yaml")
    assert spec.attachments == [("train.py", tmp_path / "train.py")]  # the UUID is an earlier upload


@pytest.mark.parametrize("source, says", [("upload:absent.py", "no file 'absent.py'"),
                                          ("upload:sub/x.py", "not a path")])
def test_an_upload_that_is_not_beside_the_spec_names_the_field(tmp_path, source, says):
    (tmp_path / "job.yaml").write_text(f"name: t\ndata: [{{source: '{source}', target: x}}]\n")
    with pytest.raises(CliError) as info:
        read_spec(tmp_path / "job.yaml")
    assert info.value.code == Exit.USAGE and "data[0].source" in info.value.message and says in info.value.message


def test_a_spec_that_is_not_yaml_is_left_for_the_server_to_explain(tmp_path):
    (tmp_path / "job.yaml").write_text("name: [unclosed\n")
    assert read_spec(tmp_path / "job.yaml").attachments == []


def response(status: int, body=None, text: str | None = None) -> httpx.Response:
    request = httpx.Request("GET", "http://h/api/v1/jobs/5/")
    if body is not None:
        return httpx.Response(status, json=body, request=request)
    return httpx.Response(status, text=text or "", request=request)


@pytest.mark.parametrize("status, body, code", [
    (400, {"compute.gpus": ["Must be at least 1."]}, Exit.INVALID),
    (401, {"detail": "Invalid token."}, Exit.AUTH),
    (403, {"detail": "You do not have permission."}, Exit.AUTH),
    (404, {"detail": "Not found."}, Exit.NOT_FOUND),
    (413, None, Exit.INVALID),
    (500, None, Exit.SERVER),
    (502, None, Exit.SERVER),
])
def test_http_errors_map_to_exit_codes(status, body, code):
    assert error_from(response(status, body, text="<html>bad gateway</html>")).code == code


def test_api_errors_are_kept_field_by_field():
    exc = error_from(response(400, {"compute.gpus": ["Must be at least 1."], "data": [{"source": ["Bad."]}]}))
    assert exc.fields == {"compute.gpus": ["Must be at least 1."], "data[0].source": ["Bad."]}
    assert flatten_errors({"detail": "x"}) == {"detail": ["x"]}


def test_a_non_json_answer_is_a_server_error(tmp_path):
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text="<html>a proxy page</html>"))
    with Api(Settings("http://h", "t", "option", "option"), transport=transport) as api:
        with pytest.raises(CliError) as info:
            api.job(1)
    assert info.value.code == Exit.SERVER


def archive(tmp_path, mode: str, files: dict[str, bytes], *, extra: dict[str, bytes] | None = None):
    """A bundle as the agent packs it: the files and a manifest.json."""
    manifest = {"job_id": 1, "files": [{"path": p, "size_bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                                       for p, d in files.items()]}
    path = tmp_path / f"b.{mode}"
    with tarfile.open(path, f"w:{mode}" if mode != "tar" else "w") as tar:
        for name, data in {**files, **(extra or {}), "manifest.json": json.dumps(manifest).encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path, manifest["files"]


@pytest.mark.parametrize("mode", ["tar", "gz"])
def test_plain_tar_and_tar_gz_unpack_and_verify(tmp_path, mode):
    path, files = archive(tmp_path, mode, {"out/a.txt": b"alpha", "metrics.json": b"{}"})
    unpack(path, tmp_path / "out")
    assert [f["ok"] for f in verify(tmp_path / "out", files)] == [True, True]


def test_a_changed_file_fails_verification_by_name(tmp_path):
    path, files = archive(tmp_path, "gz", {"a.txt": b"alpha", "b.txt": b"beta"})
    unpack(path, tmp_path / "out")
    (tmp_path / "out" / "b.txt").write_bytes(b"BETA")
    with pytest.raises(CliError) as info:
        verify(tmp_path / "out", files)
    assert info.value.code == Exit.VERIFY and list(info.value.fields) == ["b.txt"]


def test_an_archive_escaping_its_directory_is_refused(tmp_path):
    path, _ = archive(tmp_path, "gz", {"a.txt": b"a"}, extra={"../escape.txt": b"x"})
    with pytest.raises(CliError) as info:
        unpack(path, tmp_path / "out")
    assert info.value.code == Exit.VERIFY and not (tmp_path / "escape.txt").exists()


def test_outcomes_make_the_exit_code():
    assert outcome_exit([{"state": "released", "outcome": "succeeded"}]) == Exit.OK
    assert outcome_exit([{"state": "released", "outcome": "succeeded"},
                         {"state": "released", "outcome": "timed_out"}]) == Exit.JOB_FAILED
    assert outcome_exit([{"state": "running", "outcome": None}]) == Exit.PENDING
    assert poll_interval(0) == 0.5 and poll_interval(3600) == 3.0


def test_names_with_brackets_are_shown_as_written():
    from e31_cli.commands.jobs import _name
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(_name({"name": "sweep [bold]x[/bold]", "array_id": 3, "array_index": 1}))
    assert console.export_text().strip() == "sweep [bold]x[/bold] [array 3 #1]"
