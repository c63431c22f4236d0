"""What a command gets besides its arguments (:class:`Ctx`): built by :mod:`e31_cli.main`, taken
by every module of :mod:`e31_cli.commands`, so that neither imports the other for it."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from .client import Api
from .config import Settings, require, resolve
from .output import Out


@dataclass
class Ctx:
    """What a command gets besides its arguments: the printer and the way to the API."""

    args: argparse.Namespace
    out: Out

    def settings(self) -> Settings:
        """URL and token in force (option > environment > config file)."""
        return resolve(url_option=getattr(self.args, "url", None))

    def api(self) -> Api:
        """A client for the configured server.

        Raises:
            CliError: (exit 2) no URL or token configured.
        """
        return Api(require(self.settings()))

    def listing(self, path: str, *, empty: str) -> list[dict] | None:
        """The first page of ``GET path`` (its ``results``) for a command to print as a table, or
        None when nothing is left to print: in ``--json`` mode the rows were emitted; with no rows,
        ``empty`` was printed as a note.

        Raises:
            CliError: as :meth:`api` and the request do.
        """
        with self.api() as api:
            rows = api.json("GET", path).get("results", [])
        if self.out.json_mode:
            self.out.emit(rows)
            return None
        if not rows:
            self.out.note(empty)
            return None
        return rows
