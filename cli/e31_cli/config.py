"""Where ``e31`` finds the server and the token.

Precedence, highest first: the ``--url`` option (URL only), the environment
(``E31_URL``, ``E31_TOKEN``), then the file ``e31 login`` wrote:
``$E31_CONFIG_DIR/config.json``, else ``$XDG_CONFIG_HOME/e31/config.json``,
else ``~/.config/e31/config.json`` (``%APPDATA%\\e31`` on Windows). The file
is written with mode 0600 in a 0700 directory: it holds an API token.

The same file keeps the default project ``e31 project use NAME`` chose (``"project"``), which
``E31_PROJECT`` overrides; none (or ``~``): the personal project.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .errors import usage

FILE_NAME = "config.json"
KEYS = ("url", "token", "project")  # what the file may hold
PERSONAL = "~"  # a project option or default that means "my personal project"


@dataclass(frozen=True)
class Settings:
    """The server base URL (no trailing slash) and API token, with where each came from
    (``"option"``, ``"env"``, ``"file"`` or ``""`` when unset), and the default project
    (``""``: the personal one) with where it came from (``"env"``, ``"file"`` or ``""``)."""

    url: str
    token: str
    url_from: str
    token_from: str
    project: str = ""
    project_from: str = ""


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The directory of the config file (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if env.get("E31_CONFIG_DIR"):
        return Path(env["E31_CONFIG_DIR"])
    if os.name == "nt" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "e31"
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "e31"


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The config file ``e31 login`` writes."""
    return config_dir(environ) / FILE_NAME


def load_file(path: Path) -> dict[str, str]:
    """The saved ``{"url", "token", "project"}`` (those present); empty when there is no file.

    Raises:
        CliError: (usage, exit 2) the file exists but is not a JSON object.
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise usage(f"cannot read {path}: {exc}; run `e31 login` again") from None
    if not isinstance(data, dict):
        raise usage(f"{path} is not a JSON object; run `e31 login` again")
    return {k: str(v) for k, v in data.items() if k in KEYS and v}


def save_file(path: Path, *, url: str, token: str, project: str = "") -> None:
    """Write ``{"url", "token", "project"}`` (those not empty) to ``path``, mode 0600 from the first
    byte in a 0700 directory (an existing directory open to others is narrowed to 0700), replacing
    the old file atomically.

    The bytes go to a fresh temporary file in the same directory, created with ``O_EXCL``
    (``tempfile.mkstemp``: a link planted at any name there is never followed), then renamed over
    ``path`` (issue 26 item 7: a symlink at ``config.json.tmp`` redirected the token).

    Raises:
        OSError: the directory or the file cannot be written.
    """
    directory = path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name != "nt" and stat.S_IMODE(directory.stat().st_mode) & 0o077:
        directory.chmod(0o700)  # a 0777 dir would let anyone swap the file under us
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")  # 0600, O_EXCL
    try:
        try:
            data = {k: v for k, v in (("url", url), ("token", token), ("project", project)) if v}
            os.write(fd, (json.dumps(data, indent=1) + "\n").encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def normalize_url(url: str) -> str:
    """``url`` checked and without trailing slashes or a trailing ``/api/v1``.

    Raises:
        CliError: (usage, exit 2) not an http(s) URL with a host.
    """
    url = url.strip().rstrip("/")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise usage(f"URL {url!r} is not an http:// or https:// address, e.g. http://127.0.0.1:8031")
    return url


def resolve(*, url_option: str | None = None, environ: Mapping[str, str] | None = None,
            path: Path | None = None) -> Settings:
    """The settings in force: option over environment over file.

    Raises:
        CliError: (usage, exit 2) a URL that is not http(s), or an unreadable config file.
    """
    env = os.environ if environ is None else environ
    saved = load_file(path or config_path(env))
    url, url_from = "", ""
    for value, source in ((url_option, "option"), (env.get("E31_URL"), "env"), (saved.get("url"), "file")):
        if value:
            url, url_from = normalize_url(value), source
            break
    token, token_from = "", ""
    for value, source in ((env.get("E31_TOKEN"), "env"), (saved.get("token"), "file")):
        if value:
            token, token_from = value.strip(), source
            break
    project, project_from = "", ""
    for value, source in ((env.get("E31_PROJECT"), "env"), (saved.get("project"), "file")):
        if value and value.strip():
            project, project_from = value.strip(), source
            break
    if project == PERSONAL:
        project = ""
    return Settings(url=url, token=token, url_from=url_from, token_from=token_from, project=project,
                    project_from=project_from)


def save_project(path: Path, project: str) -> None:
    """Keep ``project`` as the default in the saved file (``""``: forget it, back to personal),
    keeping the URL and token it holds (a file with no login yet holds the project alone).

    Raises:
        CliError: (usage, exit 2) the file exists but is not a JSON object.
        OSError: the file cannot be written.
    """
    saved = load_file(path)
    save_file(path, url=saved.get("url", ""), token=saved.get("token", ""), project=project)


def require(settings: Settings) -> Settings:
    """``settings`` when both the URL and the token are known.

    Raises:
        CliError: (usage, exit 2) naming what is missing and how to set it.
    """
    missing = [name for name, value in (("URL", settings.url), ("token", settings.token)) if not value]
    if missing:
        raise usage(f"no server {' or '.join(missing)} configured: run `e31 login`, "
                    "or set E31_URL and E31_TOKEN")
    return settings
