"""A private registry for the image tests (issue 23 item 4): Debian's ``docker-registry`` behind
htpasswd on 127.0.0.1, holding ``e31/busy:1``, an image built here with ``buildah`` from
``busybox-static`` (never an image from the internet; :mod:`devstack.registry`), and a public one."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from devstack.registry import TOOLS as BUILD_TOOLS
from devstack.registry import push_busybox_image, serve_registry

from .test_agent import assignment

LOGIN = {"username": "alice", "password": "pw-for-the-registry-9"}
TOOLS = ("podman", "runc", "htpasswd", *BUILD_TOOLS)


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """``host:port`` of a registry that wants LOGIN, holding ``e31/busy:1`` (busybox's sh)."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        pytest.fail(f"the image tests need {', '.join(missing)} (.ci/run installs them)")
    root = tmp_path_factory.mktemp("registry")
    with serve_registry(root, login=LOGIN) as address:
        try:
            push_busybox_image(root, f"{address}/e31/busy:1", login=LOGIN)
            yield address
        finally:
            subprocess.run(["podman", "rmi", "-f", f"{address}/e31/busy:1"], capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def public_registry(tmp_path_factory):
    """``host:port`` of a second registry, with no login, holding ``e31/pub:1`` (the same busybox
    image); the node's store does not hold it at the start."""
    root = tmp_path_factory.mktemp("public-registry")
    with serve_registry(root) as address:
        try:
            push_busybox_image(root, f"{address}/e31/pub:1")
            yield address
        finally:
            subprocess.run(["podman", "rmi", "-f", f"{address}/e31/pub:1"], capture_output=True, timeout=60)


def image_job(job_id: int, image: str, *, login: bool, command: str = "id -u > uid.txt; echo inside > out.txt",
              **kw) -> dict:
    """An assignment of ``command`` in ``image`` (``login``: with LOGIN as its image credentials)."""
    kw.setdefault("outputs", ["out.txt", "uid.txt"])
    job = assignment(job_id, command, **kw)
    job["spec"]["work"]["image"] = image
    if login:
        job["spec"]["work"]["image_credentials"] = "REGISTRY"
        job["credentials"] = {"REGISTRY": json.dumps(LOGIN)}
    return job


