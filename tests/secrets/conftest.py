"""Secrets tests: each test's key file lives in its own tmp dir (never the checkout's var/)."""
import pytest


@pytest.fixture(autouse=True)
def _secrets_key_in_tmp(settings, tmp_path):
    settings.E31_SECRETS_KEY = ""
    settings.E31_SECRETS_KEY_FILE = tmp_path / "secrets_key"
