"""The secrets a job spec names (issue 23, SPEC §2): checked at submit, opened for the assignment.

``work.secrets: [NAME, ...]`` puts each of the owner's secrets into the job's environment;
``data[i].credentials: NAME`` names a secret holding the JSON of the fsspec storage options the
agent reads that one source with; ``work.image_credentials: NAME`` one holding the registry login
``{"username", "password"}`` the image is pulled with. The spec holds the names only; values are opened here, for the
submit's checks and for the node holding the attempt (:mod:`apps.agent_api.selectors`), nowhere else.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from apps.secrets.crypto import SecretsKeyError
from apps.secrets.services import secret_names_known, secret_values

from .spec import JobSpec

# fsspec storage options a data[i].credentials secret may hold, per scheme (s3fs.S3FileSystem and
# gcsfs.GCSFileSystem keywords); anything else is refused, so a secret cannot switch a source to
# the node's own identity (e.g. ``anon: false`` with no key) or load a file from the node's disk.
S3_OPTIONS = frozenset({"key", "secret", "token", "endpoint_url", "region_name"})
GS_SERVICE_ACCOUNT = frozenset({"type", "private_key", "client_email"})  # required in a service-account JSON


def credentials_problem(source: str, text: str) -> str | None:
    """Why ``text`` is not usable credentials for ``source`` (never quoting the value), or None.

    s3: a JSON object of :data:`S3_OPTIONS`, with ``key`` and ``secret`` (strings); gs: a
    service-account JSON (``type: service_account``, ``private_key``, ``client_email``).
    """
    try:
        options = json.loads(text)
    except ValueError:
        return "The secret is not JSON: it must be a JSON object of storage options."
    if not isinstance(options, dict) or not options:
        return "The secret must be a JSON object of storage options."
    if source.startswith("s3://"):
        unknown = sorted(set(options) - S3_OPTIONS)
        if unknown:
            return f"Unknown s3 option(s) {', '.join(map(str, unknown))[:200]}: use {', '.join(sorted(S3_OPTIONS))}."
        if not all(isinstance(options.get(k), str) and options.get(k) for k in ("key", "secret")):
            return "An s3 credentials secret needs \"key\" and \"secret\" (strings)."
        if any(not isinstance(v, str) for v in options.values()):
            return "Every s3 option must be a string."
        return None
    if source.startswith("gs://"):
        if options.get("type") != "service_account" or not all(
                isinstance(options.get(k), str) and options.get(k) for k in GS_SERVICE_ACCOUNT):
            return "A gs credentials secret must be a service-account JSON (type, private_key, client_email)."
        return None
    return "Credentials apply to s3:// and gs:// sources only."


def image_credentials_problem(text: str) -> str | None:
    """Why ``text`` is not a registry login (never quoting the value), or None: a JSON object with
    ``username`` and ``password`` (non-empty strings) and nothing else."""
    try:
        login = json.loads(text)
    except ValueError:
        return 'The secret is not JSON: it must be {"username": ..., "password": ...}.'
    if not isinstance(login, dict) or set(login) != {"username", "password"} \
            or not all(isinstance(v, str) and v for v in login.values()):
        return 'An image credentials secret must be {"username": ..., "password": ...} (strings), nothing else.'
    return None


def secret_ref_errors(spec: JobSpec, *, owner_id: int, project_id: int | None = None) -> dict[str, list[str]]:
    """Field errors of the secrets ``spec`` names for ``owner_id``: unknown names
    (``work.secrets[i]``, ``data[i].credentials``) and malformed credentials (``data[i].credentials``).
    A stranger's secret of the same name is unknown: only the owner's own and those of the job's
    project ``project_id`` are looked up."""
    image_login = spec.work.image_credentials
    names = set(spec.work.secrets) | {item.credentials for item in spec.data if item.credentials} \
        | ({image_login} if image_login else set())
    if not names:
        return {}
    known = secret_names_known(owner_id=owner_id, names=names, project_id=project_id)
    errors: dict[str, list[str]] = {}
    for index, name in enumerate(spec.work.secrets):
        if name not in known:
            errors[f"work.secrets[{index}]"] = [f"You have no secret named {name}: set it first "
                                                "(Settings, Secrets; or `e31 secret set`)."]
    wanted = {item.credentials for item in spec.data if item.credentials in known} \
        | ({image_login} if image_login in known else set())
    try:
        values = secret_values(owner_id=owner_id, names=wanted, project_id=project_id) if wanted else {}
    except SecretsKeyError:
        values = {}  # the site's key was replaced: each such secret must be set again
    for index, item in enumerate(spec.data):
        if not item.credentials:
            continue
        if item.credentials not in known:
            errors[f"data[{index}].credentials"] = [f"You have no secret named {item.credentials}: set it first."]
            continue
        if item.credentials not in values:
            errors[f"data[{index}].credentials"] = [f"Secret {item.credentials} cannot be opened (the site's "
                                                    "secrets key changed): set it again."]
            continue
        problem = credentials_problem(item.source, values[item.credentials])
        if problem:
            errors[f"data[{index}].credentials"] = [problem]
    if image_login:
        if image_login not in known:
            errors["work.image_credentials"] = [f"You have no secret named {image_login}: set it first."]
        elif image_login not in values:
            errors["work.image_credentials"] = [f"Secret {image_login} cannot be opened (the site's secrets key "
                                                "changed): set it again."]
        elif problem := image_credentials_problem(values[image_login]):
            errors["work.image_credentials"] = [problem]
    return errors


def spec_secret_names(spec: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(work.secrets, credentials names)`` of a stored spec (JSON form), in order, each once: the
    credentials are ``work.image_credentials`` then each ``data[i].credentials``."""
    env_names = [str(n) for n in (spec.get("work") or {}).get("secrets") or []]
    cred_names: list[str] = []
    image_login = (spec.get("work") or {}).get("image_credentials")
    if image_login:
        cred_names.append(str(image_login))
    for item in spec.get("data") or []:
        name = item.get("credentials")
        if name and name not in cred_names:
            cred_names.append(str(name))
    return env_names, cred_names


def job_secrets_open(*, owner_id: int, spec: Mapping[str, Any],
                     project_id: int | None = None) -> tuple[dict[str, str], dict[str, str], str | None]:
    """The values a job's attempt is started with: ``(env secrets, credentials secrets, refused)``:
    its owner's own secrets and its project's (``project_id``), the owner's winning on a name both have.

    ``refused``: why the attempt cannot start, or None: a secret the owner no longer has (deleted
    since the submit: "secret HF_TOKEN was deleted before the job started"), or one no key opens (the
    site's secrets key was replaced). The attempt then fails at its start, unbilled, with that reason
    (the agent reports ``start_failed`` at once).
    """
    env_names, cred_names = spec_secret_names(spec)
    if not env_names and not cred_names:
        return {}, {}, None
    names = list(dict.fromkeys([*env_names, *cred_names]))
    try:
        values = secret_values(owner_id=owner_id, names=names, project_id=project_id)
    except SecretsKeyError:  # the node's poll goes on; this attempt cannot start
        return {}, {}, (f"secret{'s' if len(names) > 1 else ''} {', '.join(names)} cannot be opened "
                        "(the site's secrets key changed): set them again")
    missing = [n for n in names if n not in values]
    if missing:
        return {}, {}, (f"secret{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                        f"{'were' if len(missing) > 1 else 'was'} deleted before the job started")
    return {n: values[n] for n in env_names}, {n: values[n] for n in cred_names}, None
