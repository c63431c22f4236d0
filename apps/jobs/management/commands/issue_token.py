"""``manage.py issue_token USER``: issue a new API token of a user and print it, once."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.tokens.services import token_issue


class Command(BaseCommand):
    help = ("Issue a new API token of USER (Authorization: Token <key>) and print it. Only its hash is "
            "stored: the key is shown this once. USER's other tokens keep working unless --revoke-others.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--revoke-others", action="store_true", help="USER's other tokens stop working.")

    def handle(self, *args, username: str, revoke_others: bool = False, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        self.stdout.write(token_issue(user=user, revoke_others=revoke_others))
