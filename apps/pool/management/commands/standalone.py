"""``manage.py standalone``: site, scheduler and two local agents in one command (``make run``)."""
from django.conf import settings
from django.core.management.base import BaseCommand

from e31site.standalone import serve


class Command(BaseCommand):
    help = "Run E31 Network standalone: site on 127.0.0.1:E31_PORT, scheduler, two simulated agents."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=settings.E31_PORT)

    def handle(self, *args, port: int, **options):
        serve(port)
