"""``manage.py meter_check``: verify the meter's invariants (SPEC §4); exit 1 naming each violation."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from apps.metering.checks import meter_violations


class Command(BaseCommand):
    help = ("Check the ledger: no GPU in two overlapping leases, no negative or open-ended closed lease, "
            "GPUs billed = GPUs held, leased GPU-seconds per node within capacity x wall time, billed within "
            "the time limit, billed seconds and cost as the formula gives. Exits 1 if any is broken.")

    def handle(self, *args, **options):
        violations = meter_violations()
        for violation in violations:
            self.stderr.write(str(violation))
        if violations:
            raise CommandError(f"{len(violations)} meter violation{'s' if len(violations) != 1 else ''}",
                               returncode=1)
        self.stdout.write("meter_check: the ledger is consistent.")
