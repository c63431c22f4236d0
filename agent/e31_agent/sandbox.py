"""The tenant sandbox every job attempt runs in (bubblewrap, slirp4netns).

What a job's command gets (docs/SPEC.md §6, docs/security.md):

- **its own uid and gid, never root**: when the agent runs as root, a *slot
  user* taken for the attempt from ``--slot-uids`` (default
  2310000-2319999; no ``/etc/passwd`` entry is needed), held by a lock file
  in ``/run/e31-agent/slots`` for as long as the attempt's shim lives, so
  no two running attempts on the host share one (also across agents); the
  job dir is handed to it. An agent that is not root runs the job as its
  own uid inside a user namespace. Either way bubblewrap drops every
  capability before the command starts and sets ``no_new_privs``, and the
  command may make no further user namespace (``--disable-userns``);
- **a mount namespace** in which, of the host's files, it sees only: its own
  job dir (read-write, at ``/job``, the working dir and ``HOME``, as in a
  container; no path of the agent's work dir shows);
  ``/usr`` and the ``/bin``, ``/lib``... links, a few files of ``/etc``
  (name service, TLS roots, time zone, ``ld.so.cache``; a ``/etc/passwd``
  with its own user), ``/sys`` and the agent's Python (the venv and the
  interpreter's install, so ``python`` and the ``examples`` extra work),
  all read-only; fresh ``/proc``, ``/dev``, ``/tmp``, ``/var/tmp`` and
  ``/dev/shm``. Nothing else of the agent: not its work dir, cache, logs,
  other jobs, the site's ``var/``, tokens or the source tree. Host paths
  are opened by the (root) shim and handed over as descriptors
  (``--bind-fd``), so the slot user needs no search right on their parents;
- **its own PID namespace** (and IPC, UTS, cgroup): no other process can be
  seen or signalled; when the command ends, everything it left is killed,
  but during a stop the job's init (:mod:`e31_agent.jobinit`) keeps the
  namespace up until every process is gone or the grace is over;
- **only the GPUs of its lease** as device nodes (``/dev/nvidiaN`` of each
  leased GPU, found by UUID in ``/proc/driver/nvidia/gpus``, plus the
  control nodes CUDA needs), ``CUDA_VISIBLE_DEVICES`` as before;
- **the network of ``work.network``**: ``none``, a network namespace with
  only loopback; ``egress`` (default), the same namespace with a slirp4netns
  user-mode stack run as the slot user (where ``/dev/net/tun`` is 0600, with a
  TUN node of that user's own: :func:`_private_tun`)
  (``--disable-host-loopback``: ``10.0.2.2`` does not lead
  to the host's ``127.0.0.1``) and, in the namespace, ``unreachable``
  routes to every address of the host, to link-local ``169.254.0.0/16``
  (the cloud metadata service), to the private networks (``10/8``,
  ``172.16/12``, ``192.168/16``, ``100.64/10``; unless the agent is started
  with ``--sandbox-allow-private``) and to ``--sandbox-deny`` networks, so
  none of the platform's services on this host or its network is reachable;
  a rank of a multi-node attempt also gets ``gang0``, on a bridge of its
  attempt alone, where only the gang's other ranks are (:mod:`e31_agent.gangnet`);
- **the environment the agent built** (:func:`e31_agent.runner.build_env`),
  which holds no secret of the platform.

The agent checks at start that it can build this (:func:`detect`) and
refuses to start otherwise, unless the operator passes
``--unsafe-no-sandbox`` (then the server marks the node).

Split: :class:`Sandbox` (the node's settings) makes a JSON *plan* per
attempt, which the agent writes into ``launch.json``; the shim turns it into
a running sandbox (:func:`prepare`, :meth:`Prepared.start_network`), since
the shim outlives the agent and holds the slot.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import random
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import gangnet, jobinit

DEFAULT_SLOT_UIDS = (2310000, 2319999)
LOCK_DIR = "/run/e31-agent/slots"
METADATA_DENY = ("169.254.0.0/16",)  # link-local: the cloud metadata service
# RFC 1918 private networks and RFC 6598 shared address space (carrier-grade NAT): the operator's
# other hosts and services. slirp4netns's own 10.0.2.0/24 stays reachable (a more specific route).
PRIVATE_DENY = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
DEFAULT_DENY = METADATA_DENY + PRIVATE_DENY
NETWORKS = ("egress", "none")
SLIRP_MTU = 65520
SLIRP_DNS = "10.0.2.3"
SLIRP_TRIES = 3
NETWORK_SETUP_TIMEOUT_S = 10.0
# files of /etc a job may read (name service, TLS roots, time zone, the loader's cache)
ETC_FILES = (
    "alternatives", "ca-certificates", "ca-certificates.conf", "gai.conf", "host.conf", "hosts", "ld.so.cache",
    "ld.so.conf", "ld.so.conf.d", "localtime", "mime.types", "nsswitch.conf", "pki", "protocols", "services",
    "ssl", "timezone", "matplotlibrc", "fonts",
)  # fmt: skip
NVIDIA_CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
PR_SET_NO_NEW_PRIVS = 38
NS_GET_USERNS = 0xB701  # ioctl on a namespace fd: the user namespace that owns it (linux/nsfs.h)
SLOT_PLACEHOLDER = "@E31_SLOT_UID@:@E31_SLOT_GID@"  # in a container runtime's argv: the slot's uid:gid
JOB_MOUNT = "/job"  # where the job dir is inside the sandbox (its working dir and HOME), as in containers
STAGE_DIR = "/run/e31-agent/stage"  # a mount point in the sandbox starter's own mount namespace
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 0x1000, 0x4000, 1 << 18, 0x2, 0x4


class SandboxError(Exception):
    """This node cannot build the sandbox (a tool is missing, user namespaces are off...)."""


@dataclass(frozen=True)
class Sandbox:
    """The node's sandbox settings (from the command line and :func:`detect`).

    ``slots``: the uid range of slot users (inclusive), set when the agent
    runs as root; ``ro_paths``: host directories bound read-only at their
    own path (the agent's Python); ``deny``: networks a job with ``egress``
    must not reach (besides the host's own addresses).
    """

    bwrap: str
    slirp4netns: str | None
    slots: tuple[int, int] | None
    ro_paths: tuple[str, ...] = ()
    deny: tuple[str, ...] = DEFAULT_DENY
    lock_dir: str = LOCK_DIR

    def plan(self, *, job_dir: Path, network: str, gpu_nodes: Sequence[str] = (),
             image: bool = False, gang_net: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON plan of one attempt's sandbox, for the shim (``launch.json["sandbox"]``).

        ``image``: the command starts a container runtime, which runs outside
        bubblewrap; the plan then only takes the slot and hands over the job dir.
        ``gang_net``: a rank of a multi-node attempt (:func:`e31_agent.gangnet.plan`): its
        sandbox also gets ``gang0`` on the gang's bridge.
        """
        if network not in NETWORKS:
            raise ValueError(f"network must be one of {', '.join(NETWORKS)}")
        return {
            "bwrap": self.bwrap, "slirp4netns": self.slirp4netns,
            "slots": list(self.slots) if self.slots else None, "lock_dir": self.lock_dir,
            "ro_paths": list(self.ro_paths), "deny": list(self.deny), "job_dir": str(job_dir),
            "network": network, "gpu_nodes": list(gpu_nodes), "wrap": not image, "gang_net": gang_net,
        }  # fmt: skip


# -- on the agent's side --------------------------------------------------------


def python_paths() -> list[str]:
    """Host directories the job needs to run the agent's ``python``: the venv (``sys.prefix``)
    and the interpreter's install (``sys.base_prefix``, links resolved), unless under ``/usr``."""
    out: list[str] = []
    for raw in (sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        path = os.path.realpath(raw)
        if path == "/usr" or path.startswith("/usr/") or path == "/":
            continue
        if os.path.basename(path) == "bin":  # the interpreter's bin dir: bind its install
            path = os.path.dirname(path)
        if not any(path == p or path.startswith(p + "/") for p in out):
            out = [p for p in out if not p.startswith(path + "/")] + [path]
    return out


def detect(*, slots: tuple[int, int] | None = DEFAULT_SLOT_UIDS, deny: Sequence[str] = DEFAULT_DENY,
           lock_dir: str = LOCK_DIR) -> Sandbox:
    """The node's :class:`Sandbox`, after a trial run of an empty sandbox (as a slot user
    when root). Raises :class:`SandboxError` saying what is missing."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError("bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    slirp = shutil.which("slirp4netns")
    if slirp is None:
        raise SandboxError("slirp4netns is not installed (jobs with network: egress need it): "
                           "apt-get install slirp4netns")
    for tool in ("nsenter", "ip"):
        if shutil.which(tool) is None:
            raise SandboxError(f"{tool} is not installed: apt-get install util-linux iproute2")
    for cidr in deny:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise SandboxError(f"--sandbox-deny: {cidr!r} is not an address or network") from None
    if os.geteuid() != 0:
        slots = None
    elif slots is not None and (slots[0] <= 0 or slots[1] < slots[0]):
        raise SandboxError("--slot-uids: must be a range FIRST-LAST of uids above 0")
    sandbox = Sandbox(bwrap=bwrap, slirp4netns=slirp, slots=slots, ro_paths=tuple(python_paths()),
                      deny=tuple(deny), lock_dir=lock_dir)
    _trial(sandbox)
    return sandbox


def _trial(sandbox: Sandbox) -> None:
    """Run ``true`` in an empty sandbox with no network; raise :class:`SandboxError` if it fails."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="e31-sandbox-trial-") as tmp:
        job_dir = Path(tmp) / "job"
        job_dir.mkdir()
        plan = sandbox.plan(job_dir=job_dir, network="none")
        try:
            prepared = prepare(plan)
        except OSError as exc:
            raise SandboxError(f"cannot take a slot user: {exc}") from None
        try:
            proc = subprocess.Popen(
                [*prepared.argv, "/bin/sh", "-c", "test -w . && test $$ -eq 3"],
                pass_fds=prepared.pass_fds, preexec_fn=prepared.preexec(stage=True), env={"PATH": "/usr/bin:/bin"},
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )
            prepared.after_fork()
            try:
                prepared.start_network(proc.pid)
            except OSError:
                pass  # bubblewrap failed before telling its pid: its output says why
            out, _ = proc.communicate(timeout=30)
        finally:
            prepared.close()
    if proc.returncode != 0:
        why = out.decode(errors="replace").strip().splitlines()
        raise SandboxError(f"bubblewrap cannot build the job sandbox here: {why[-1] if why else proc.returncode}"
                           " (are unprivileged user namespaces allowed? sysctl kernel.unprivileged_userns_clone=1,"
                           " user.max_user_namespaces > 0)")


def gpu_device_nodes(uuids: Sequence[str], indices: Sequence[int],
                     driver_dir: Path = Path("/proc/driver/nvidia/gpus")) -> list[str]:
    """The device nodes of the leased GPUs, then the control nodes CUDA needs.

    A GPU's node is ``/dev/nvidia<minor>``; the minor is read from the driver
    (``Device Minor`` by ``GPU UUID``), else taken to be the index.
    """
    minors: dict[str, int] = {}
    try:
        for info in driver_dir.glob("*/information"):
            fields = dict(line.split(":", 1) for line in info.read_text().splitlines() if ":" in line)
            uuid, minor = fields.get("GPU UUID", "").strip(), fields.get("Device Minor", "").strip()
            if uuid and minor.isdigit():
                minors[uuid] = int(minor)
    except OSError:
        pass
    nodes = []
    for i, index in enumerate(indices):
        uuid = uuids[i] if i < len(uuids) else ""
        nodes.append(f"/dev/nvidia{minors.get(uuid, index)}")
    return nodes + list(NVIDIA_CONTROL)


# -- in the shim ----------------------------------------------------------------


@dataclass
class Prepared:
    """One attempt's sandbox, ready to start: ``argv`` goes before the command."""

    plan: dict[str, Any]
    argv: list[str]
    pass_fds: list[int]
    uid: int | None = None
    gid: int | None = None
    lock_fd: int | None = None
    binds: list[tuple[str, str]] = field(default_factory=list)  # (host path, staged path): see _stage_mounts
    info_r: int | None = None
    block_w: int | None = None
    _slirp_exit_w: int | None = None
    _close_after_start: list[int] = field(default_factory=list)

    def popen_user(self) -> dict[str, Any]:
        """``subprocess.Popen`` arguments that start a helper (slirp4netns) as the slot user."""
        if self.uid is None or os.geteuid() != 0:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def preexec(self, then: Any = None, *, stage: bool = False) -> Any:
        """A ``preexec_fn``: ``then()`` (CPU set, rlimits); with ``stage``, the bind sources
        mounted in a private mount namespace (:func:`_stage_mounts`) and the switch to the slot
        user; then ``no_new_privs`` and SIGTERM ignored.

        bubblewrap's own processes ignore SIGTERM, so a stop's SIGTERM reaches the
        job's processes (the command is started through ``env --default-signal=TERM``)
        and its grace period, not the sandbox's frame (which would take the job down at once).
        """
        import ctypes
        import signal

        binds = list(self.binds) if stage else []
        uid, gid = (self.uid, self.gid) if stage else (None, None)

        def apply() -> None:
            if then is not None:
                then()
            if binds:
                _stage_mounts(binds)
            if uid is not None and gid is not None and os.geteuid() == 0:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        return apply

    def after_fork(self) -> None:
        """In the shim, once the sandbox process runs: close the descriptors handed to it."""
        for fd in self._close_after_start:
            _close(fd)
        self._close_after_start = []

    def start_network(self, child_pid: int, *, timeout_s: float = NETWORK_SETUP_TIMEOUT_S) -> subprocess.Popen | None:
        """Give the sandbox its network (``egress``: slirp4netns and the deny routes; a gang
        rank: ``gang0``), then let the command start. Returns the slirp4netns process (None for ``none``). Raises
        ``OSError`` with the reason."""
        if self.info_r is None or self.block_w is None:
            return None
        try:
            info = _read_info(self.info_r, timeout_s)
            pid = int(info["child-pid"])
            slirp = None
            if self.plan["network"] == "egress":
                self._wait_loopback(pid, timeout_s)
                for attempt in range(SLIRP_TRIES):  # slirp4netns set-up now and then fails when several start at once
                    try:
                        slirp = self._slirp(pid, timeout_s)
                        break
                    except OSError:
                        if attempt == SLIRP_TRIES - 1:
                            raise
                        time.sleep(0.05 * (attempt + 1))
                self._deny_routes(pid)
            if self.plan.get("gang_net"):
                if self.plan["network"] != "egress":
                    self._wait_loopback(pid, timeout_s)
                try:
                    gangnet.attach(pid, self.plan["gang_net"])
                except (OSError, subprocess.SubprocessError) as exc:
                    gangnet.detach(self.plan["gang_net"])
                    raise OSError(f"the gang network: {exc}") from None
            os.write(self.block_w, b"1")
            return slirp
        finally:
            _close(self.info_r)
            _close(self.block_w)
            self.info_r = self.block_w = None

    def _slirp(self, pid: int, timeout_s: float) -> subprocess.Popen:
        # as the slot user where it may open /dev/net/tun (0666 on most hosts); where the node is
        # 0600, as the slot user too, with a TUN node of its own (_private_tun), and as root only if
        # that cannot be made; with a seccomp filter. Not --enable-sandbox: started as root by several
        # shims at once it fails now and then ("setegid(0)"), and a job must not fail to start for that
        as_slot = self.uid is None or _slot_may_open_tun()
        if not as_slot:
            try:
                return self._slirp_run(pid, timeout_s, as_slot=False, own_tun=True)
            except (OSError, subprocess.SubprocessError):
                pass  # no private TUN node here (no mknod, a device cgroup...): as root, as before
        return self._slirp_run(pid, timeout_s, as_slot=as_slot, own_tun=False)

    def _slirp_run(self, pid: int, timeout_s: float, *, as_slot: bool, own_tun: bool) -> subprocess.Popen:
        """Start slirp4netns for the sandbox of ``pid``: as the slot user (``as_slot``: through
        Popen; ``own_tun``: in a private mount namespace with a TUN node it owns), else as root."""
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()  # slirp4netns ends when the shim (which holds exit_w) goes
        os.set_inheritable(exit_w, False)
        argv = [self.plan["slirp4netns"], "--configure", f"--mtu={SLIRP_MTU}", "--disable-host-loopback",
                f"--ready-fd={ready_w}", f"--exit-fd={exit_r}", "--enable-seccomp"]
        # the user namespace that owns the sandbox's network namespace: not /proc/PID/ns/user, which
        # bubblewrap replaces by a nested one (--disable-userns), from which the network could not be joined
        owner_fd = _owner_userns(pid)
        argv += [f"--userns-path=/proc/self/fd/{owner_fd}", str(pid), "tap0"]
        preexec = self._tun_preexec() if own_tun else self.preexec()
        try:
            proc = subprocess.Popen(argv, pass_fds=(ready_w, exit_r, owner_fd), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"},
                                    preexec_fn=preexec, **(self.popen_user() if as_slot else {}))
        except BaseException:
            _close(ready_r)
            _close(exit_w)
            raise
        finally:
            _close(ready_w)
            _close(exit_r)
            _close(owner_fd)
        self._slirp_exit_w = exit_w  # kept open for the shim's life
        try:
            ready, _, _ = select.select([ready_r], [], [], timeout_s)
            got = os.read(ready_r, 1) if ready else b""
        finally:
            _close(ready_r)
        if got != b"1":
            proc.kill()
            _close(exit_w)
            self._slirp_exit_w = None
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            proc.wait()
            raise OSError(f"slirp4netns did not start: {err[-600:] if err else 'no word'}")
        return proc

    def _tun_preexec(self) -> Any:
        """A ``preexec_fn`` for slirp4netns where ``/dev/net/tun`` is closed to the slot user:
        a TUN node of the slot user's own over it (:func:`_private_tun`), then the switch to the
        slot user, then :meth:`preexec`'s ``no_new_privs``."""
        uid, gid, rest = self.uid, self.gid, self.preexec()

        def apply() -> None:
            _private_tun(uid, gid)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            rest()

        return apply

    def _nsenter(self, pid: int) -> tuple[list[str], list[int]]:
        """``nsenter`` into the sandbox's network namespace (through the user namespace that owns
        it when not root), and the descriptors it needs."""
        if os.geteuid() == 0:
            return ["nsenter", f"--net=/proc/{pid}/ns/net"], []
        owner = _owner_userns(pid)
        enter = ["nsenter", f"--user=/proc/self/fd/{owner}", f"--net=/proc/{pid}/ns/net", "--preserve-credentials"]
        return enter, [owner]

    def _wait_loopback(self, pid: int, timeout_s: float) -> None:
        """Wait until bubblewrap has brought up the sandbox's loopback: slirp4netns configuring
        the namespace at the same time makes bubblewrap's netlink set-up fail."""
        end = time.monotonic() + timeout_s
        enter, fds = self._nsenter(pid)
        try:
            while True:
                done = subprocess.run([*enter, "ip", "-o", "link", "show", "lo"], capture_output=True,
                                      stdin=subprocess.DEVNULL, pass_fds=fds, timeout=10)
                flags = done.stdout.split(b"<", 1)[-1].split(b">", 1)[0].split(b",")
                if b"UP" in flags:
                    return
                if done.returncode != 0 and not os.path.exists(f"/proc/{pid}"):
                    raise OSError("the sandbox ended while it was being set up")
                if time.monotonic() > end:
                    raise OSError("the sandbox's loopback did not come up")
                time.sleep(0.005)
        finally:
            for fd in fds:
                _close(fd)

    def _deny_routes(self, pid: int) -> None:
        """``unreachable`` routes in the sandbox's network namespace to the host's own addresses
        and the denied networks, so egress never leads back to this host or its neighbours' services."""
        denied = {str(ipaddress.ip_network(c, strict=False)) for c in self.plan["deny"]}
        targets = sorted(set(host_addresses()) | denied)
        enter, fds = self._nsenter(pid)
        try:
            for target in targets:
                if ipaddress.ip_network(target).version != 4:
                    continue  # slirp4netns gives the sandbox IPv4 only
                done = subprocess.run([*enter, "ip", "route", "add", "unreachable", target], capture_output=True,
                                      stdin=subprocess.DEVNULL, pass_fds=fds, timeout=10)
                if done.returncode != 0 and b"File exists" not in done.stderr:
                    why = done.stderr.decode(errors="replace").strip()
                    raise OSError(f"cannot deny {target} in the sandbox: {why}")
        finally:
            for fd in fds:
                _close(fd)

    def stop_network(self) -> None:
        """The command has ended: let slirp4netns go (it ends when its exit fd closes), and take
        the rank off its gang's bridge."""
        _close(self._slirp_exit_w)
        self._slirp_exit_w = None
        if self.plan.get("gang_net"):
            gangnet.detach(self.plan["gang_net"])

    def close(self) -> None:
        """Close what the shim still holds for the sandbox (not the slot lock: see :meth:`release`)."""
        self.after_fork()
        for fd in (self.info_r, self.block_w):
            _close(fd)
        self.info_r = self.block_w = None
        self.release()

    def release(self) -> None:
        """Give the slot user back (the lock); the shim's exit does the same."""
        _close(self.lock_fd)
        self.lock_fd = None


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _owner_userns(pid: int) -> int:
    """An inheritable descriptor of the user namespace that owns process ``pid``'s network
    namespace (``NS_GET_USERNS``): bubblewrap's first one, not the nested one of ``--disable-userns``."""
    net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        owner = fcntl.ioctl(net_fd, NS_GET_USERNS)
    finally:
        os.close(net_fd)
    os.set_inheritable(owner, True)
    return owner


def _slot_may_open_tun(path: str = "/dev/net/tun") -> bool:
    """Whether users other than root may open the TUN device (mode 0666)."""
    try:
        return os.stat(path).st_mode & 0o006 == 0o006
    except OSError:
        return False


def _private_tun(uid: int, gid: int, path: str = "/dev/net/tun") -> None:
    """In the (root) child about to become slirp4netns: a private mount namespace in which
    ``path`` is a TUN device node (same device numbers) owned by ``uid``:``gid``, mode 0600,
    on a tmpfs at :data:`STAGE_DIR`; the host's node and its mode are left as they are.
    Raises ``OSError``."""
    import ctypes
    import stat

    libc = ctypes.CDLL(None, use_errno=True)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    rdev = os.stat(path).st_rdev
    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    check(libc.mount(b"tmpfs", STAGE_DIR.encode(), b"tmpfs", MS_NOSUID, b"mode=0755"), "tmpfs")  # devices allowed
    node = f"{STAGE_DIR}/tun"
    os.mknod(node, 0o600 | stat.S_IFCHR, rdev)
    os.chown(node, uid, gid)
    check(libc.mount(node.encode(), path.encode(), None, MS_BIND, None), f"bind {path}")


def _read_info(fd: int, timeout_s: float) -> dict[str, Any]:
    """bubblewrap's ``--info-fd`` JSON (``{"child-pid": N, ...}``)."""
    buf = b""
    end = time.monotonic() + timeout_s
    while True:
        try:
            return json.loads(buf)
        except ValueError:
            pass
        left = end - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            raise OSError("the sandbox did not start (bubblewrap gave no child pid)")
        buf += chunk


def host_addresses() -> list[str]:
    """Every address of this host's network namespace, as ``/32`` (``/128``) networks."""
    try:
        out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, timeout=10, check=True).stdout
        links = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    found = []
    for link in links:
        for addr in link.get("addr_info") or []:
            local = addr.get("local")
            if local and not ipaddress.ip_address(local).is_loopback:  # the sandbox's own lo answers those
                found.append(str(ipaddress.ip_network(local)))
    return found


def take_slot(first: int, last: int, lock_dir: str) -> tuple[int, int]:
    """A free slot uid in ``first..last`` and the fd of its lock (held: the slot is ours until it closes).

    Free: its lock file is not locked and no process runs as that uid. Raises
    ``OSError`` when all are taken.
    """
    os.makedirs(lock_dir, mode=0o700, exist_ok=True)
    count = last - first + 1
    start = random.randrange(count)
    busy = _uids_in_use()
    for i in range(count):
        uid = first + (start + i) % count
        if uid in busy:
            continue
        fd = os.open(os.path.join(lock_dir, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uid, fd
    raise OSError(f"every slot uid {first}-{last} is in use")


def _uids_in_use() -> set[int]:
    uids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uids.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:
                pass
    return uids


def hand_over(job_dir: Path, uid: int, gid: int) -> None:
    """Give the job dir and what was staged into it to the slot user. A file with several
    links (a hard link into the node's input cache) keeps its owner: the job may read it,
    never change it."""
    os.chown(job_dir, uid, gid)
    for root, dirs, files in os.walk(job_dir):
        for name in dirs + files:
            path = os.path.join(root, name)
            if name in files and os.lstat(path).st_nlink > 1:
                continue
            os.lchown(path, uid, gid)


def _stage_mounts(binds: Sequence[tuple[str, str]]) -> None:
    """In the (root) sandbox starter, before it becomes the slot user: a private mount
    namespace with a tmpfs (mode 0755) on :data:`STAGE_DIR` and each host path bind-mounted
    under it, so bubblewrap, run as the slot user, can bind them although their parent
    directories (``/root``, the agent's ``var/``) are closed to it. Nothing changes in the
    host's mount namespace. Raises ``OSError``."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    check(libc.mount(b"tmpfs", STAGE_DIR.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755"), "tmpfs")
    for host, staged in binds:
        os.mkdir(staged, 0o755)
        check(libc.mount(host.encode(), staged.encode(), None, MS_BIND | MS_REC, None), f"bind {host}")


def _make_searchable(path: str) -> None:
    """Create ``path`` and make it and its parent (``/run/e31-agent``) mode 0755 whatever the
    umask of the process that first made them: the slot user must search both to reach the
    staged bind sources (a 0700 parent fails every sandbox with "Permission denied")."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    for directory in (os.path.dirname(path), path):
        if os.stat(directory).st_mode & 0o755 != 0o755:
            os.chmod(directory, 0o755)


def _etc_data(uid: int, gid: int, home: str) -> dict[str, bytes]:
    """Made-up ``/etc/passwd`` and ``/etc/group`` naming the job's user (``job``)."""
    return {
        "/etc/passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\njob:x:{uid}:{gid}:E31 job:{home}:/bin/sh\n"
                       f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
        "/etc/group": f"root:x:0:\njob:x:{gid}:\nnogroup:x:65534:\n".encode(),
    }


def prepare(plan: dict[str, Any]) -> Prepared:
    """Take the slot, hand over the job dir, open what is bound and build bubblewrap's argv.

    Runs in the shim (root when the agent is). Raises ``OSError``.
    """
    uid = gid = lock_fd = None
    if plan.get("slots") and os.geteuid() == 0:
        uid, lock_fd = take_slot(plan["slots"][0], plan["slots"][1], plan["lock_dir"])
        gid = uid
        hand_over(Path(plan["job_dir"]), uid, gid)
    prepared = Prepared(plan=plan, argv=[], pass_fds=[], uid=uid, gid=gid, lock_fd=lock_fd)
    if uid is not None:
        _make_searchable(STAGE_DIR)
    if not plan.get("wrap", True):
        return prepared  # a container runtime: it runs the image itself, as the slot user
    try:
        _build(prepared)
    except BaseException:
        prepared.close()
        raise
    return prepared


def _build(p: Prepared) -> None:
    plan = p.plan
    job_dir = plan["job_dir"]
    inner_uid = p.uid if p.uid is not None else os.getuid()
    inner_gid = p.gid if p.gid is not None else os.getgid()
    argv = [plan["bwrap"], "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--unshare-net", "--disable-userns", "--die-with-parent",
            "--uid", str(inner_uid), "--gid", str(inner_gid), "--hostname", "e31-job",
            "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for name in ETC_FILES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    data = _etc_data(inner_uid, inner_gid, JOB_MOUNT)
    data["/etc/resolv.conf"] = (f"nameserver {SLIRP_DNS}\n" if plan["network"] == "egress" else "").encode()
    data["/etc/hostname"] = b"e31-job\n"
    for dest, content in data.items():
        r, w = os.pipe()
        os.write(w, content)  # small: fits the pipe's buffer
        os.close(w)
        p.pass_fds.append(r)
        p._close_after_start.append(r)
        argv += ["--ro-bind-data", str(r), dest]
    argv += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm",
             "--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
    for node in plan.get("gpu_nodes") or []:
        argv += ["--dev-bind-try", node, node]
    sources = [(path, path, True) for path in plan.get("ro_paths") or []] + [(job_dir, JOB_MOUNT, False)]
    for i, (path, dest, read_only) in enumerate(sources):
        src = path
        if p.uid is not None:  # the slot user may lack search rights on the parents: stage it
            src = f"{STAGE_DIR}/{i}"
            p.binds.append((path, src))
        argv += ["--ro-bind" if read_only else "--bind", src, dest]
    argv += ["--chdir", JOB_MOUNT, "--setenv", "HOME", JOB_MOUNT, "--setenv", "PWD", JOB_MOUNT]
    # bubblewrap tells the sandbox's pid and waits until its network is set up
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    os.set_inheritable(info_r, False)
    os.set_inheritable(block_w, False)
    p.info_r, p.block_w = info_r, block_w
    p.pass_fds += [info_w, block_r]
    p._close_after_start += [info_w, block_r]
    argv += ["--info-fd", str(info_w), "--block-fd", str(block_r)]
    argv += ["--", "/usr/bin/env", "--default-signal=TERM", *jobinit.argv()]  # the job's init: the grace
    p.argv = argv
