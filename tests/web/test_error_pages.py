"""403, 404 and 500 answer with the site's own pages, and an ordinary 4xx logs no traceback (issue 16)."""
import logging

import pytest
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory
from django.views.defaults import permission_denied, server_error

pytestmark = pytest.mark.django_db


def test_a_missing_page_is_the_sites_own_404_with_its_navigation(web):
    response = web.get("/jobs/999999/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "Not found" in html and "My jobs" in html and "E31 Network" in html
    assert "Page not found at" not in html  # Django's debug page


def test_a_403_is_the_sites_own_page(user):
    request = RequestFactory().get("/somewhere/")
    request.user = user
    response = permission_denied(request, PermissionDenied("no"))
    assert response.status_code == 403
    assert "Not allowed" in response.content.decode()


def test_a_500_is_the_sites_own_page_and_needs_no_database_context():
    response = server_error(RequestFactory().get("/"))
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong on our side" in html and "Traceback" not in html


def test_an_ordinary_404_logs_no_warning_or_traceback(web, caplog):
    with caplog.at_level(logging.DEBUG):
        web.get("/jobs/999999/")
    request_records = [r for r in caplog.records if r.name == "django.request"]
    assert not [r for r in request_records if r.levelno >= logging.WARNING or r.exc_info]
