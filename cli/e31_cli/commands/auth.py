"""``e31 login`` and ``e31 logout``: the server URL and API token in the user's config dir."""
from __future__ import annotations

import argparse
import getpass
import sys
from typing import TYPE_CHECKING

from ..client import Api
from ..config import Settings, config_path, load_file, normalize_url, save_file
from ..errors import Exit, usage
from ..output import cell

if TYPE_CHECKING:
    from ..context import Ctx

DEFAULT_URL = "http://127.0.0.1:8031"


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """Add ``login`` and ``logout``."""
    p = sub.add_parser("login", parents=[common], help="save the server URL and your API token",
                       description="Check the token against the server, then save the URL and token in "
                                   f"{config_path()} (mode 0600). The token is read from --token, else "
                                   "asked for (hidden), else read from stdin when it is not a terminal. "
                                   "Make one on the site's Settings page (API tokens), or have the operator run "
                                   "`python manage.py issue_token USER` on the server.")
    p.add_argument("server", nargs="?", metavar="URL", help=f"server URL (default: --url, E31_URL, the saved one, "
                                                            f"else {DEFAULT_URL})")
    p.add_argument("--token", help="the API token (visible in your shell history: prefer the prompt or stdin)")
    p.set_defaults(func=login)
    p = sub.add_parser("logout", parents=[common], help="forget the saved URL and token")
    p.set_defaults(func=logout)


def _read_token() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("API token: ")
    return sys.stdin.readline()


def login(args: argparse.Namespace, ctx: Ctx) -> int:
    """Check the token with one call (``GET /api/v1/pool/``), then save URL and token."""
    current = ctx.settings()
    url = normalize_url(args.server or current.url or DEFAULT_URL)
    token = (args.token if args.token is not None else _read_token()).strip()
    if not token:
        raise usage("no token given: pass --token, type it at the prompt, or pipe it on stdin")
    with Api(Settings(url=url, token=token, url_from="option", token_from="option")) as api:
        api.json("GET", "/pool/")  # 401 for a wrong token, exit 7 for an unreachable server
    path = config_path()
    saved = load_file(path)
    # The default project (`e31 project use`) names a project of that server: kept for the same URL only.
    project = saved.get("project", "") if saved.get("url") == url else ""
    save_file(path, url=url, token=token, project=project)
    if ctx.out.json_mode:
        ctx.out.emit({"url": url, "config": str(path)})
    else:
        ctx.out.note(f"Logged in to [bold]{cell(url)}[/]; URL and token saved in {cell(path)} (mode 0600).")
        if current.token_from == "env" or current.url_from == "env":
            ctx.out.note("[yellow]Note:[/] E31_URL / E31_TOKEN are set in this shell and take precedence.")
    return Exit.OK


def logout(args: argparse.Namespace, ctx: Ctx) -> int:
    """Remove the saved config file (the token itself stays valid on the server until revoked)."""
    path = config_path()
    existed = path.exists()
    path.unlink(missing_ok=True)
    if ctx.out.json_mode:
        ctx.out.emit({"config": str(path), "removed": existed})
    else:
        ctx.out.note(f"Removed {cell(path)}." if existed else "Not logged in: nothing to remove.")
    return Exit.OK
