"""``e31-agent``: the command line.

    e31-agent --server URL --token TOKEN [--simulate 4xH100-80GB] [--workdir DIR]

The token may also come from ``E31_NODE_TOKEN``, which keeps it out of the
process list.
"""

from __future__ import annotations

import argparse
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
from .inventory import SimulateError, parse_simulate


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
    parser.add_argument("--version", action="version", version=f"e31-agent {__version__}")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("--token (or $E31_NODE_TOKEN) is required")
    if args.simulate:
        try:
            parse_simulate(args.simulate)
        except SimulateError as exc:
            parser.error(f"--simulate: {exc}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent until SIGINT or SIGTERM; returns the process exit status."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    config = AgentConfig(
        server=args.server,
        token=args.token,
        workdir=args.workdir.expanduser().resolve(),
        simulate=args.simulate,
        keep_files=args.keep_files,
    )
    agent = Agent(config)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("e31_agent").info("signal %d: stopping", signum)
        agent.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.run()
    except (WorkdirBusy, RegistrationRefused) as exc:
        print(f"e31-agent: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
