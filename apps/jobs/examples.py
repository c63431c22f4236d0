"""The example jobs a user can start from (``examples/<name>/job.yaml``, SPEC §7).

Each example directory is flat: a ``job.yaml`` and the files it lists as
``upload:<file name>``. When a user submits an example, the files they did not
attach themselves are taken from that directory. Only plain file names that
exist directly in the example's directory are served, so a spec cannot name
``../../settings.py`` or a link pointing out of it.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.core.files import File

from apps.artifacts.models import Upload
from apps.artifacts.services import upload_create

SPEC_FILE = "job.yaml"
# A plain file name: no directory part, no leading dot (so neither "." nor "..").
PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}$")


def _root() -> Path:
    return Path(settings.E31_EXAMPLES_DIR).resolve()


def example_names() -> list[str]:
    """Names of the examples that have a ``job.yaml``, sorted (``inference``, ``processing``...)."""
    root = _root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir()
                  if PLAIN_NAME.match(p.name) and (p / SPEC_FILE).is_file())


def _example_dir(name: str) -> Path | None:
    """The directory of example ``name``, or None if there is no such example."""
    if name not in example_names():
        return None
    return _root() / name


def example_yaml(name: str) -> str | None:
    """The text of the example's ``job.yaml``, or None if there is no example ``name``."""
    folder = _example_dir(name)
    if folder is None:
        return None
    return (folder / SPEC_FILE).read_text(encoding="utf-8")


def example_file(name: str, filename: str) -> Path | None:
    """The path of ``filename`` directly inside example ``name``, or None.

    None when ``filename`` is not a plain name, is missing, is not a regular
    file, or resolves (through a link) outside the example's directory.
    """
    folder = _example_dir(name)
    if folder is None or not PLAIN_NAME.match(filename):
        return None
    path = (folder / filename).resolve()
    if path.parent != folder.resolve() or not path.is_file():
        return None
    return path


def example_files(name: str) -> list[str]:
    """The file names an example's spec references as ``upload:<name>`` and that exist."""
    text = example_yaml(name) or ""
    refs = re.findall(r"upload:([^\s'\"#]+)", text)
    return [ref for ref in dict.fromkeys(refs) if example_file(name, ref)]


def example_attachments(*, owner, name: str, refs: Iterable[str]) -> dict[str, Upload]:
    """Store the example's files named in ``refs`` as the owner's uploads.

    Args:
        owner: the user submitting the example.
        name: the example (a directory of ``E31_EXAMPLES_DIR``).
        refs: file names referenced as ``upload:<file name>`` that the user
            did not attach; names that are not files of the example are skipped
            (the spec validator then reports them).

    Returns:
        ``{file name: Upload}`` for each file taken from the example.
    """
    out: dict[str, Upload] = {}
    for ref in refs:
        path = example_file(name, ref)
        if path is None or ref in out:
            continue
        with path.open("rb") as fh:
            out[ref] = upload_create(owner=owner, name=ref, fileobj=File(fh, name=ref))
    return out
