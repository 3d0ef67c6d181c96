"""Providers' API keys at rest: MultiFernet over settings.PROVIDER_KEYS (newest first).

The first key encrypts; every key decrypts, so an operator rotates by putting a new key in
front, running `manage.py rotate_provider_keys` (every row re-encrypted with the new key),
then dropping the old one. A key is decrypted only to build the client of one call.
"""

from apps.core.crypto import InvalidToken
from apps.core.crypto import fernet as _fernet


class KeyUnreadable(Exception):
    """The stored key was encrypted with a key no longer in PROVIDER_KEYS."""


def encrypt(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode() if secret else ""


def decrypt(stored: str) -> str:
    if not stored:
        return ""
    try:
        return _fernet().decrypt(stored.encode()).decode()
    except InvalidToken:
        raise KeyUnreadable("The provider's API key cannot be decrypted with PROVIDER_KEYS: "
                            "was the key it was encrypted with removed before rotation?") from None


def rotate(stored: str) -> str:
    """The same secret encrypted with the primary key (MultiFernet.rotate: no plaintext kept)."""
    if not stored:
        return ""
    try:
        return _fernet().rotate(stored.encode()).decode()
    except InvalidToken:
        raise KeyUnreadable("A provider's API key cannot be decrypted with PROVIDER_KEYS.") from None
