"""``manage.py create_user``: a normal account from the command line (issue 16)."""
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("create_user", *args, stdout=out)
    return out.getvalue()


def test_it_makes_a_normal_user_who_can_sign_in_and_use_the_api():
    out = _run("bob", "--email", "bob@example.com", "--token")
    password = out.split("password: ")[1].split()[0]
    token = out.split("token: ")[1].split()[0]
    bob = get_user_model().objects.get(username="bob")
    assert not bob.is_staff and not bob.is_superuser and bob.email == "bob@example.com"
    client = Client()
    signed_in = client.post("/accounts/login/", {"username": "bob", "password": password})
    assert signed_in.status_code == 302 and client.get("/").status_code == 200
    assert client.get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200


def test_a_taken_name_or_a_weak_password_is_refused_naming_the_field(monkeypatch):
    _run("carol")
    with pytest.raises(CommandError, match="username: a user named 'carol' exists already"):
        _run("carol")
    monkeypatch.setattr("sys.stdin", io.StringIO("123\n"))
    with pytest.raises(CommandError, match="^password: "):
        _run("dave", "--password-stdin")
    assert not get_user_model().objects.filter(username="dave").exists()
