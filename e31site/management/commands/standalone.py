"""``manage.py standalone``: site, scheduler and two local agents in one command (``make run``)."""
import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand

from e31site.standalone import serve


class Command(BaseCommand):
    help = "Run E31 Network standalone: site on 127.0.0.1:E31_PORT, scheduler, two simulated agents."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=settings.E31_PORT)

    def handle(self, *args, port: int, **options):
        serve(port)
        # Everything is stopped and flushed. Skip interpreter finalisation: the
        # reactor's loop is closed with coroutines still referenced, and
        # collecting them at exit can crash CPython (seen as a segfault on stop).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
