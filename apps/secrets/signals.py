"""What the secrets app tells the apps above it (layers used in one direction: it never imports them)."""
from __future__ import annotations

from django.dispatch import Signal

#: The site's key is being rotated (:func:`apps.secrets.services.secrets_rotate`), inside its transaction:
#: a receiver that stores tokens of its own under :mod:`apps.secrets.crypto` re-encrypts them with
#: ``rotate`` (``Callable[[bytes], bytes]``: an old token in, the token under the new key out; raises
#: ``cryptography.fernet.InvalidToken`` for one no key opens) and returns how many it rewrote.
key_rotating = Signal()
