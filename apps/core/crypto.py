"""Secrets at rest: MultiFernet over settings.PROVIDER_KEYS (newest first).

The first key encrypts; every key decrypts, so an operator rotates by putting a new key in front,
re-encrypting (`manage.py rotate_provider_keys` for the providers' API keys; a single-sign-on
session's refresh token is encrypted afresh at each re-check), then dropping the old one.
"""

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["InvalidToken", "fernet"]


def fernet() -> MultiFernet:
    keys = settings.PROVIDER_KEYS
    if not keys:
        raise ImproperlyConfigured("PROVIDER_KEYS must be set to store secrets encrypted "
                                   "(python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')")
    try:
        return MultiFernet([Fernet(key.encode() if isinstance(key, str) else key) for key in keys])
    except ValueError:
        raise ImproperlyConfigured("PROVIDER_KEYS holds a value that is not a Fernet key "
                                   "(32 url-safe base64-encoded bytes)") from None
