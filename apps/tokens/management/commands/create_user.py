"""``manage.py create_user NAME``: make a normal (not staff) user account, and say how to sign in."""
import secrets
import sys

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.tokens.services import token_issue

GENERATED_PASSWORD_BYTES = 12  # 16 URL-safe characters


class Command(BaseCommand):
    help = ("Create a normal user NAME (not staff, not a superuser) and print its password, generated "
            "unless --password-stdin; with --token also print a new API token. Staff are made in the admin.")

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--email", default="", help="for release notices (optional)")
        parser.add_argument("--password-stdin", action="store_true",
                            help="read the password from standard input instead of generating one")
        parser.add_argument("--token", action="store_true", help="also issue an API token and print it")

    def handle(self, *args, username: str, email: str = "", password_stdin: bool = False, token: bool = False,
               **options):
        users = get_user_model()
        username = username.strip()
        if not username:
            raise CommandError("username: must not be empty")
        if users.objects.filter(username=username).exists():
            raise CommandError(f"username: a user named {username!r} exists already")
        password = sys.stdin.readline().rstrip("\n") if password_stdin else secrets.token_urlsafe(
            GENERATED_PASSWORD_BYTES)
        user = users(username=username, email=email)
        try:
            user.full_clean(exclude=["password"])
            password_validation.validate_password(password, user)
        except ValidationError as exc:
            raise CommandError("; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in
                                         getattr(exc, "message_dict", {"password": exc.messages}).items())) from None
        user.set_password(password)
        user.save()
        if not password_stdin:
            self.stdout.write(f"password: {password}")
        if token:
            self.stdout.write(f"token: {token_issue(user=user)}")
