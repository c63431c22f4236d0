"""``manage.py issue_token USER``: print the API token of a user (created if missing)."""
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Print USER's API token (Authorization: Token <key>), creating it if needed."

    def add_arguments(self, parser):
        parser.add_argument("username")

    def handle(self, *args, username: str, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(token.key)
