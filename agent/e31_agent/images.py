"""Pulling a job's container image before its command starts (issue 23, SPEC §6).

The pull is a step of its own, after the inputs are staged and before the launch, so a missing
image, a refused login or an unreachable registry fails the attempt within seconds with the
registry's own words ("image pull failed: unauthorized: authentication required"), never a
retry loop inside ``run``.

An image the node's store holds is a cache shared by every tenant, so holding it is no right to run
it (the image's layers are the owner's private code and weights, as an input's bytes are: issue 23
finding 1). A job runs a held image without asking the registry only when this agent has seen the
registry let the same login pull it, or let anyone pull it anonymously (a public image)
(:class:`PullRecord`, kept in the agent's memory, never on disk); otherwise the pull is made with the
job's own login, and for a held image the registry then sends only the manifest (the layers are
found in the store), so a login that may not read the repository fails as a first pull would.
Kubernetes closes the same hole with the ``AlwaysPullImages`` admission plugin and KEP-2535
("Ensure secret pulled images"), which records the credentials each image was pulled with.

``work.image_credentials`` gives a registry login ``{"username", "password"}``; it goes to the
runtime in an auth file (podman's ``--authfile``, docker's ``DOCKER_CONFIG``) of mode 0600 on a
memory file system (``/dev/shm`` where there is one), removed as soon as the pull ends: never the
agent's disk, never a command line. A registry served over plain HTTP is refused (the runtime
verifies TLS) unless its ``host:port`` is in ``E31_INSECURE_REGISTRIES`` (comma-separated,
loopback addresses only: a test registry or a local mirror).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from e31_protocol.inputs import image_identity

log = logging.getLogger(__name__)

PULL_TIMEOUT_S = 3600.0  # a pull that has not ended by then fails the attempt
INSECURE_ENV = "E31_INSECURE_REGISTRIES"
_MEMORY_DIR = Path("/dev/shm")


class ImagePullError(Exception):
    """The image could not be pulled; ``str()`` is the reason shown to the user."""


def image_registry(image: str) -> str:
    """The registry ``host[:port]`` of an image reference (``docker.io`` when it names none)."""
    first, sep, _rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def _loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 or registry.endswith("]") else registry
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def insecure_registries(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The plain-HTTP registries the operator allows (``E31_INSECURE_REGISTRIES``), loopback only;
    any other entry is ignored with a warning."""
    raw = (os.environ if environ is None else environ).get(INSECURE_ENV, "")
    allowed = set()
    for entry in (e.strip() for e in raw.split(",")):
        if not entry:
            continue
        if _loopback(entry):
            allowed.add(entry)
        else:
            log.warning("%s: %s is not a loopback registry; ignored", INSECURE_ENV, entry)
    return frozenset(allowed)


def pull_reason(stderr: str) -> str:
    """The registry's words from a runtime's failed pull: its last ``Error:`` line, shortened to
    the last two ``: ``-separated parts ("unauthorized: authentication required")."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith(("error:", "error response"))]
    line = (errors or lines or ["the runtime said nothing"])[-1]
    line = line.split(":", 1)[1].strip() if line.lower().startswith("error:") else line
    parts = [p for p in line.split(": ") if p]
    while len(parts) > 1 and parts[-1] == parts[-2]:  # "manifest unknown: manifest unknown"
        parts.pop()
    return ": ".join(parts[-2:])[:300] if parts else line[:300]


def registry_login(text: str | None) -> dict[str, str] | None:
    """The ``{"username", "password"}`` of a ``work.image_credentials`` secret's value, or None when
    it is not one (the server checks it at submit; a secret changed since is caught here)."""
    try:
        login = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(login, dict) or not all(isinstance(login.get(k), str) and login[k]
                                              for k in ("username", "password")):
        return None
    return {"username": login["username"], "password": login["password"]}


def _auth_json(registry: str, login: Mapping[str, str]) -> str:
    token = base64.b64encode(f"{login['username']}:{login['password']}".encode()).decode()
    return json.dumps({"auths": {registry: {"auth": token}}})


def _memory_dir(fallback: Path) -> Path:
    return _MEMORY_DIR if _MEMORY_DIR.is_dir() and os.access(_MEMORY_DIR, os.W_OK) else fallback


class PullRecord:
    """The logins this agent has seen a registry accept for each image since it started: memory only.

    A login is kept as an HMAC-SHA256 under a key drawn when the record is made (never the password,
    never a hash a dump of the disk could be guessed from); ``None`` stands for an anonymous pull,
    which makes the image public: every job may run it. Thread-safe (jobs stage in threads).
    """

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._lock = threading.Lock()
        self._seen: dict[str, set[bytes | None]] = {}
        self.pulls = 0  # pulls recorded so far (the heartbeat's image list is made again after one)

    def _id(self, image: str, login: Mapping[str, str] | None) -> bytes | None:
        if login is None:
            return None
        text = "\0".join((image_registry(image), login["username"], login["password"]))
        return hmac.new(self._key, text.encode(), hashlib.sha256).digest()

    def allows(self, image: str, login: Mapping[str, str] | None) -> bool:
        """True when the registry let ``login`` (None: anyone) pull ``image``, or let anyone."""
        with self._lock:
            seen = self._seen.get(image, set())
            return None in seen or self._id(image, login) in seen

    def add(self, image: str, login: Mapping[str, str] | None) -> None:
        """Remember that the registry let ``login`` (None: anonymous) pull ``image``."""
        with self._lock:
            self._seen.setdefault(image, set()).add(self._id(image, login))
            self.pulls += 1


PULLED = PullRecord()  # this agent process's record (one node's image store)


def image_present(runtime: str, image: str, *, timeout_s: float = 30.0) -> bool:
    """True when ``runtime``'s store already holds ``image`` (nothing to pull)."""
    argv = [runtime, "image", "exists", image] if runtime == "podman" else [runtime, "image", "inspect", image]
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def held_images(runtime: str, *, timeout_s: float = 30.0) -> list[str]:
    """The references (``repository:tag``) ``runtime``'s store holds, as the runtime names them
    (podman: ``docker.io/library/busybox:latest``); empty when it cannot say."""
    argv = [runtime, "images", "--format", "{{.Repository}}:{{.Tag}}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [] if done.returncode != 0 else [line.strip() for line in done.stdout.splitlines()
                                            if line.strip() and "<none>" not in line]


class HeldList:
    """The image identities (:func:`e31_protocol.inputs.image_identity`) of what the store holds, for
    the heartbeat's ``cached_inputs`` (the server prefers a node holding a job's image). Listed again
    after this agent pulled anything, else every ``ttl_s`` seconds (an image the operator removed or
    loaded by hand), so a heartbeat rarely runs the runtime."""

    def __init__(self, runtime: str | None, *, ttl_s: float = 300.0) -> None:
        self.runtime, self.ttl_s = runtime, ttl_s
        self._at, self._pulls, self._ids = -math.inf, -1, []

    def identities(self) -> list[str]:
        if self.runtime is None:
            return []
        if PULLED.pulls != self._pulls or time.monotonic() - self._at >= self.ttl_s:
            self._pulls, self._at = PULLED.pulls, time.monotonic()
            self._ids = [i for i in map(image_identity, held_images(self.runtime)) if i]
        return self._ids


def pull_unless_entitled(runtime: str, image: str, *, login: Mapping[str, str] | None, scratch_dir: Path,
                         announce: Callable[[str], None]) -> None:
    """Make ``image`` ready to run for a job with ``login`` (None: anonymous): nothing when the store
    holds it and :data:`PULLED` says the registry let this login, or anyone, pull it; else
    ``announce`` the words of what is done ("pulling image REF", or "checking access to image REF"
    for a held one) and pull it with ``login`` (for a held image the registry sends the manifest
    only), then record that the registry let it.

    Raises:
        ImagePullError: the registry refused or the pull failed (its reason in the message).
    """
    held = image_present(runtime, image)
    if held and PULLED.allows(image, login):
        return
    announce(f"{'checking access to' if held else 'pulling'} image {image}")
    pull(runtime, image, login=login, scratch_dir=scratch_dir)
    PULLED.add(image, login)


def pull(runtime: str, image: str, *, login: Mapping[str, str] | None, scratch_dir: Path,
         timeout_s: float = PULL_TIMEOUT_S, insecure: frozenset[str] | None = None) -> None:
    """Pull ``image`` with ``runtime`` (``podman`` or ``docker``; the caller first asks
    :func:`image_present`). ``login``: the registry login, or None (anonymous); ``scratch_dir``:
    where the auth file goes when the node has no ``/dev/shm``.

    Raises:
        ImagePullError: the pull failed or timed out (the registry's reason in the message).
    """
    registry = image_registry(image)
    allowed = insecure_registries() if insecure is None else insecure
    argv = [runtime, "pull", "--quiet"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(scratch_dir)}
    if runtime == "podman" and registry in allowed:
        argv.append("--tls-verify=false")
    with tempfile.TemporaryDirectory(dir=_memory_dir(scratch_dir), prefix="e31-pull-") as tmp:
        os.chmod(tmp, 0o700)
        # anonymous (no login): an empty one, so the node's own logins are never used
        auth = Path(tmp, "config.json" if runtime == "docker" else "auth.json")
        fd = os.open(auth, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(_auth_json(registry, login) if login else json.dumps({"auths": {}}))
        if runtime == "docker":
            env["DOCKER_CONFIG"] = tmp
        else:
            argv += ["--authfile", str(auth)]
        try:
            done = subprocess.run([*argv, image], capture_output=True, text=True, env=env,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ImagePullError(f"image pull failed: no answer in {timeout_s:.0f} s") from None
        except OSError as exc:
            raise ImagePullError(f"image pull failed: {exc}") from None
    if done.returncode != 0:
        log.warning("pull of %s failed: %s", image, done.stderr.strip()[-500:])
        raise ImagePullError(f"image pull failed: {pull_reason(done.stderr)}")
