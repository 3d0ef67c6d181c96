"""Ending a session or changing a password closes that person's open websockets; a changed user or
API token outdates what every process keeps of them (apps.core.principal_cache)."""

from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from apps.accounts.models import ApiToken
from apps.core import principal_cache
from apps.projects.events import access_revoked


@receiver([post_save, post_delete], sender=ApiToken, dispatch_uid="workbench.outdate_tokens")
@receiver([post_save, post_delete], sender=settings.AUTH_USER_MODEL, dispatch_uid="workbench.outdate_users")
def outdate_principals(sender, **kwargs):
    principal_cache.outdate()


@receiver(user_logged_out)
def close_sockets_on_logout(sender, request, user, **kwargs):
    if user is not None:
        # Django sends this signal before it flushes the session: the stored session goes first, or
        # a socket re-checking it at once would still find it and stay open.
        session = getattr(request, "session", None)
        if session is not None:
            session.delete()
        access_revoked(user_id=user.pk, project_id=None)


def remember_sso_session(sender, request, user, sociallogin=None, **kwargs):
    """A sign-in through a provider: keep what re-checking the session needs (apps/accounts/sso.py)."""
    if sociallogin is not None:
        from apps.accounts.sso import remember_session

        remember_session(request, sociallogin)


def connect_sso_signals() -> None:
    from allauth.account.signals import user_logged_in

    user_logged_in.connect(remember_sso_session, dispatch_uid="workbench.remember_sso_session")
