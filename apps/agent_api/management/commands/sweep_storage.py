"""``manage.py sweep_storage [--dry-run]``: delete what retention says is due (issue 15)."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from apps.agent_api.retention import sweep_storage


class Command(BaseCommand):
    help = ("Delete expired bundles' archives, uploads no live job names, expired jobs' log data and old "
            "agent reports; print counts and bytes per kind. Celery beat runs it daily.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Delete nothing; say what would be deleted.")

    def handle(self, *args, dry_run: bool = False, **options):
        report = sweep_storage(dry_run=dry_run)
        for line in report.lines():
            self.stdout.write(line)
