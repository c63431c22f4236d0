"""The Settings page's account parts: API tokens (create, shown once; revoke), password, e-mail (issue 28).

Thin views: the rules are in :mod:`apps.tokens.services` and :mod:`apps.tokens.account`. Each POST
that fails its form renders the Settings page with that form bound, so its errors show by the field.
"""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.tokens.account import user_set_email
from apps.tokens.models import ApiToken
from apps.tokens.services import token_create, token_revoke
from apps.web.account.forms import EmailForm, TokenCreateForm
from apps.web.metering.views import account_settings_page


@never_cache  # the new key is in this response: no cache may keep it
@login_required
@require_POST
def token_new(request: HttpRequest) -> HttpResponse:
    """Make a token and show its key this once, on the Settings page (not after a redirect)."""
    form = TokenCreateForm(request.POST)
    if not form.is_valid():
        return account_settings_page(request, token_form=form)
    try:
        token, key = token_create(user=request.user, name=form.cleaned_data["name"])
    except ValidationError as exc:
        for field, problems in exc.message_dict.items():
            form.add_error(field, problems)
        return account_settings_page(request, token_form=form)
    return account_settings_page(request, new_token=token, new_key=key)


@login_required
@require_POST
def token_delete(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of my tokens; another user's token, or none, is a 404."""
    try:
        token_revoke(user=request.user, token_id=token_id)
    except ApiToken.DoesNotExist:
        raise Http404("No such token.") from None
    messages.success(request, "Token revoked: it no longer works.")
    return redirect("account:settings")


@login_required
@require_POST
def password_change(request: HttpRequest) -> HttpResponse:
    """Change my password (Django's form: the old one, the new one twice); this session stays signed in."""
    form = PasswordChangeForm(request.user, request.POST)
    if not form.is_valid():
        return account_settings_page(request, password_form=form)
    user = form.save()
    update_session_auth_hash(request, user)
    messages.success(request, "Your password is changed.")
    return redirect("account:settings")


@login_required
@require_POST
def email_change(request: HttpRequest) -> HttpResponse:
    """Set my e-mail address (validated); an invalid one is an error by the field."""
    form = EmailForm(request.POST)
    if form.is_valid():
        try:
            email = user_set_email(user=request.user, email=form.cleaned_data["email"])
        except ValidationError as exc:
            form.add_error("email", exc.message_dict.get("email", exc.messages))
        else:
            messages.success(request, f"Notices now go to {email}." if email else "Your e-mail address is removed.")
            return redirect("account:settings")
    return account_settings_page(request, email_form=form)
