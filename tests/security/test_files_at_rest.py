"""Files at rest (issue 11, item 2): private modes, API tokens stored hashed."""
import hashlib
import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.apps import apps as django_apps
from django.contrib.admin.sites import site
from django.core.management import call_command
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from apps.tokens.models import ApiToken

from ..factories import UserFactory

pytestmark = pytest.mark.django_db


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_fresh_var_dir_and_its_secrets_are_private(tmp_path):
    var = tmp_path / "var"
    code = ("import django; django.setup(); "
            "from e31site.standalone import demo_account, files_private; files_private(); "
            "from django.core.files.base import ContentFile; from django.core.files.storage import default_storage; "
            "default_storage.save('uploads/x/y.bin', ContentFile(b'data'))")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRET_KEY")}
    env.update(E31_VAR_DIR=str(var), DJANGO_SETTINGS_MODULE="e31site.settings")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=Path(__file__).parents[2])
    assert mode(var) == 0o700
    assert mode(var / "secret_key") == 0o600
    assert mode(var / "media") == 0o700
    assert mode(var / "media" / "uploads" / "x") == 0o700
    assert mode(var / "media" / "uploads" / "x" / "y.bin") == 0o600


@pytest.mark.django_db(databases=[])
def test_processes_starting_at_once_on_a_fresh_var_dir_all_read_one_secret_key(tmp_path):
    """The web process and the worker start together on a fresh ``var/`` (devstack, ``make run``):
    each must read the one key the first made, not fail because it exists (a CI run lost its web
    process that way) nor read it half-written. Twelve real processes load the settings at once."""
    var = tmp_path / "var"
    code = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRET_KEY")}
    env.update(E31_VAR_DIR=str(var), DJANGO_SETTINGS_MODULE="e31site.settings")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=Path(__file__).parents[2],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(12)]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 12, [err for _out, err in results if err][:1]
    keys = {out.strip() for out, _err in results}
    assert len(keys) == 1 and len(keys.pop()) >= 50
    assert mode(var / "secret_key") == 0o600
    assert sorted(p.name for p in var.iterdir() if p.name.startswith(".secret_key")) == []  # no temporary left


def test_a_process_that_loses_the_race_for_a_secret_uses_the_winners(tmp_path, monkeypatch):
    """The interleaving the test above can only hope to hit: another process creates the file
    between this one's check and its own link; this one then reads the other's secret."""
    from apps.core import secretfile

    path = tmp_path / "secret_key"
    real_link = os.link

    def other_process_first(src, dst):
        Path(dst).write_text("the-winners-secret")
        real_link(src, dst)  # raises FileExistsError, as it would

    monkeypatch.setattr(secretfile.os, "link", other_process_first)
    assert secretfile.read_or_create(path, 50) == "the-winners-secret"
    assert mode(path) == 0o600 and [p.name for p in tmp_path.iterdir()] == ["secret_key"]


def test_files_private_fixes_an_older_install(tmp_path, settings):
    from e31site.standalone import demo_account, files_private
    var = tmp_path / "var"
    (var / "media" / "uploads").mkdir(parents=True)
    for path in (var, var / "media", var / "media" / "uploads"):
        path.chmod(0o755)
    for name in ("secret_key", "demo_password", "e31.sqlite3", "media/uploads/a.csv"):
        (var / name).write_text("x")
        (var / name).chmod(0o644)
    settings.VAR_DIR = var
    settings.MEDIA_ROOT = str(var / "media")
    files_private()
    assert [mode(var / n) for n in ("", "media", "media/uploads")] == [0o700] * 3
    assert [mode(var / n) for n in ("secret_key", "demo_password", "media/uploads/a.csv")] == [0o600] * 3
    (var / "demo_password").unlink()
    demo_account()
    assert mode(var / "demo_password") == 0o600


def test_issue_token_prints_a_key_once_and_stores_only_its_hash(owner, pool):
    out = io.StringIO()
    call_command("issue_token", "owner", stdout=out)
    key = out.getvalue().strip()
    assert len(key) == 40
    [token] = ApiToken.objects.filter(user=owner)
    assert token.key_hash == hashlib.sha256(key.encode()).hexdigest() and token.prefix == key[:8]
    with connection.cursor() as cur:  # the key is nowhere in the database
        cur.execute("SELECT * FROM tokens_apitoken")
        assert key not in repr(cur.fetchall())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/jobs/").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Token {key[:-1]}x")
    resp = client.get("/api/v1/jobs/")
    assert resp.status_code == 401 and resp.headers["WWW-Authenticate"] == "Token"
    call_command("issue_token", "owner", "--revoke-others", stdout=io.StringIO())
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/jobs/").status_code == 401


def test_the_admin_shows_the_prefix_only(owner):
    from apps.tokens.services import token_issue
    key = token_issue(user=owner)
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)
    page = client.get("/admin/tokens/apitoken/").content.decode()
    assert key[:8] in page and key not in page
    token = ApiToken.objects.get(user=owner)
    page = client.get(f"/admin/tokens/apitoken/{token.pk}/change/").content.decode()
    assert key not in page and token.key_hash not in page
    assert ApiToken in site._registry
    assert "authtoken" not in {m._meta.app_label for m in site._registry}


def test_the_data_migration_hashes_drf_plain_tokens(owner):
    migration = __import__("apps.tokens.migrations.0002_hash_plain_tokens", fromlist=["hash_plain_tokens"])
    key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cur:  # the table DRF's authtoken made before issue 11
        cur.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamptz NOT NULL, "
                    "user_id integer NOT NULL)")
        cur.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [key, owner.pk])
    with connection.schema_editor() as editor:
        migration.hash_plain_tokens(django_apps, editor)
    assert "authtoken_token" not in connection.introspection.table_names()
    assert ApiToken.objects.get(user=owner).key_hash == hashlib.sha256(key.encode()).hexdigest()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/jobs/").status_code == 200
