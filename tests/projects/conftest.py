"""A shared project ``ml`` with one user of each role, and a stranger in a project of their own."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.test import Client

from apps.projects.services import member_add, project_create

from ..factories import UserFactory


@dataclass
class Team:
    project: object
    owner: object
    admin: object
    member: object
    viewer: object
    stranger: object

    def by_role(self) -> dict[str, object]:
        return {"owner": self.owner, "admin": self.admin, "member": self.member, "viewer": self.viewer,
                "stranger": self.stranger}


@pytest.fixture
def team(db) -> Team:
    users = {name: UserFactory(username=name) for name in ("olga", "adam", "mia", "vic", "sam")}
    project = project_create(owner=users["olga"], name="ml")
    for who, role in (("adam", "admin"), ("mia", "member"), ("vic", "viewer")):
        member_add(actor=users["olga"], project=project, who=who, role=role)
    project_create(owner=users["sam"], name="other")
    return Team(project, users["olga"], users["adam"], users["mia"], users["vic"], users["sam"])


def client_of(user) -> Client:
    """A client signed in as ``user`` (pages and the API's session auth); anonymous for None."""
    client = Client()
    if user is not None:
        client.force_login(user)
    return client
