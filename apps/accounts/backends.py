"""Authentication backends: local passwords (which can be turned off) and single sign-on sessions."""

import copy

from django.conf import settings
from django.contrib.auth.backends import ModelBackend

from apps.core.principal_cache import PrincipalCache

_session_users = PrincipalCache("session users")


class _SessionUserKept(ModelBackend):
    """The signed-in person's user row, read by every request of a session: kept across requests by
    the process (apps.core.principal_cache), each request getting its own copy."""

    def get_user(self, user_id):
        cached = _session_users.get(user_id, lambda: super(_SessionUserKept, self).get_user(user_id))
        return None if cached is None else copy.copy(cached)


def password_login_allowed(username: str | None) -> bool:
    """With LOCAL_PASSWORD_LOGIN off only the break-glass accounts may use a password (for when the
    identity provider is down or misconfigured); everyone else signs in with a provider."""
    if settings.LOCAL_PASSWORD_LOGIN:
        return True
    return bool(username) and username.lower() in {name.lower() for name in settings.BREAK_GLASS_USERS}


class LocalPasswordBackend(_SessionUserKept):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if username is None:
            username = kwargs.get(self._username_field())
        if not password_login_allowed(username):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    @staticmethod
    def _username_field() -> str:
        from django.contrib.auth import get_user_model

        return get_user_model().USERNAME_FIELD


class SsoBackend(_SessionUserKept):
    """The backend a single-sign-on session is recorded with: it authenticates nothing itself (the
    provider did), and its name in the session tells the re-validation middleware which sessions
    to re-check with their provider."""

    def authenticate(self, request, **kwargs):
        return None
