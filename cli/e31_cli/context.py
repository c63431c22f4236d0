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
