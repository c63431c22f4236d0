"""A private registry for the image tests (issue 23 item 4): Debian's ``docker-registry`` behind
htpasswd on 127.0.0.1, holding ``e31/busy:1``, an image built here with ``buildah`` from
``busybox-static`` (never an image from the internet)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time

import pytest

from .test_agent import assignment

LOGIN = {"username": "alice", "password": "pw-for-the-registry-9"}
TOOLS = ("podman", "runc", "buildah", "docker-registry", "htpasswd", "busybox")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """``host:port`` of a registry that wants LOGIN, holding ``e31/busy:1`` (busybox's sh)."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        pytest.fail(f"the image tests need {', '.join(missing)} (.ci/run installs them)")
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    (root / "htpasswd").write_text(_run("htpasswd", "-Bbn", LOGIN["username"], LOGIN["password"]).stdout)
    (root / "config.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
        f"http:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: e31\n    path: {root}/htpasswd\n")
    server = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        rootfs = root / "rootfs" / "bin"
        rootfs.mkdir(parents=True)
        shutil.copy(shutil.which("busybox"), rootfs / "busybox")
        for applet in ("sh", "echo", "id", "cat", "sleep"):
            (rootfs / applet).symlink_to("busybox")
        for d in (rootfs.parent, rootfs):
            d.chmod(0o755)  # the image runs as the slot user
        box = _run("buildah", "from", "scratch").stdout.strip()
        _run("buildah", "copy", box, f"{root}/rootfs", "/")
        _run("buildah", "commit", "-q", box, f"localhost/e31-test-busy-{port}:1")
        _run("buildah", "rm", box)
        _run("buildah", "push", "--tls-verify=false", "--creds", f"{LOGIN['username']}:{LOGIN['password']}",
             f"localhost/e31-test-busy-{port}:1", f"docker://{address}/e31/busy:1")
        _run("buildah", "rmi", f"localhost/e31-test-busy-{port}:1")
        yield address
    finally:
        subprocess.run(["podman", "rmi", "-f", f"{address}/e31/busy:1"], capture_output=True, timeout=60)
        server.terminate()
        server.wait(10)


@pytest.fixture(scope="session")
def public_registry(registry, tmp_path_factory):
    """``host:port`` of a second registry, with no login, holding ``e31/pub:1`` (the same image,
    copied from ``registry``); the node's store does not hold it at the start."""
    root = tmp_path_factory.mktemp("public-registry")
    port = _free_port()
    (root / "config.yml").write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                                     f"http:\n  addr: 127.0.0.1:{port}\n")
    server = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address, private = f"127.0.0.1:{port}", f"{registry}/e31/busy:1"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        held = subprocess.run(["podman", "image", "exists", private], capture_output=True, timeout=60).returncode == 0
        if not held:
            _run("podman", "pull", "-q", "--tls-verify=false", "--creds", f"{LOGIN['username']}:{LOGIN['password']}",
                 private)
        _run("podman", "push", "-q", "--tls-verify=false", private, f"docker://{address}/e31/pub:1")
        if not held:  # leave the store as it was
            _run("podman", "rmi", private)
        yield address
    finally:
        subprocess.run(["podman", "rmi", "-f", f"{address}/e31/pub:1"], capture_output=True, timeout=60)
        server.terminate()
        server.wait(10)


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


