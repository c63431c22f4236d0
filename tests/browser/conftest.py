"""Browser tests: Debian's chromium driven by Playwright against a live stack.

The stack is the production shape (two uvicorn processes, a Celery worker,
real agents with simulated GPUs) on the test database, with its channel
layer on the test's own Redis database, so changes the test process makes
(draining a node, a scheduling cycle run eagerly) reach the browsers too.
Playwright's bundled browser is never downloaded: ``executable_path`` is
Debian's ``chromium`` (``.ci/run`` installs it when missing).
"""
from __future__ import annotations

import shutil

import pytest
from django.conf import settings
from django.db import connections
from playwright.sync_api import sync_playwright

from tests.e2e.conftest import live_stack

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def stack(transactional_db, tmp_path):
    yield from live_stack(tmp_path, redis_url=settings.REDIS_URL, web=2)


@pytest.fixture
def browser(monkeypatch):
    """Headless chromium. Playwright's sync API runs an event loop in this thread, which Django
    takes for an async context; the test's own ORM calls are plain sync code, so allow them."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not shutil.which(CHROMIUM):
        pytest.fail("chromium is not installed: apt-get install -y chromium (.ci/run does it)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
            # While Playwright's loop runs, asgiref keeps the test's ORM connection in a
            # context of its own, which the database teardown never sees: close it here.
            connections.close_all()
