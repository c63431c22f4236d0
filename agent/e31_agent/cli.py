"""``e31-agent``: the command line.

    e31-agent --server URL --token-file FILE [--simulate 4xH100-80GB] [--workdir DIR]
              [--slot-uids FIRST-LAST] [--sandbox-deny CIDR]... [--sandbox-allow-private]
              [--unsafe-no-sandbox [--job-user USER]] [--health-port PORT]

Every job attempt runs in a sandbox of its own (:mod:`e31_agent.sandbox`:
bubblewrap, slirp4netns); the agent refuses to start where it cannot build
one, unless ``--unsafe-no-sandbox`` is given (the server then marks the node).

The token comes from ``--token-file`` (best: a file of mode 0600 the jobs'
user cannot read), ``E31_NODE_TOKEN`` or ``--token`` (visible in the
process list). It is removed from the agent's ``os.environ`` at start, so
no process the agent starts inherits it; ``/proc/<agent>/environ`` still
shows the value the agent was started with, which is why jobs must not run
as the agent's user with a token in its environment: run the agent as root
(jobs then run as ``--job-user``, default ``nobody``) or give it the token
by file.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from . import __version__
from .agent import Agent, RegistrationRefused, WorkdirBusy
from .config import AgentConfig
from .extract import ExtractLimits
from .health import HealthServer
from .inventory import SimulateError, parse_simulate
from .netguard import AddressPolicy
from .node_inputs import FileRootError, check_file_roots
from .oom import protect_supervisor
from .packer import OutputLimits
from .sandbox import DEFAULT_DENY, METADATA_DENY


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="e31-agent", description="Run E31 Network jobs on this GPU host."
    )
    parser.add_argument("--server", required=True, help="site base URL, e.g. http://127.0.0.1:8031")
    parser.add_argument(
        "--token",
        default=os.environ.get("E31_NODE_TOKEN"),
        help="node token from `manage.py issue_node_token` (default: $E31_NODE_TOKEN)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help="read the node token from this file (keep it mode 0600)",
    )
    parser.add_argument(
        "--job-user",
        help="with --unsafe-no-sandbox, when the agent runs as root, run jobs as this user (default: nobody);"
        " sandboxed jobs run as slot users (--slot-uids)",
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run jobs without the tenant sandbox (they can then read what the agent's job user can, see"
        " other processes and reach this host's services); the server marks the node",
    )
    parser.add_argument(
        "--slot-uids",
        default=os.environ.get("E31_AGENT_SLOT_UIDS", "2310000-2319999"),
        metavar="FIRST-LAST",
        help="when the agent runs as root, each running job attempt gets its own uid from this range"
        " (no /etc/passwd entries needed; default 2310000-2319999, or $E31_AGENT_SLOT_UIDS)",
    )
    parser.add_argument(
        "--sandbox-deny",
        action="append",
        default=None,
        metavar="CIDR",
        help="a further network jobs with network: egress must not reach (repeatable; always denied: this"
        " host's own addresses, 169.254.0.0/16 (the cloud metadata service) and, unless"
        " --sandbox-allow-private, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10)",
    )
    parser.add_argument(
        "--sandbox-allow-private",
        action="store_true",
        help="let jobs with network: egress reach private networks (10/8, 172.16/12, 192.168/16, 100.64/10),"
        " e.g. a data server of the operator's; this host's addresses and 169.254/16 stay denied",
    )
    parser.add_argument(
        "--simulate",
        metavar="SPEC",
        help="fake the GPUs, e.g. 4xH100-80GB or 2xA100-40GB,1xL40S-48GB",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(os.environ.get("E31_AGENT_WORKDIR", Path.home() / ".e31-agent")),
        help="where job dirs, logs, bundles and the input cache live (default: ~/.e31-agent)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
    )
    parser.add_argument(
        "--keep-files",
        action="store_true",
        help="keep job dirs, logs and bundles after each job (for debugging)",
    )
    parser.add_argument(
        "--cache-max-bytes",
        type=int,
        default=None,
        help="cap of the input cache in bytes; least recently used inputs are evicted"
        " (default: $E31_AGENT_CACHE_MAX_BYTES or 50 GB)",
    )
    parser.add_argument(
        "--allow-file-root",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="allow file:// inputs under DIR (repeatable; default: $E31_AGENT_FILE_ROOTS, else nowhere)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST|CIDR",
        help="let http(s):// inputs reach this host name, address or network although it is not public"
        " (loopback, private, link-local...; repeatable; default: $E31_AGENT_ALLOW_HOSTS, else none)",
    )
    parser.add_argument("--extract-max-bytes", type=int, default=None, metavar="BYTES",
                        help="cap on the bytes one archive input unpacks to (default 100 GiB)")
    parser.add_argument("--extract-max-members", type=int, default=None, metavar="N",
                        help="cap on the entries of one archive input (default 1,000,000)")
    parser.add_argument("--extract-max-ratio", type=float, default=None, metavar="R",
                        help="cap on unpacked bytes per archive byte (default 200)")
    parser.add_argument("--output-max-files", type=int, default=None, metavar="N",
                        help="cap on the output files of one job (default 100,000)")
    parser.add_argument("--output-max-bytes", type=int, default=None, metavar="BYTES",
                        help="cap on the output bytes of one job, before compression"
                        " (default: the server's bundle cap)")
    parser.add_argument(
        "--retry-max",
        type=float,
        default=float(os.environ.get("E31_AGENT_RETRY_MAX_S", 30)),
        metavar="SECONDS",
        help="longest wait between retries of a call to the server (default 30)",
    )
    parser.add_argument(
        "--sample-interval",
        type=float,
        default=float(os.environ.get("E31_AGENT_SAMPLE_INTERVAL_S", 5)),
        metavar="SECONDS",
        help="seconds between a running job's usage samples (CPU, memory, GPU) for its charts;"
        " 0 takes none (default 5, or $E31_AGENT_SAMPLE_INTERVAL_S)",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=int(os.environ.get("E31_AGENT_HEALTH_PORT", 0)),
        metavar="PORT",
        help="serve /healthz (the agent's loops live) and /readyz (registered, the server answers) on"
        " this port; 0: none (default 0, or $E31_AGENT_HEALTH_PORT)",
    )
    parser.add_argument("--health-host", default="127.0.0.1", metavar="ADDRESS",
                        help="address the health port listens on (default 127.0.0.1)")
    parser.add_argument("--version", action="version", version=f"e31-agent {__version__}")
    args = parser.parse_args(argv)
    if args.token_file:
        try:
            args.token = args.token_file.read_text().strip()
        except OSError as exc:
            parser.error(f"--token-file: {exc}")
    if not args.token:
        parser.error("--token (or $E31_NODE_TOKEN) is required")
    if not 0 <= args.health_port <= 65535:
        parser.error("--health-port: must be 0 (none) to 65535")
    if args.cache_max_bytes is not None and args.cache_max_bytes < 0:
        parser.error("--cache-max-bytes: must be 0 or more")
    try:
        args.allow_file_root = list(check_file_roots(args.allow_file_root))
    except FileRootError as exc:
        parser.error(f"--allow-file-root: {exc}")
    try:
        first, last = (int(x) for x in str(args.slot_uids).split("-", 1))
        if first <= 0 or last < first:
            raise ValueError
        args.slot_uids = (first, last)
    except ValueError:
        parser.error("--slot-uids: must be FIRST-LAST, uids above 0, e.g. 2310000-2319999")
    base = METADATA_DENY if args.sandbox_allow_private else DEFAULT_DENY
    args.sandbox_deny = tuple(dict.fromkeys([*base, *(args.sandbox_deny or [])]))
    try:
        AddressPolicy.parse(args.allow_host)
    except ValueError as exc:
        parser.error(f"--allow-host: {exc}")
    for flag in ("extract_max_bytes", "extract_max_members", "extract_max_ratio", "output_max_files",
                 "output_max_bytes"):
        if getattr(args, flag) is not None and getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')}: must be more than 0")
    if args.simulate:
        try:
            parse_simulate(args.simulate)
        except SimulateError as exc:
            parser.error(f"--simulate: {exc}")
    return args


def _extract_limits(args: argparse.Namespace) -> ExtractLimits:
    base = ExtractLimits.from_env()
    return dataclasses.replace(
        base,
        max_bytes=args.extract_max_bytes or base.max_bytes,
        max_members=args.extract_max_members or base.max_members,
        max_ratio=args.extract_max_ratio or base.max_ratio,
    )


def _output_limits(args: argparse.Namespace) -> OutputLimits:
    base = OutputLimits.from_env()
    return dataclasses.replace(base, max_files=args.output_max_files or base.max_files,
                               max_bytes=args.output_max_bytes or base.max_bytes)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent until SIGINT or SIGTERM; returns the process exit status."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    os.environ.pop("E31_NODE_TOKEN", None)  # no child of the agent inherits it
    protect_supervisor()  # the OOM killer takes a job before the agent (e31_agent.oom)
    config = AgentConfig(
        server=args.server,
        token=args.token,
        workdir=args.workdir.expanduser().resolve(),
        simulate=args.simulate,
        keep_files=args.keep_files,
        job_user=args.job_user,
        retry_max_s=max(0.5, args.retry_max),
        sample_interval_s=0.0 if args.sample_interval <= 0 else max(0.5, args.sample_interval),
        cache_max_bytes=args.cache_max_bytes,
        file_roots=tuple(args.allow_file_root),
        unsafe_no_sandbox=args.unsafe_no_sandbox,
        slot_uids=args.slot_uids,
        sandbox_deny=args.sandbox_deny,
        allow_hosts=tuple(args.allow_host),
        extract_limits=_extract_limits(args),
        output_limits=_output_limits(args),
    )
    try:
        agent = Agent(config)
    except ValueError as exc:
        print(f"e31-agent: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("e31_agent").info("signal %d: stopping", signum)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    probes = None
    if args.health_port:
        try:
            probes = HealthServer(liveness=agent.liveness, readiness=agent.readiness, host=args.health_host,
                                  port=args.health_port).start()
        except OSError as exc:
            print(f"e31-agent: --health-port {args.health_port}: {exc}", file=sys.stderr)
            return 2
    try:
        agent.run()
    except (WorkdirBusy, RegistrationRefused) as exc:
        print(f"e31-agent: {exc}", file=sys.stderr)
        return 2
    finally:
        if probes is not None:
            probes.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
