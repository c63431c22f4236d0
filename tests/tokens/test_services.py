""":mod:`apps.tokens.services`: the rules every surface (Settings page, API, CLI) gets."""
import pytest
from django.core.exceptions import ValidationError

from apps.tokens.models import ApiToken
from apps.tokens.services import token_create, token_hash, token_list, token_revoke, token_user

pytestmark = pytest.mark.django_db


def test_it_stores_the_hash_and_prefix_never_the_key(owner):
    token, key = token_create(user=owner, name="  laptop ")
    assert token.name == "laptop" and token.prefix == key[:8] and token.key_hash == token_hash(key)
    assert token_user(key) == owner


@pytest.mark.parametrize("name", ["x" * 101, "bell\x07", "nul\x00", "line\nbreak", "\ud800", 7])
def test_a_bad_name_is_refused_naming_the_field(owner, name):
    with pytest.raises(ValidationError) as info:
        token_create(user=owner, name=name)
    assert set(info.value.message_dict) == {"name"}
    assert not ApiToken.objects.exists()


def test_revoke_is_for_the_owner_only(owner, stranger):
    token, key = token_create(user=owner, name="ci")
    with pytest.raises(ApiToken.DoesNotExist):
        token_revoke(user=stranger, token_id=token.pk)
    assert token_user(key) == owner
    token_revoke(user=owner, token_id=token.pk)
    assert token_user(key) is None and not token_list(user=owner).exists()
