"""Projects in the browser (issue 25 item 1): my projects with my role, making one, and a project's
members, whom owners and admins add, change and remove. The rules are :mod:`apps.projects.services`'s;
these views parse the forms, call them and show the outcome."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.core import clock
from apps.metering.project_budget import month_parse, project_statement
from apps.projects.access import Action, role_allows, role_of
from apps.projects.models import Role
from apps.projects.services import (
    ProjectError,
    member_add,
    member_remove,
    member_set_role,
    members_of,
    project_create,
    project_for,
    projects_of,
)


class ProjectForm(forms.Form):
    name = forms.CharField(max_length=63, label="Name", help_text="Lowercase letters, digits, '.', '_' or '-'.",
                           widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}))


class MemberForm(forms.Form):
    username = forms.CharField(max_length=254, label="Username or e-mail",
                               widget=forms.TextInput(attrs={"autocomplete": "off"}))
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER, label="Role")


def _errors_into(form: forms.Form, e: ProjectError) -> None:
    form.add_error(e.field if e.field in form.fields else None, e.message)


@login_required
@require_http_methods(["GET", "POST"])
def projects_page(request: HttpRequest) -> HttpResponse:
    """My projects with my role, and the form that makes one."""
    form = ProjectForm()
    if request.method == "POST":
        form = ProjectForm(request.POST)
        if form.is_valid():
            try:
                project = project_create(owner=request.user, name=form.cleaned_data["name"])
            except ProjectError as e:
                _errors_into(form, e)
            else:
                messages.success(request, f"Project {project.name} made; you are its owner.")
                return redirect("projects:detail", name=project.name)
    rows = [{"project": p, "role": r, "members": p.member_count} for p, r in projects_of(request.user)]
    return render(request, "projects/list.html", {"section": "projects", "form": form, "rows": rows})


def _project_or_404(request: HttpRequest, name: str):
    try:
        return project_for(request.user, name)
    except ProjectError:
        raise Http404("No such project.") from None


@login_required
@require_http_methods(["GET", "POST"])
def project_page(request: HttpRequest, name: str) -> HttpResponse:
    """A project's members with their roles; owners and admins add one (POST)."""
    project = _project_or_404(request, name)
    role = role_of(request.user, project)
    form = MemberForm()
    if request.method == "POST":
        form = MemberForm(request.POST)
        if form.is_valid():
            try:
                m = member_add(actor=request.user, project=project, who=form.cleaned_data["username"],
                               role=form.cleaned_data["role"])
            except ProjectError as e:
                _errors_into(form, e)
            else:
                messages.success(request, f"{m.user.username} added as {m.role}.")
                return redirect("projects:detail", name=project.name)
    return render(request, "projects/detail.html", {
        "section": "projects", "project": project, "role": role, "form": form,
        "members": members_of(actor=request.user, project=project), "roles": Role.choices,
        "manages": role_allows(role, Action.MEMBERS) and not project.is_personal,
    })


@login_required
def project_statement_page(request: HttpRequest, name: str) -> HttpResponse:
    """A project's monthly statement (``?month=YYYY-MM``, default this month), laid out for printing;
    every member may read it."""
    project = _project_or_404(request, name)
    try:
        month = month_parse(request.GET.get("month"), clock.now())
    except ValueError:
        return HttpResponse("month: must be YYYY-MM, e.g. 2026-12\n", status=400,
                            content_type="text/plain; charset=utf-8")
    return render(request, "projects/statement.html", {
        "section": "projects", "project": project, "s": project_statement(project, month)})


@login_required
@require_POST
def member_change(request: HttpRequest, name: str, username: str) -> HttpResponse:
    """Change a member's role (``role``) or remove them (``remove``), then back to the project."""
    project = _project_or_404(request, name)
    try:
        if request.POST.get("remove"):
            member_remove(actor=request.user, project=project, username=username)
            messages.success(request, f"{username} removed from {project.name}.")
            if username == request.user.get_username():
                return redirect("projects:list")
        else:
            m = member_set_role(actor=request.user, project=project, username=username,
                                role=request.POST.get("role", ""))
            messages.success(request, f"{m.user.username} is now {m.role}.")
    except ProjectError as e:
        messages.error(request, e.message)
    return redirect("projects:detail", name=project.name)
