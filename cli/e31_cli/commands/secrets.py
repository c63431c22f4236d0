"""``e31 secret set|ls|rm NAME``: my secrets, by name. ``set`` reads the value from standard input, so it
is never on a command line or in the shell's history; nothing ever prints a value."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ..errors import CliError, Exit
from ..output import cell, when

if TYPE_CHECKING:
    from ..context import Ctx

VALUE_MAX_BYTES = 64 * 1024  # the server's limit (SPEC §2)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``secret`` with ``set``, ``ls`` and ``rm``."""
    p = sub.add_parser("secret", parents=[common], help="set, list and delete secrets (values from stdin)",
                       description="Secrets a spec names (work.secrets, data[i].credentials). Values are "
                                   "stored encrypted and never shown again.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", parser_class=type(p))
    verbs.required = True
    s = verbs.add_parser("set", parents=[common], help="create or replace NAME; the value is read from stdin",
                         description="Read the value from standard input (one trailing newline dropped): "
                                     "`e31 secret set HF_TOKEN < token.txt` or type it and press Ctrl-D.")
    s.add_argument("name", metavar="NAME", help="[A-Z_][A-Z0-9_]*, e.g. HF_TOKEN")
    s.set_defaults(func=secret_set)
    ls = verbs.add_parser("ls", parents=[common], help="list my secrets (names and dates)")
    ls.set_defaults(func=secret_ls)
    rm = verbs.add_parser("rm", parents=[common], help="delete NAME")
    rm.add_argument("name", metavar="NAME")
    rm.set_defaults(func=secret_rm)


def read_value(stream=None) -> str:
    """The value on standard input, without one trailing newline.

    Raises:
        CliError: (exit 2) nothing was given, or more than 64 KiB.
    """
    data = (stream or sys.stdin.buffer).read(VALUE_MAX_BYTES + 2)
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise CliError("no value on standard input: `e31 secret set NAME < file`", Exit.USAGE)
    if len(data) > VALUE_MAX_BYTES:
        raise CliError("the value is larger than 64 KiB", Exit.USAGE)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError("the value is not UTF-8 text", Exit.USAGE) from None


def secret_set(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/secrets/`` with the value from stdin."""
    if sys.stdin.isatty():
        ctx.out.note(f"Type the value of {args.name}, then Ctrl-D:")
    value = read_value()
    with ctx.api() as api:
        body = api.json("POST", "/secrets/", json={"name": args.name, "value": value})
    if ctx.out.json_mode:
        ctx.out.emit(body)
    else:
        ctx.out.print(f"Secret [bold]{cell(body['name'])}[/] saved.")
    return Exit.OK


def secret_ls(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/secrets/``: names and dates."""
    rows = ctx.listing("/secrets/", empty="No secrets yet: `e31 secret set NAME < file`.")
    if rows is not None:
        ctx.out.table(["NAME", "CREATED", "UPDATED"],
                      [(cell(r["name"]), when(r["created_at"]), when(r["updated_at"])) for r in rows])
    return Exit.OK


def secret_rm(args: argparse.Namespace, ctx: Ctx) -> int:
    """``DELETE /api/v1/secrets/NAME/``."""
    with ctx.api() as api:
        api.request("DELETE", f"/secrets/{args.name}/")
    if ctx.out.json_mode:
        ctx.out.emit({"deleted": args.name})
    else:
        ctx.out.print(f"Secret {cell(args.name)} deleted.")
    return Exit.OK
