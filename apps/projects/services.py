"""Writes on projects and memberships. Each takes the acting user and checks the policy first."""

from django.db import transaction
from django.utils import timezone

from apps.core.errors import Invalid
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import Membership, Project

MAX_NAME_LENGTH = 120


def _clean_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise Invalid("A project needs a name.", field="name")
    name = " ".join(name.split())
    if len(name) > MAX_NAME_LENGTH:
        raise Invalid(f"Project names are at most {MAX_NAME_LENGTH} characters.", field="name")
    return name


@transaction.atomic
def project_create(*, user, name: str, description: str = "", ip_address: str | None = None) -> Project:
    """Create a project; its creator becomes its Owner."""
    if not user.is_authenticated:
        raise Invalid("Log in to create a project.")
    project = Project.objects.create(name=_clean_name(name), description=description.strip(), created_by=user)
    Membership.objects.create(project=project, user=user, role="owner")
    audit_record(actor=user, action="project.create", project=project, target=project,
                 ip_address=ip_address, after={"name": project.name})
    policy.forget_cached_permissions(user)
    return project


@transaction.atomic
def project_update(*, user, project: Project, name: str | None = None, description: str | None = None,
                   token=None, ip_address: str | None = None) -> Project:
    policy.require(user, "project.edit", project, token)
    before = {"name": project.name, "description": project.description}
    if name is not None:
        project.name = _clean_name(name)
    if description is not None:
        project.description = description.strip()
    project.save(update_fields=["name", "description"])
    audit_record(actor=user, action="project.update", project=project, target=project, ip_address=ip_address,
                 before=before, after={"name": project.name, "description": project.description})
    return project


@transaction.atomic
def project_set_archived(*, user, project: Project, archived: bool, token=None,
                         ip_address: str | None = None) -> Project:
    policy.require(user, "project.archive", project, token)
    project.archived_at = timezone.now() if archived else None
    project.save(update_fields=["archived_at"])
    audit_record(actor=user, action="project.archive" if archived else "project.restore", project=project,
                 target=project, ip_address=ip_address)
    return project
