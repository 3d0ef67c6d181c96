"""Reads for project pages and API: query counts stay constant whatever the data size."""

from datetime import datetime

from django.contrib.contenttypes.models import ContentType
from django.db.models import CharField, Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Cast, Coalesce
from guardian.models import UserObjectPermission

from apps.projects import policy
from apps.projects.models import AuditEvent, Membership, Project, Role
from apps.projects.permissions import GRANTABLE, grantable_model

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
    return project.memberships.select_related("user", "custom_role").order_by("user__username")


def project_roles(*, project: Project) -> QuerySet[Role]:
    return project.roles.annotate(member_count=Count("memberships")).order_by("name")


def project_recent_activity(*, project: Project, limit: int = RECENT_ACTIVITY) -> QuerySet[AuditEvent]:
    return project.audit_events.select_related("actor")[:limit]


def project_grants(*, project: Project) -> list[UserObjectPermission]:
    """Object grants on the objects of this project (one query per grantable kind)."""
    grants = []
    for kind in GRANTABLE:
        model = grantable_model(kind)
        object_ids = model.objects.filter(project=project).annotate(pk_text=Cast("pk", CharField())).values("pk_text")
        grants += (UserObjectPermission.objects
                   .filter(content_type=ContentType.objects.get_for_model(model), object_pk__in=object_ids)
                   .select_related("user", "permission", "content_type").order_by("user__username", "id"))
    return grants


def audit_events(*, project: Project, action: str = "", actor: str = "", since: datetime | None = None,
                 until: datetime | None = None) -> QuerySet[AuditEvent]:
    events = project.audit_events.select_related("actor")
    if action:
        events = events.filter(action__startswith=action)
    if actor:
        events = events.filter(actor__username__iexact=actor)
    if since:
        events = events.filter(created_at__gte=since)
    if until:
        events = events.filter(created_at__lt=until)
    return events.order_by("-created_at", "-id")
