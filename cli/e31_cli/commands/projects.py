"""``e31 project ...``: my projects, their members and roles, their service tokens, and the default
project of this command line (``/api/v1/projects/``, issue 25 items 1 and 5).

- ``ls``, ``create NAME``: the projects I am in (my personal one, ``~username``, first) and a new one
  (I am its owner).
- ``members NAME``, ``add NAME USER --role ROLE``, ``role NAME USER ROLE``, ``rm NAME USER``: who is
  in it and with which role (owners and admins change them; the server decides who may).
- ``use NAME`` / ``use --clear`` (or ``use ~``): the project ``submit``, ``price`` and ``ls`` act on
  when given no ``--project``, kept in the config file beside the login (``E31_PROJECT`` overrides).
- ``token ls|create|revoke NAME ...``: tokens that act for the project with a role (for CI); a new
  key is printed once, alone on stdout, as ``e31 token create`` does.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..config import PERSONAL, config_path, save_project
from ..errors import CliError, Exit, usage
from ..output import cell, when

if TYPE_CHECKING:
    from ..context import Ctx

ROLES = ("owner", "admin", "member", "viewer")  # most rights first (SPEC §8)


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``project`` with its verbs."""
    p = sub.add_parser("project", parents=[common], help="projects: members, roles, service tokens, the default",
                       description="Projects share jobs, budgets and usage among their members (roles: owner, "
                                   "admin, member, viewer). Every user has a personal project, ~username, the "
                                   "default unless `e31 project use NAME` says otherwise.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", parser_class=type(p))
    verbs.required = True
    v = verbs.add_parser("ls", parents=[common], help="the projects I am in, with my role (the default marked)")
    v.set_defaults(func=project_ls)
    v = verbs.add_parser("create", parents=[common], help="a new project NAME; I am its owner")
    v.add_argument("name", metavar="NAME", help="lowercase letters, digits, '.', '_' or '-', e.g. ml-team")
    v.set_defaults(func=project_create)
    v = verbs.add_parser("members", parents=[common], help="the members of NAME and their roles")
    v.add_argument("name", metavar="NAME")
    v.set_defaults(func=project_members)
    v = verbs.add_parser("add", parents=[common], help="add USER to NAME with --role (owners and admins)")
    v.add_argument("name", metavar="NAME")
    v.add_argument("username", metavar="USER", help="their username (or an e-mail address one user has)")
    v.add_argument("--role", choices=ROLES, default="member", help="default: member")
    v.set_defaults(func=project_add)
    v = verbs.add_parser("role", parents=[common], help="change USER's role in NAME")
    v.add_argument("name", metavar="NAME")
    v.add_argument("username", metavar="USER")
    v.add_argument("role", metavar="ROLE", choices=ROLES, help=", ".join(ROLES))
    v.set_defaults(func=project_role)
    v = verbs.add_parser("rm", parents=[common], help="remove USER from NAME")
    v.add_argument("name", metavar="NAME")
    v.add_argument("username", metavar="USER")
    v.set_defaults(func=project_rm)
    v = verbs.add_parser("use", parents=[common], help="make NAME the default project of this command line",
                         description="Keep NAME in the config file as the project `e31 submit`, `price` and `ls` "
                                     "use when not given --project (E31_PROJECT overrides it). `--clear` or `~`: "
                                     "back to the personal project.")
    v.add_argument("name", metavar="NAME", nargs="?", help="a project I am in (see `e31 project ls`)")
    v.add_argument("--clear", action="store_true", help="forget the default: the personal project again")
    v.set_defaults(func=project_use)

    t = verbs.add_parser("token", parents=[common], help="service tokens of a project (for CI)",
                         description="A service token acts for the project with a role, not as a person; "
                                     "owners make and revoke them. A new key is shown once.")
    tverbs = t.add_subparsers(dest="token_verb", metavar="VERB", parser_class=type(p))
    tverbs.required = True
    v = tverbs.add_parser("ls", parents=[common], help="the service tokens of NAME (never a key)")
    v.add_argument("name", metavar="NAME")
    v.set_defaults(func=project_token_ls)
    v = tverbs.add_parser("create", parents=[common], help="a new token of NAME; prints its key once",
                          description="Print the new key alone on stdout (it is not shown again), e.g. "
                                      "`e31 project token create ml-team ci --role member > ci.key`.")
    v.add_argument("name", metavar="NAME")
    v.add_argument("token_name", metavar="TOKEN_NAME", help="your label for it, e.g. ci")
    v.add_argument("--role", choices=ROLES[1:], default="member", help="what it may do (default: member)")
    v.set_defaults(func=project_token_create)
    v = tverbs.add_parser("revoke", parents=[common], help="revoke the token of NAME with key prefix PREFIX")
    v.add_argument("name", metavar="NAME")
    v.add_argument("prefix", metavar="PREFIX", help="its first 8 characters, as `e31 project token ls` shows")
    v.set_defaults(func=project_token_revoke)


def _path(name: str, *rest: str) -> str:
    """``/projects/NAME/REST.../``, each part quoted (a personal project's ``~`` is kept)."""
    return "/" + "/".join(quote(part, safe="~") for part in ("projects", name, *rest)) + "/"


def _not_found(exc: CliError, what: str) -> CliError:
    """A 404 in words ("no project ml-team, or you are not in it"); other errors as they are."""
    if exc.status == 404:
        return CliError(f"{what} (`e31 project ls` lists yours)", Exit.NOT_FOUND, status=404)
    return exc


def project_ls(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/projects/``: name, my role, members; the default of this command line marked."""
    rows = ctx.listing("/projects/", empty="In no project: `e31 project create NAME` makes one.")
    if rows is None:
        return Exit.OK
    default = ctx.settings().project
    marked = any(r["name"] == default for r in rows)

    def mark(row: dict[str, Any]) -> str:
        if (default and row["name"] == default) or (not marked and row.get("personal")):
            return "[dim](default)[/]"
        return ""

    ctx.out.table(["NAME", "ROLE", "MEMBERS", ""], [
        (f"[bold]{cell(r['name'])}[/]" if mark(r) else cell(r["name"]), cell(r.get("role")), r.get("members"),
         mark(r)) for r in rows])
    if default and not marked:
        ctx.out.note(f"[yellow]The default project {cell(default)} is not one of these:[/] "
                     "`e31 project use --clear`, or another NAME.")
    return Exit.OK


def project_create(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/projects/`` ``{name}``."""
    with ctx.api() as api:
        body = api.json("POST", "/projects/", json={"name": args.name})
    if ctx.out.json_mode:
        ctx.out.emit(body)
    else:
        ctx.out.print(f"Project [bold]{cell(body.get('name', args.name))}[/] created; you are its owner. "
                      f"`e31 project add {cell(body.get('name', args.name))} USER --role member` adds someone.")
    return Exit.OK


def project_members(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/projects/NAME/members/``."""
    try:
        rows = ctx.listing(_path(args.name, "members"), empty=f"Project {cell(args.name)} has no members.")
    except CliError as exc:
        raise _not_found(exc, f"no project {args.name}, or you are not in it") from None
    if rows is not None:
        ctx.out.table(["USER", "ROLE"], [(cell(r["username"]), cell(r["role"])) for r in rows])
    return Exit.OK


def _member_call(ctx: Ctx, method: str, path: str, body: dict[str, Any] | None, *, what: str) -> dict[str, Any]:
    with ctx.api() as api:
        try:
            resp = api.request(method, path, json=body)
        except CliError as exc:
            raise _not_found(exc, what) from None
    if resp.status_code == 204 or not resp.content:
        return {}
    try:
        return resp.json()
    except ValueError:
        return {}


def project_add(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/projects/NAME/members/`` ``{username, role}``."""
    body = _member_call(ctx, "POST", _path(args.name, "members"), {"username": args.username, "role": args.role},
                        what=f"no project {args.name}, or you are not in it")
    if ctx.out.json_mode:
        ctx.out.emit(body or {"project": args.name, "username": args.username, "role": args.role})
    else:
        ctx.out.print(f"{cell(args.username)} is now {cell(body.get('role', args.role))} of {cell(args.name)}.")
    return Exit.OK


def project_role(args: argparse.Namespace, ctx: Ctx) -> int:
    """``PATCH /api/v1/projects/NAME/members/USER/`` ``{role}``."""
    body = _member_call(ctx, "PATCH", _path(args.name, "members", args.username), {"role": args.role},
                        what=f"no member {args.username} of project {args.name}, or you are not in it")
    if ctx.out.json_mode:
        ctx.out.emit(body or {"project": args.name, "username": args.username, "role": args.role})
    else:
        ctx.out.print(f"{cell(args.username)} is now {cell(body.get('role', args.role))} of {cell(args.name)}.")
    return Exit.OK


def project_rm(args: argparse.Namespace, ctx: Ctx) -> int:
    """``DELETE /api/v1/projects/NAME/members/USER/``."""
    _member_call(ctx, "DELETE", _path(args.name, "members", args.username), None,
                 what=f"no member {args.username} of project {args.name}, or you are not in it")
    if ctx.out.json_mode:
        ctx.out.emit({"project": args.name, "removed": args.username})
    else:
        ctx.out.print(f"{cell(args.username)} removed from {cell(args.name)}.")
    return Exit.OK


def project_use(args: argparse.Namespace, ctx: Ctx) -> int:
    """Keep the default project in the config file (checked against ``GET /api/v1/projects/``);
    ``--clear``, ``~`` or my personal project's name: forget it.

    Raises:
        CliError: (exit 2) neither NAME nor ``--clear``; (exit 6) I am in no project NAME.
    """
    if args.clear == bool(args.name):
        raise usage("give a project NAME, or --clear (or ~) for the personal project")
    name = "" if args.clear or args.name.strip() == PERSONAL else args.name.strip()
    role = None
    if name:
        with ctx.api() as api:
            rows = api.json("GET", "/projects/").get("results", [])
        row = next((r for r in rows if r["name"] == name), None)
        if row is None:
            raise CliError(f"you are in no project {name} (`e31 project ls` lists yours)", Exit.NOT_FOUND)
        if row.get("personal"):
            name = ""
        role = row.get("role")
    path = config_path()
    try:
        save_project(path, name)
    except OSError as exc:
        raise usage(f"cannot write {path}: {exc}") from None
    if ctx.out.json_mode:
        ctx.out.emit({"project": name or None, "config": str(path)})
        return Exit.OK
    if name:
        ctx.out.print(f"Default project: [bold]{cell(name)}[/] (you are {cell(role)}); `e31 submit` and `e31 ls` "
                      "act on it unless given --project.")
        if role == "viewer":
            ctx.out.note("[yellow]A viewer cannot submit:[/] submits to it will be refused.")
    else:
        ctx.out.print("Default project: your personal one.")
    if ctx.settings().project_from == "env":
        ctx.out.note("[yellow]Note:[/] E31_PROJECT is set in this shell and takes precedence.")
    return Exit.OK


def project_token_ls(args: argparse.Namespace, ctx: Ctx) -> int:
    """``GET /api/v1/projects/NAME/tokens/``: never a key."""
    try:
        rows = ctx.listing(_path(args.name, "tokens"),
                           empty=f"No service tokens: `e31 project token create {cell(args.name)} ci` makes one.")
    except CliError as exc:
        raise _not_found(exc, f"no project {args.name}, or you are not in it") from None
    if rows is not None:
        ctx.out.table(["NAME", "KEY", "ROLE", "CREATED", "LAST USED"], [
            (cell(r["name"]), cell(f"{r['prefix']}…"), cell(r.get("role")), when(r.get("created_at")),
             when(r.get("last_used_at")) or "never") for r in rows])
    return Exit.OK


def project_token_create(args: argparse.Namespace, ctx: Ctx) -> int:
    """``POST /api/v1/projects/NAME/tokens/`` ``{name, role}``: the key on stdout, once."""
    with ctx.api() as api:
        try:
            body = api.json("POST", _path(args.name, "tokens"), json={"name": args.token_name, "role": args.role})
        except CliError as exc:
            raise _not_found(exc, f"no project {args.name}, or you are not in it") from None
    if ctx.out.json_mode:
        ctx.out.emit(body)
        return Exit.OK
    ctx.out.note(f"Service token {cell(body.get('name', args.token_name))} of {cell(args.name)} created, acting as "
                 f"{cell(body.get('role', args.role))}. Its key, shown this once (`e31 login URL --token KEY` "
                 "or E31_TOKEN uses it):")
    ctx.out.print(cell(body["key"]))
    return Exit.OK


def project_token_revoke(args: argparse.Namespace, ctx: Ctx) -> int:
    """``DELETE /api/v1/projects/NAME/tokens/PREFIX/``: it stops working at once."""
    with ctx.api() as api:
        try:
            api.request("DELETE", _path(args.name, "tokens", args.prefix))
        except CliError as exc:
            raise _not_found(exc, f"no token {args.prefix} of project {args.name}") from None
    if ctx.out.json_mode:
        ctx.out.emit({"project": args.name, "revoked": args.prefix})
    else:
        ctx.out.print(f"Service token {cell(args.prefix)}… of {cell(args.name)} revoked.")
    return Exit.OK
