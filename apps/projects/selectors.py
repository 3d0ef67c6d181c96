"""Reads for project pages and API: query counts stay constant whatever the data size."""

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from apps.projects import policy
from apps.projects.models import AuditEvent, Membership, Project

RECENT_ACTIVITY = 15


def project_list(*, user, include_archived: bool = False, token=None) -> QuerySet[Project]:
    # A correlated subquery, not JOIN + GROUP BY: it runs only for the rows of the page
    # shown, and the paginator's COUNT(*) leaves it out.
    member_count = (Membership.objects.filter(project=OuterRef("pk")).order_by()
                    .values("project").annotate(n=Count("*")).values("n"))
    projects = policy.visible_projects(user, token).annotate(
        member_count=Coalesce(Subquery(member_count, output_field=IntegerField()), 0))
    if not include_archived:
        projects = projects.filter(archived_at__isnull=True)
    return projects.order_by("name", "id")


def project_members(*, project: Project) -> QuerySet[Membership]:
    return project.memberships.select_related("user").order_by("user__username")


def project_recent_activity(*, project: Project, limit: int = RECENT_ACTIVITY) -> QuerySet[AuditEvent]:
    return project.audit_events.select_related("actor")[:limit]
