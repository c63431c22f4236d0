"""A job spec file (``job.yaml``) and the files it attaches.

A spec names a file to attach as ``data[i].source: upload:<file name>``; ``e31`` looks for
that file beside the spec (the spec's own directory) and sends it with the submit, as the
API's multipart form does (``spec`` + ``files``). ``upload:<id>`` of a file uploaded earlier
(a UUID with no such file beside the spec) is left to the server.

``--project`` and the default project (``e31 project use``) are written into the spec as its
top-level ``project`` by :func:`with_project` before it is sent.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from .config import PERSONAL
from .errors import usage

UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class SpecFile:
    """The spec's text (sent as is: the server validates it) and the files to attach,
    ``(name, path)`` in the order the spec lists them; ``document``: the text parsed (None when
    it is not YAML: the server says why)."""

    path: Path
    text: str
    attachments: list[tuple[str, Path]]
    document: Any = None


def read_spec(path: str | Path) -> SpecFile:
    """Read ``path`` and find its ``upload:`` files beside it.

    A spec that is not valid YAML is still sent (the server says what is wrong with it,
    field by field); only what ``e31`` itself must read is checked here.

    Raises:
        CliError: (usage, exit 2) the spec cannot be read, or an ``upload:`` file is not beside it.
    """
    spec_path = Path(path)
    try:
        text = spec_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise usage(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise usage(f"cannot read {path}: {exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        document = None  # the server answers with the parse error
    return SpecFile(spec_path, text, attachments_of(document, spec_path.resolve().parent), document)


def project_for(document: Any, *, option: str | None, default: str) -> str | None:
    """The ``project`` a spec is submitted to: ``option`` (``--project``) wins over the spec's own
    ``project``, which wins over ``default`` (``e31 project use``, ``E31_PROJECT``). ``""``: the
    personal project (``--project ~``); None: leave the spec as it is."""
    if option is not None:
        return "" if option.strip() == PERSONAL else option.strip()
    if isinstance(document, dict) and "project" in document:
        return None
    return default or None


def with_project(spec: SpecFile, *, option: str | None, default: str) -> SpecFile:
    """``spec`` with its top-level ``project`` set as :func:`project_for` says (removed for the
    personal project); unchanged when nothing is to be set or the text is not a YAML mapping."""
    project = project_for(spec.document, option=option, default=default)
    if project is None or not isinstance(spec.document, dict) or spec.document.get("project") == (project or None):
        return spec
    document = {k: v for k, v in spec.document.items() if k != "project"}
    if project:
        document = {"name": document.pop("name"), "project": project, **document} if "name" in document \
            else {"project": project, **document}
    return replace(spec, text=yaml.safe_dump(document, sort_keys=False, allow_unicode=True), document=document)


def attachments_of(document: Any, folder: Path) -> list[tuple[str, Path]]:
    """``(name, path)`` of every ``upload:<name>`` in ``document['data']`` found in ``folder``.

    Raises:
        CliError: (usage, exit 2) naming ``data[i].source`` when the file is not there.
    """
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        return []
    found: list[tuple[str, Path]] = []
    for i, item in enumerate(data):
        source = item.get("source") if isinstance(item, dict) else None
        if not isinstance(source, str) or not source.startswith("upload:"):
            continue
        name = source[len("upload:"):]
        candidate = folder / name
        if name and "/" not in name and "\\" not in name and name not in (".", "..") and candidate.is_file():
            if name not in (n for n, _ in found):
                found.append((name, candidate))
        elif UUID.match(name):
            continue  # an earlier upload, by id
        elif "/" in name or "\\" in name:
            raise usage(f"data[{i}].source: {source}: an upload is named by its file name alone "
                        "(a file beside the spec), not a path")
        else:
            raise usage(f"data[{i}].source: {source}: no file {name!r} beside {folder}")
    return found
