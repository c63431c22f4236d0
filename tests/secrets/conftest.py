"""Secrets tests: the key from the key file (tests/conftest.py puts it in the test's tmp dir)."""
import pytest


@pytest.fixture(autouse=True)
def _secrets_key_from_the_file(settings):
    settings.E31_SECRETS_KEY = ""
