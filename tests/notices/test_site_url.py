"""Links in notice e-mails point at the site as configured (issue 26 item 7: always port 8031)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CODE = "from django.conf import settings; print(settings.E31_SITE_URL)"


def _site_url(tmp_path, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in ("E31_SITE_URL", "E31_PORT")}
    environ.update(DJANGO_SETTINGS_MODULE="e31site.settings", E31_LINT="1", E31_VAR_DIR=str(tmp_path), **env)
    done = subprocess.run([sys.executable, "-c", CODE], env=environ, cwd=Path(__file__).parents[2],
                          check=True, capture_output=True, text=True, timeout=120)
    return done.stdout.strip()


@pytest.mark.django_db(databases=[])
def test_the_e_mail_site_url_follows_e31_port_unless_e31_site_url_is_set(tmp_path):
    assert _site_url(tmp_path) == "http://127.0.0.1:8031"
    assert _site_url(tmp_path, E31_PORT="9123") == "http://127.0.0.1:9123"
    assert _site_url(tmp_path, E31_PORT="9123", E31_SITE_URL="https://e31.example") == "https://e31.example"
