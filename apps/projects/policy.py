"""The one policy layer: may this principal do this action on this object?

Views, API endpoints, websocket consumers and task launches all ask these functions.
A principal is a user, optionally narrowed by the API token they authenticated with.
Someone who may not see a project gets NotFound (no hint that it exists); a member who
lacks a permission gets PermissionDenied naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import QuerySet

from apps.core.errors import NotFound, PermissionDenied
from apps.projects.models import Membership, Project
from apps.projects.permissions import BUILTIN_ROLES

if TYPE_CHECKING:
    from apps.accounts.models import ApiToken

_CACHE_ATTR = "_workbench_project_permissions"


def project_permissions(user, project: Project, token: ApiToken | None = None) -> frozenset[str]:
    """The permissions `user` holds on `project` (empty for non-members), narrowed by `token`."""
    if user is None or not user.is_authenticated or not user.is_active:
        return frozenset()
    cache = user.__dict__.setdefault(_CACHE_ATTR, {})  # per request: the user object is per request
    if project.pk not in cache:
        role = (Membership.objects.filter(project_id=project.pk, user_id=user.pk)
                .values_list("role", flat=True).first())
        cache[project.pk] = BUILTIN_ROLES[role].permissions if role in BUILTIN_ROLES else frozenset()
    permissions = cache[project.pk]
    if token is not None:
        permissions = token.narrow(permissions, project_id=project.pk)
    return permissions


def forget_cached_permissions(user) -> None:
    user.__dict__.pop(_CACHE_ATTR, None)


def can(user, permission: str, project: Project, token: ApiToken | None = None) -> bool:
    return permission in project_permissions(user, project, token)


def require(user, permission: str, project: Project, token: ApiToken | None = None) -> None:
    """Raise NotFound when the project is invisible to the principal, PermissionDenied when
    it is visible but `permission` is missing."""
    permissions = project_permissions(user, project, token)
    if "project.view" not in permissions:
        raise NotFound()
    if permission not in permissions:
        raise PermissionDenied(permission)


def visible_projects(user, token: ApiToken | None = None) -> QuerySet[Project]:
    """Projects the principal is a member of (one query; no global permission widens it)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Project.objects.none()
    projects = Project.objects.filter(memberships__user=user)
    if token is not None and token.project_id is not None:
        projects = projects.filter(pk=token.project_id)
    return projects


def get_project(user, project_id, permission: str = "project.view", token: ApiToken | None = None) -> Project:
    """Fetch a project for a principal, enforcing `permission`. Unknown and invisible look alike."""
    try:
        project = Project.objects.get(pk=int(project_id))
    except (Project.DoesNotExist, ValueError, TypeError):
        raise NotFound() from None
    require(user, permission, project, token)
    return project
