"""Live updates of the monitoring dashboard: everything that changes what it shows right away
(an alert acknowledged, resolved, opened) pokes the `monitoring` group, and each open
dashboard sends its browser a fresh snapshot. Between pokes the dashboards refresh on a timer."""

from django.db import transaction

from apps.projects.events import send

DASHBOARD_GROUP = "monitoring"


def dashboard_changed() -> None:
    """After the current transaction commits: the snapshot the dashboards read must show it."""
    transaction.on_commit(lambda: send(DASHBOARD_GROUP, {"type": "dashboard.changed"}))
