"""Who may manage providers: site staff, signed in (not through an API token, which carries
project permissions only). Anyone else is told nothing exists, as for monitoring."""

from apps.core.errors import NotFound


def is_site_staff(user) -> bool:
    return user is not None and user.is_authenticated and user.is_active and user.is_staff


def require_site_staff(user, token=None) -> None:
    if token is not None or not is_site_staff(user):
        raise NotFound()
