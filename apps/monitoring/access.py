"""Who may see monitoring: operator data across every project, so site staff only.

Project roles do not reach here (apps.projects.policy answers questions about one project's
objects); the same NotFound rule applies: anyone else is told nothing exists.
"""

import hmac

from django.conf import settings
from django.http import HttpRequest

from apps.core.errors import NotFound
from apps.monitoring.models import Alert


def is_site_staff(user) -> bool:
    return user is not None and user.is_authenticated and user.is_active and user.is_staff


def require_site_staff(user, token=None) -> None:
    """`token`: the API token the request came with, if any. Tokens carry project permissions
    only, so none of them reaches operator data: a token is refused like a stranger."""
    if token is not None or not is_site_staff(user):
        raise NotFound()


def get_alert(user, alert_id, token=None):
    """The alert, for site staff; NotFound for anyone else, whether it exists or not."""
    require_site_staff(user, token)
    alert = Alert.objects.filter(pk=alert_id).first()
    if alert is None:
        raise NotFound()
    return alert


def require_metrics_reader(request: HttpRequest) -> None:
    """/metrics: a bearer token equal to settings.METRICS_TOKEN (a Prometheus scraper), or a
    site staff session. Without METRICS_TOKEN configured, only staff sessions."""
    expected = settings.METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if expected and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode()):
        return
    require_site_staff(request.user)
