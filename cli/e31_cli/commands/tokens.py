"""``e31 token create NAME|ls|revoke ID``: my API tokens (``/api/v1/account/tokens/``, issue 28).

``create`` prints the new key once, alone on stdout (``e31 token create ci > ci.key``), the rest on
stderr; the server keeps only its hash, so no command can show it again. ``ls`` shows each token's
first 8 characters and marks the one this command line is using.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..errors import CliError, Exit
from ..output import cell, when

if TYPE_CHECKING:
    from ..context import Ctx

PREFIX_LEN = 8  # characters of a key the server keeps and shows (SPEC §7)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``token`` with ``create``, ``ls`` and ``revoke``."""
    p = sub.add_parser("token", parents=[common], help="create, list and revoke API tokens",
                       description="API tokens of your account, as on the site's Settings page. A new "
                                   "token's key is shown once: the server keeps only its hash.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", parser_class=type(p))
    verbs.required = True
    c = verbs.add_parser("create", parents=[common], help="a new token named NAME; prints its key once",
                         description="Print the new key alone on stdout (save it: it is not shown again), "
                                     "e.g. `e31 token create ci > ci.key`; "
                                     "`e31 login URL --token KEY` uses it elsewhere.")
    c.add_argument("name", metavar="NAME", help="your label for it, e.g. laptop or CI (at most 100 characters)")
    c.set_defaults(func=token_create)
    ls = verbs.add_parser("ls", parents=[common], help="list my tokens (name, first 8 characters, dates)")
    ls.set_defaults(func=token_ls)
    rv = verbs.add_parser("revoke", parents=[common], help="revoke token ID at once (see `e31 token ls`)")
    rv.add_argument("token_id", metavar="ID", type=int)
    rv.set_defaults(func=token_revoke)


def _in_use_prefix(ctx: Ctx) -> str:
    """The first characters of the key this command line sends ("" when none is configured)."""
    return (ctx.settings().token or "")[:PREFIX_LEN]


def token_create(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/account/tokens/`` ``{name}``: the key on stdout, once."""
    with ctx.api() as api:
        body = api.json("POST", "/account/tokens/", json={"name": args.name})
    if ctx.out.json_mode:
        ctx.out.emit(body)
        return Exit.OK
    ctx.out.note(f"Token [bold]{body['id']}[/] {cell(body['name'])} created. Its key, shown this once "
                 "(only its first 8 characters are kept):")
    ctx.out.print(body["key"])  # hex: no markup to escape
    return Exit.OK


def token_ls(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/account/tokens/``: never a key."""
    rows = ctx.listing("/account/tokens/", empty="No API tokens: `e31 token create NAME` makes one.")
    if rows is None:
        return Exit.OK
    mine = _in_use_prefix(ctx)
    ctx.out.table(["ID", "NAME", "KEY", "CREATED", "LAST USED", ""], [
        (r["id"], cell(r["name"]), cell(f"{r['prefix']}…"), when(r["created_at"]),
         when(r.get("last_used_at")) or "never", "[dim](this one)[/]" if mine and r["prefix"] == mine else "")
        for r in rows])
    return Exit.OK


def token_revoke(args: argparse.Namespace, ctx: Ctx) -> int:
    """``DELETE /api/v1/account/tokens/ID/``: the token stops working at once.

    Raises:
        CliError: (exit 6) I have no token ``ID``.
    """
    with ctx.api() as api:
        listed = {r["id"]: r for r in api.json("GET", "/account/tokens/").get("results", [])}
        try:
            api.request("DELETE", f"/account/tokens/{args.token_id}/")
        except CliError as exc:
            if exc.status == 404:
                raise CliError(f"you have no token {args.token_id} (`e31 token ls` lists yours)",
                               Exit.NOT_FOUND, status=404) from None
            raise
    token: dict[str, Any] = listed.get(args.token_id) or {}
    if ctx.out.json_mode:
        ctx.out.emit({"revoked": args.token_id})
        return Exit.OK
    name = f" {cell(token['name'])}" if token.get("name") else ""
    ctx.out.print(f"Token {args.token_id}{name} revoked.")
    if token.get("prefix") and token["prefix"] == _in_use_prefix(ctx):
        ctx.out.note("[yellow]That was the token this command line uses:[/] `e31 login` with another one.")
    return Exit.OK
