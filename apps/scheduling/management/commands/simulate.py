"""``manage.py simulate TRACE``: replay an SWF trace through the scheduling core (SPEC §5).

A thin shell around :func:`apps.scheduling.simulator.simulate_trace`; it reads no
database. The policy's settings are the live site's: its defaults with any
``E31_POLICY_<FIELD>`` overrides (:func:`apps.scheduling.adapter.policy_from_settings`), except
the fair share: the live site's fair tree by project (issue 25 item 4) needs projects, which a
trace has only in its group field, so it is on with ``--projects`` (field 13 the project); without
it the replay keeps the classic per-account factor of the earlier figures (set
``E31_POLICY_FAIRSHARE`` to choose either way).
A progress bar goes to the terminal (stderr) when ``rich`` is
installed and stderr is a terminal.
"""
import dataclasses
import json
import sys

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from apps.scheduling.adapter import policy_from_settings
from apps.scheduling.simulator import format_table, simulate_trace
from apps.scheduling.simulator.staging import DataConfig, format_data_table, simulate_data

try:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
except ImportError:  # rich is optional: no bar without it
    Progress = None


class Command(BaseCommand):
    help = ("Replay an SWF workload trace (gzip or plain) through the scheduler with a simulated clock "
            "and print utilisation, waits, bounded slowdown by size, fairness and estimate accuracy.")
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("trace", help="SWF file, e.g. /work/shared/traces/KTH-SP2-1996-2.1-cln.swf.gz")
        parser.add_argument("--policy", default="fifo", help="scheduling policy: fifo, easy or e31 (default fifo)")
        parser.add_argument("--nodes", type=int, default=None, help="nodes in the pool (default: MaxNodes)")
        parser.add_argument("--gpus-per-node", type=int, default=None,
                            help="GPUs a node (default: MaxProcs / MaxNodes from the header, else 8)")
        parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
        parser.add_argument("--format", choices=("table", "json"), default="table")
        parser.add_argument("--projects", action="store_true",
                            help="issue 25 item 4: SWF field 13 (the group) is each job's project and e31 shares "
                                 "by project, then by user (fair tree, as the live site does); prints per-project "
                                 "figures. Off (the default): every user is a project of one under the classic "
                                 "per-account factor, so the earlier figures reproduce")
        parser.add_argument("--data", action="store_true",
                            help="issue 14 item 5: attach generated input data sets to the jobs and replay four "
                                 "times (pre-staging off/on x cache affinity off/on); print staging GPU-hours, "
                                 "cache hit rate and utilisation (apps/scheduling/simulator/staging.py)")
        parser.add_argument("--cache-gb", type=float, default=None, help="with --data: cache per node, GB (200)")
        parser.add_argument("--rate-mb-s", type=float, default=None,
                            help="with --data: staging rate per node, MB/s (125)")

    def handle(self, *args, trace, policy, nodes, gpus_per_node, limit, format, data=False, cache_gb=None,
               rate_mb_s=None, projects=False, **options):
        for name, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node), ("--limit", limit)):
            if value is not None and value < 1:
                raise CommandError(f"{name} must be at least 1")
        bar = Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs"),
                       TimeElapsedColumn(), TimeRemainingColumn(), transient=True,
                       ) if Progress is not None and sys.stderr.isatty() else None
        try:
            config = policy_from_settings(policy)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        if not projects and "fairshare" not in settings.E31_POLICY_OVERRIDES:
            config = dataclasses.replace(config, fairshare="classic")  # the figures before issue 25
        policy = config
        if data:
            self._data(trace, policy, nodes, gpus_per_node, limit, format, cache_gb, rate_mb_s)
            return
        try:
            if bar is None:
                result = simulate_trace(trace, policy, nodes=nodes, gpus_per_node=gpus_per_node, limit=limit,
                                        projects=projects)
            else:
                with bar:
                    task = bar.add_task("replay", total=None)
                    result = simulate_trace(trace, policy, nodes=nodes, gpus_per_node=gpus_per_node, limit=limit,
                                            projects=projects,
                                            progress=lambda done, total: bar.update(task, completed=done, total=total))
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        if format == "json":
            self.stdout.write(json.dumps(result))
        else:
            self.stdout.write(format_table(result))

    def _data(self, trace, policy, nodes, gpus_per_node, limit, format, cache_gb, rate_mb_s) -> None:
        changes = {}
        for name, value, scale, key in (("--cache-gb", cache_gb, 1e9, "cache_bytes"),
                                        ("--rate-mb-s", rate_mb_s, 1e6, "rate_bps")):
            if value is not None:
                if value <= 0:
                    raise CommandError(f"{name} must be more than 0")
                changes[key] = int(value * scale) if key == "cache_bytes" else value * scale
        try:
            result = simulate_data(trace, policy, nodes=nodes, gpus_per_node=gpus_per_node, limit=limit,
                                   config=dataclasses.replace(DataConfig(), **changes))
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(result) if format == "json" else format_data_table(result))
