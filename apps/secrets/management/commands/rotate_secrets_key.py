"""``manage.py rotate_secrets_key``: re-encrypt every secret under a new key (issue 23).

With the key file (no ``E31_SECRETS_KEY``): a new key is generated and written first in the file
beside the old ones, every value is re-encrypted under it, then the old keys are dropped from the
file. With ``E31_SECRETS_KEY``: put the new key first (``E31_SECRETS_KEY=NEW,OLD``; a new key from
``--generate``), run this, then drop the old key from the variable.
"""
from __future__ import annotations

from cryptography.fernet import Fernet
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.secrets import crypto
from apps.secrets.services import secrets_rotate


class Command(BaseCommand):
    help = "Re-encrypt every stored secret under a new key (the key file's, or E31_SECRETS_KEY's first)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--generate", action="store_true",
                            help="Only print a new Fernet key (for E31_SECRETS_KEY) and change nothing.")

    def handle(self, *args, generate: bool = False, **options) -> None:
        if generate:
            self.stdout.write(Fernet.generate_key().decode())
            return
        try:
            if settings.E31_SECRETS_KEY:
                count = secrets_rotate(keys=crypto.keys())
                self.stdout.write(f"{count} secret(s) re-encrypted under the first key of E31_SECRETS_KEY; "
                                  "the other keys may now be dropped from it.")
                return
            old = crypto.keys()
            new = Fernet.generate_key()
            crypto.file_keys_write([new, *old])  # a process starting meanwhile can open both
            count = secrets_rotate(keys=[new, *old])
            crypto.file_keys_write([new])
        except crypto.SecretsKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{count} secret(s) re-encrypted under a new key in {crypto.key_file()}; "
                          "the old key is gone.")
