"""The user's own account details: the e-mail address notices go to (issue 28)."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_email


def user_set_email(*, user, email: str) -> str:
    """Set ``user``'s own e-mail address (where notices are sent); ``""`` clears it. Returns the stored value.

    Raises ``ValidationError({"email": ...})`` for an address that is not one (Django's validator).
    """
    email = (email or "").strip()
    if email:
        try:
            validate_email(email)
        except ValidationError as exc:
            raise ValidationError({"email": exc.messages}) from None
    user.email = email
    user.save(update_fields=["email"])
    return email
