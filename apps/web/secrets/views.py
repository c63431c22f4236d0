"""Settings, Secrets: set, replace and delete my secrets (issue 23). Names and dates only: a value
is typed once and never shown again (the form's value field is never filled back in)."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.core import clock
from apps.secrets.models import VALUE_MAX_BYTES
from apps.secrets.services import SecretInvalid, secret_delete, secret_list, secret_name_problem, secret_set


class SecretForm(forms.Form):
    name = forms.CharField(max_length=100, label="Name", help_text="Capital letters, digits and _: HF_TOKEN.",
                           widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}))
    value = forms.CharField(strip=False, label="Value", max_length=VALUE_MAX_BYTES,
                            help_text="Up to 64 KiB. Stored encrypted; never shown again. Setting a name you "
                                      "have replaces its value.",
                            widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}, render_value=False))


@login_required
@require_http_methods(["GET", "POST"])
def secrets_page(request: HttpRequest) -> HttpResponse:
    """My secrets by name, and the form that sets one."""
    form = SecretForm()
    if request.method == "POST":
        form = SecretForm(request.POST)
        if form.is_valid():
            try:
                secret = secret_set(owner=request.user, name=form.cleaned_data["name"],
                                    value=form.cleaned_data["value"], now=clock.now())
            except SecretInvalid as exc:
                for field, errors in exc.errors.items():
                    for error in errors:
                        form.add_error(field if field in form.fields else None, error)
            else:
                messages.success(request, f"Secret {secret.name} saved.")
                return redirect("secrets:list")
        form.data = form.data.copy()
        form.data["value"] = ""  # never sent back to the browser
    return render(request, "secrets/list.html", {"section": "settings", "form": form,
                                                 "secrets": secret_list(owner=request.user)})


@login_required
@require_POST
def secret_delete_view(request: HttpRequest, name: str) -> HttpResponse:
    """Delete my secret ``name`` (a job that names it and has not started fails at its start)."""
    if not secret_name_problem(name) and secret_delete(owner=request.user, name=name):
        messages.success(request, f"Secret {name} deleted.")
    else:
        messages.error(request, "You have no secret of that name.")
    return redirect("secrets:list")
