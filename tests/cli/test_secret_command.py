"""``e31 secret`` without a server: the value comes from standard input only, and the verbs parse."""
from __future__ import annotations

import io

import pytest
from e31_cli.commands.secrets import read_value
from e31_cli.errors import CliError, Exit
from e31_cli.main import build_parser


@pytest.mark.parametrize("given,value", [
    (b"hf_abc\n", "hf_abc"), (b"hf_abc\r\n", "hf_abc"), (b"hf_abc", "hf_abc"),
    (b"line one\nline two\n", "line one\nline two"), (b'{"key": "k"}\n', '{"key": "k"}'),
])
def test_the_value_is_read_from_stdin_without_one_trailing_newline(given, value):
    assert read_value(io.BytesIO(given)) == value


@pytest.mark.parametrize("given,says", [
    (b"", "no value"), (b"\n", "no value"), (b"x" * (64 * 1024 + 1), "64 KiB"), (b"\xff\xfe", "UTF-8"),
])
def test_a_missing_huge_or_binary_value_is_a_usage_error(given, says):
    with pytest.raises(CliError) as err:
        read_value(io.BytesIO(given))
    assert err.value.code == Exit.USAGE and says in str(err.value)


def test_set_takes_a_name_and_no_value_argument():
    args = build_parser().parse_args(["secret", "set", "HF_TOKEN"])
    assert (args.verb, args.name) == ("set", "HF_TOKEN")
    with pytest.raises(CliError):  # a value on the command line would be in the shell's history
        build_parser().parse_args(["secret", "set", "HF_TOKEN", "hf_value"])
    assert build_parser().parse_args(["secret", "ls"]).verb == "ls"
    assert build_parser().parse_args(["secret", "rm", "HF_TOKEN"]).name == "HF_TOKEN"
