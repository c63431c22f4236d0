"""The command line."""

from pathlib import Path

import pytest
from e31_agent.cli import parse_args


def test_it_reads_the_documented_options(tmp_path: Path):
    args = parse_args(
        ["--server", "http://x", "--token", "t", "--simulate", "4xH100-80GB",
         "--workdir", str(tmp_path), "--log-level", "debug"]
    )  # fmt: skip
    assert (args.server, args.token, args.simulate) == ("http://x", "t", "4xH100-80GB")
    assert args.workdir == tmp_path and args.log_level == "DEBUG"


def test_the_token_may_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("E31_NODE_TOKEN", "from-env")
    assert parse_args(["--server", "http://x"]).token == "from-env"


@pytest.mark.parametrize(
    "argv",
    [
        ["--server", "http://x"],
        ["--server", "http://x", "--token", "t", "--simulate", "lots of GPUs"],
    ],
)
def test_it_refuses_bad_command_lines(argv, monkeypatch, capsys):
    monkeypatch.delenv("E31_NODE_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2


def test_the_token_may_come_from_a_file_and_jobs_from_a_named_user(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("E31_NODE_TOKEN", raising=False)
    token = tmp_path / "token"
    token.write_text("from-file\n")
    token.chmod(0o600)
    args = parse_args(["--server", "http://x", "--token-file", str(token), "--job-user", "nobody",
                       "--retry-max", "5"])  # fmt: skip
    assert (args.token, args.job_user, args.retry_max) == ("from-file", "nobody", 5.0)
    with pytest.raises(SystemExit):
        parse_args(["--server", "http://x", "--token-file", str(tmp_path / "missing")])
