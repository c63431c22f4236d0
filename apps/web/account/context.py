"""The account parts of the Settings page's context (the page is :func:`apps.web.metering.views.account_settings`)."""
from __future__ import annotations

from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpRequest

from apps.tokens.services import token_list
from apps.web.account.forms import EmailForm, TokenCreateForm


def account_context(request: HttpRequest, **bound) -> dict:
    """The account parts of the Settings page's context: the user's tokens and the three forms
    (``bound`` replaces any of ``token_form``, ``password_form``, ``email_form``; ``new_token``/``new_key``
    show a key just made)."""
    context = {
        "tokens": token_list(user=request.user),
        "token_form": TokenCreateForm(),
        "password_form": PasswordChangeForm(request.user),
        "email_form": EmailForm(initial={"email": request.user.email}),
        "server_url": request.build_absolute_uri("/").rstrip("/"),
    }
    context.update(bound)
    return context
