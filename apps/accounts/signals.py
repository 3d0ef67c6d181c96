"""Ending a session or changing a password closes that person's open websockets."""

from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver

from apps.projects.events import access_revoked


@receiver(user_logged_out)
def close_sockets_on_logout(sender, request, user, **kwargs):
    if user is not None:
        access_revoked(user_id=user.pk, project_id=None)
