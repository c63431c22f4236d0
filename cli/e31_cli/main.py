"""``e31``: the entry point. Builds the argument parser from the command modules, runs one
command, and turns every :class:`~e31_cli.errors.CliError` into a message and an exit code."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from . import __version__
from .commands import arrays, auth, get, jobs, logs, projects, secrets, tokens, usage
from .context import Ctx
from .errors import CliError, Exit
from .output import Out

EPILOG = """\
exit codes:
  0 success (status, submit --watch: the job succeeded)   1 the job ended without success
  2 usage error                  3 the job has not ended yet / no bundle yet
  4 request refused (400...)     5 authentication refused (401/403)
  6 not found (404)              7 server unreachable        8 server error (5xx)
  9 checksum mismatch            130 interrupted

configuration: `e31 login` saves the URL and token (mode 0600) in $E31_CONFIG_DIR,
$XDG_CONFIG_HOME/e31 or ~/.config/e31; E31_URL and E31_TOKEN override it; --url overrides both.
`e31 project use NAME` keeps a default project there (E31_PROJECT overrides it; --project beats both).
"""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a :class:`CliError` (exit 2, JSON with ``--json``)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CliError(f"{message} (see `{self.prog} --help`)", Exit.USAGE)


def build_parser() -> Parser:
    """The whole command line: global options and one subcommand per module function."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON document (errors too) instead of tables")
    common.add_argument("--url", default=argparse.SUPPRESS,
                        help="server URL, e.g. http://127.0.0.1:8031 (overrides E31_URL and the saved login)")
    parser = Parser(prog="e31", description="E31 Network from the command line: submit GPU jobs, follow "
                    "their logs, fetch and verify their outputs.", epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"e31 {__version__}")
    parser.add_argument("--json", action="store_true", default=False, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for module in (auth, jobs, arrays, logs, get, usage, projects, secrets, tokens):
        module.register(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``e31`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Out(json_mode="--json" in argv)
    try:
        args = build_parser().parse_args(argv)
        out = Out(json_mode=args.json)
        return int(args.func(args, Ctx(args, out)))
    except CliError as exc:
        out.error(exc)
        return int(exc.code)
    except KeyboardInterrupt:
        out.note("[yellow]interrupted[/] (a job being followed goes on; `e31 cancel ID` stops it)")
        return int(Exit.INTERRUPTED)
    except BrokenPipeError:  # `e31 logs 7 | head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(Exit.OK)

