"""Sign in and out, and every page asks for it."""
import pytest

from .factories import PASSWORD

pytestmark = pytest.mark.django_db

PAGES = ["/", "/jobs/new/", "/jobs/new/?example=training",
         "/jobs/new/estimate/?gpus=1&time_limit=1h", "/jobs/1/", "/jobs/1/log/", "/jobs/1/bundle/",
         "/usage/", "/usage/csv/", "/pool/"]


@pytest.mark.parametrize("url", PAGES)
def test_it_sends_a_visitor_to_sign_in(client, url):
    resp = client.get(url)
    assert resp.status_code == 302
    assert resp["Location"].startswith("/accounts/login/?next=")


def test_it_sends_a_visitor_who_cancels_to_sign_in(client):
    resp = client.post("/jobs/1/cancel/")
    assert resp.status_code == 302
    assert resp["Location"].startswith("/accounts/login/")


def test_the_sign_in_page_renders_without_the_menu(client):
    resp = client.get("/accounts/login/")
    html = resp.content.decode()
    assert resp.status_code == 200
    assert "Sign in" in html and 'name="password"' in html
    assert "My jobs</a>" not in html


def test_it_signs_in_and_lands_on_my_jobs(client, user):
    resp = client.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
    assert resp.status_code == 302 and resp["Location"] == "/"
    html = client.get("/").content.decode()
    assert "alice" in html and "My jobs" in html


def test_it_says_so_when_the_password_is_wrong(client, user):
    resp = client.post("/accounts/login/", {"username": "alice", "password": "nope"})
    assert resp.status_code == 200
    assert "alert-error" in resp.content.decode()


def test_it_signs_out_with_a_post(web):
    html = web.get("/").content.decode()
    assert 'action="/accounts/logout/"' in html and 'method="post"' in html
    resp = web.post("/accounts/logout/")
    assert resp.status_code == 302
    assert web.get("/").status_code == 302


def test_the_menu_has_admin_only_for_staff(web, staff_web):
    assert 'href="/admin/"' not in web.get("/").content.decode()
    assert 'href="/admin/"' in staff_web.get("/").content.decode()
    assert 'href="/api/docs/"' in web.get("/").content.decode()


def test_every_page_loads_htmx_deferred_and_the_stylesheet(web):
    html = web.get("/").content.decode()
    assert '<script src="/static/vendor/htmx.min.js" defer></script>' in html
    assert "/static/css/e31.css" in html
