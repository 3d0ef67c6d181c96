"""Reads for project pages and API: query counts stay constant whatever the data size."""

from django.db.models import Count, QuerySet

from apps.projects import policy
from apps.projects.models import AuditEvent, Membership, Project

RECENT_ACTIVITY = 15


def project_list(*, user, include_archived: bool = False, token=None) -> QuerySet[Project]:
    projects = policy.visible_projects(user, token).annotate(member_count=Count("memberships", distinct=True))
    if not include_archived:
        projects = projects.filter(archived_at__isnull=True)
    return projects.order_by("name", "id")


def project_members(*, project: Project) -> QuerySet[Membership]:
    return project.memberships.select_related("user").order_by("user__username")


def project_recent_activity(*, project: Project, limit: int = RECENT_ACTIVITY) -> QuerySet[AuditEvent]:
    return project.audit_events.select_related("actor")[:limit]
