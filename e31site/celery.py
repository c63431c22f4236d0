"""Celery application of the site.

Broker is ``REDIS_URL``. Without it (standalone) tasks run eagerly in the
calling process, which is the only process there is.
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "e31site.settings")

app = Celery("e31site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
