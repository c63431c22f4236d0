"""The Settings page's account parts (issue 28): API tokens, password, e-mail."""
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from apps.tokens.models import ApiToken
from apps.tokens.services import token_create

from .factories import PASSWORD

pytestmark = pytest.mark.django_db

KEY = re.compile(r'value="([0-9a-f]{40})"')


def test_it_links_settings_from_the_nav(web):
    html = web.get("/").content.decode()
    assert 'href="/account/settings/"' in html and ">Settings</a>" in html


def test_it_shows_a_new_token_once_and_lists_only_its_prefix(web, user):
    resp = web.post("/account/tokens/new/", {"name": "laptop"})
    html = resp.content.decode()
    assert resp.status_code == 200 and "no-store" in resp["Cache-Control"]
    key = KEY.search(html).group(1)
    assert f"e31 login http://testserver --token {key}" in html
    token = ApiToken.objects.get(user=user)
    assert token.name == "laptop" and token.prefix == key[:8]
    listed = web.get("/account/settings/").content.decode()
    assert "laptop" in listed and f"{key[:8]}…" in listed and key not in listed and "never" in listed
    api = Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}")
    assert api.status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_revoked_token_stops_authenticating_the_api(web, user):
    token, key = token_create(user=user, name="ci")
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    resp = web.post(f"/account/tokens/{token.id}/revoke/")
    assert resp.status_code == 302 and resp["Location"] == "/account/settings/"
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 401


def test_another_users_token_is_a_404_and_keeps_working(stranger_web, user):
    token, key = token_create(user=user, name="alices-laptop")
    assert stranger_web.post(f"/account/tokens/{token.id}/revoke/").status_code == 404
    assert "alices-laptop" not in stranger_web.get("/account/settings/").content.decode()
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200


def test_revoke_is_post_only_and_needs_csrf(user):
    token, _ = token_create(user=user)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    assert browser.get(f"/account/tokens/{token.id}/revoke/").status_code == 405
    assert browser.post(f"/account/tokens/{token.id}/revoke/").status_code == 403
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_it_changes_the_password_and_stays_signed_in(web, user):
    resp = web.post("/account/password/", {"old_password": PASSWORD, "new_password1": "a-new-long-passphrase-31",
                                           "new_password2": "a-new-long-passphrase-31"})
    assert resp.status_code == 302
    user.refresh_from_db()
    assert user.check_password("a-new-long-passphrase-31")
    assert web.get("/account/settings/").status_code == 200  # the session survived


def test_a_wrong_old_password_is_an_error_by_the_field(web, user):
    resp = web.post("/account/password/", {"old_password": "nope", "new_password1": "a-new-long-passphrase-31",
                                           "new_password2": "a-new-long-passphrase-31"})
    assert resp.status_code == 200
    assert "old_password" in resp.context["password_form"].errors
    user.refresh_from_db()
    assert user.check_password(PASSWORD)


def test_it_sets_my_email_and_refuses_a_bad_one_by_the_field(web, user):
    assert web.post("/account/email/", {"email": "alice@example.org"}).status_code == 302
    assert get_user_model().objects.get(pk=user.pk).email == "alice@example.org"
    resp = web.post("/account/email/", {"email": "not an address"})
    assert resp.status_code == 200
    assert "email" in resp.context["email_form"].errors
    assert 'class="field has-error"' in resp.content.decode()
    assert get_user_model().objects.get(pk=user.pk).email == "alice@example.org"
