"""The notice settings page."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from apps.notices.services import email_on_release, preference_set
from apps.web.notices.forms import NoticeForm


@login_required
@require_http_methods(["GET", "POST"])
def notice_settings(request: HttpRequest) -> HttpResponse:
    """GET: the settings; POST: store them and come back here."""
    if request.method == "POST":
        form = NoticeForm(request.POST)
        if form.is_valid():
            preference_set(user=request.user, email_on_release=form.cleaned_data["email_on_release"])
            messages.success(request, "Notice settings saved.")
            return redirect("notices:settings")
    else:
        form = NoticeForm(initial={"email_on_release": email_on_release(request.user)})
    return render(request, "notices/settings.html", {"form": form, "email": request.user.email})
