"""Secrets at rest: the row holds no value, the key is not in the database, and rotation re-encrypts."""
import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from apps.secrets import crypto
from apps.secrets.models import Secret
from apps.secrets.services import secret_set, secret_values

pytestmark = pytest.mark.django_db

VALUE = "wandb-9f8e7d6c5b4a3210"


def _raw_rows() -> bytes:
    with connection.cursor() as cur:
        cur.execute("SELECT name, token FROM secrets_secret")
        return b"".join(bytes(name, "utf-8") + bytes(token) for name, token in cur.fetchall())


def test_the_database_row_does_not_hold_the_value(owner, settings):
    secret_set(owner=owner, name="WANDB_API_KEY", value=VALUE, now=timezone.now())
    raw = _raw_rows()
    assert b"WANDB_API_KEY" in raw and VALUE.encode() not in raw
    key_text = settings.E31_SECRETS_KEY_FILE.read_bytes()
    assert key_text.strip() not in raw  # the key is not beside the value
    assert oct(settings.E31_SECRETS_KEY_FILE.stat().st_mode & 0o777) == "0o600"
    assert secret_values(owner_id=owner.pk, names=["WANDB_API_KEY"]) == {"WANDB_API_KEY": VALUE}


def test_the_key_file_is_made_on_first_use_only(owner, settings):
    assert not settings.E31_SECRETS_KEY_FILE.exists()
    secret_set(owner=owner, name="A_KEY", value=VALUE, now=timezone.now())
    assert settings.E31_SECRETS_KEY_FILE.exists()


def test_rotation_re_encrypts_every_value_under_a_new_key(owner, settings):
    secret_set(owner=owner, name="ONE", value=VALUE, now=timezone.now())
    secret_set(owner=owner, name="TWO", value=VALUE + "-two", now=timezone.now())
    old_key = crypto.keys()
    old_tokens = dict(Secret.objects.values_list("name", "token"))
    call_command("rotate_secrets_key")
    new_key = crypto.keys()
    assert len(new_key) == 1 and new_key != old_key
    for name, token in Secret.objects.values_list("name", "token"):
        assert bytes(token) != bytes(old_tokens[name])
        Fernet(new_key[0]).decrypt(bytes(token))  # opens under the new key alone
        with pytest.raises(InvalidToken):
            Fernet(old_key[0]).decrypt(bytes(token))
    assert secret_values(owner_id=owner.pk, names=["ONE", "TWO"]) == {"ONE": VALUE, "TWO": VALUE + "-two"}


def test_rotation_with_the_environment_key_uses_its_first_key(owner, settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.E31_SECRETS_KEY = old
    secret_set(owner=owner, name="ONE", value=VALUE, now=timezone.now())
    settings.E31_SECRETS_KEY = f"{new},{old}"
    call_command("rotate_secrets_key")
    settings.E31_SECRETS_KEY = new  # the old key dropped: every value still opens
    assert secret_values(owner_id=owner.pk, names=["ONE"]) == {"ONE": VALUE}
    assert not settings.E31_SECRETS_KEY_FILE.exists()  # no key file when the key comes from the environment


def test_a_value_under_a_lost_key_fails_loudly(owner, settings):
    secret_set(owner=owner, name="ONE", value=VALUE, now=timezone.now())
    settings.E31_SECRETS_KEY = Fernet.generate_key().decode()
    with pytest.raises(crypto.SecretsKeyError):
        secret_values(owner_id=owner.pk, names=["ONE"])


def test_an_unreadable_key_file_is_a_key_error_never_an_os_error(settings, tmp_path):
    from apps.secrets import crypto

    settings.E31_SECRETS_KEY = ""
    settings.E31_SECRETS_KEY_FILE = str(tmp_path / "not-a-dir" / "secrets_key")
    (tmp_path / "not-a-dir").write_text("a file where the key's directory should be")
    with pytest.raises(crypto.SecretsKeyError, match="cannot be read"):
        crypto.keys()
