"""A container registry on this machine, for the image tests and ``benchmarks/image_start.py``:
Debian's ``docker-registry`` on 127.0.0.1 (with htpasswd auth when given a login), and a tiny image
built with ``buildah`` from scratch with ``busybox-static`` (never an image from the internet).

Needs ``docker-registry``, ``buildah``, ``busybox`` and, for a login, ``htpasswd`` (apache2-utils).
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from devstack import free_port

APPLETS = ("sh", "echo", "id", "cat", "sleep", "true")
TOOLS = ("docker-registry", "buildah", "busybox")


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=120)


@contextmanager
def serve_registry(root: Path, *, login: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run a registry storing under ``root`` until the block ends; yields its ``host:port``.
    ``login``: ``{"username", "password"}`` it then requires of every pull and push (None: none).

    Raises:
        RuntimeError: it did not listen within 5 s.
    """
    port = free_port()
    auth = ""
    if login is not None:
        hashed = _run("htpasswd", "-Bbn", login["username"], login["password"]).stdout
        (root / "htpasswd").write_text(hashed)
        auth = f"auth:\n  htpasswd:\n    realm: e31\n    path: {root}/htpasswd\n"
    (root / "config.yml").write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root}/data\n"
                                     f"http:\n  addr: 127.0.0.1:{port}\n{auth}")
    server = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("docker-registry did not listen within 5 s")
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


def push_busybox_image(scratch: Path, ref: str, *, login: Mapping[str, str] | None = None) -> None:
    """Build an image of busybox's applets (:data:`APPLETS`, world-readable: jobs run as a slot user)
    from scratch under ``scratch`` and push it as ``ref`` (``host:port/name:tag``, plain HTTP) with
    ``login``; the local copy is removed, so the node's store does not hold it."""
    rootfs = scratch / "rootfs" / "bin"
    rootfs.mkdir(parents=True)
    shutil.copy(shutil.which("busybox") or "/bin/busybox", rootfs / "busybox")
    for applet in APPLETS:
        (rootfs / applet).symlink_to("busybox")
    for d in (rootfs.parent, rootfs):
        d.chmod(0o755)
    local = f"localhost/e31-busy-{abs(hash(ref)) % 10**8}:1"
    box = _run("buildah", "from", "scratch").stdout.strip()
    try:
        _run("buildah", "copy", box, str(rootfs.parent), "/")
        _run("buildah", "commit", "-q", box, local)
    finally:
        _run("buildah", "rm", box)
    creds = ["--creds", f"{login['username']}:{login['password']}"] if login else []
    _run("buildah", "push", "--tls-verify=false", *creds, local, f"docker://{ref}")
    _run("buildah", "rmi", local)
