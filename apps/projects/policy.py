"""The one policy layer: may this principal do this action on this object?

Views, API endpoints, websocket consumers and task launches all ask these functions.
A principal is a user, optionally narrowed by the API token they authenticated with. What
they hold on an object is their project role's permissions plus any object grant they were
given on it (django-guardian), intersected with the token's permissions.

Someone who may not see an object gets NotFound (no hint that it exists); someone who can
see it but lacks the permission gets PermissionDenied naming it. A Django global permission
never widens anything here: only memberships and object grants count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib.contenttypes.models import ContentType
from django.db.models import BigIntegerField, Model, QuerySet
from django.db.models.functions import Cast
from guardian.models import UserObjectPermission

from apps.core.errors import NotFound, PermissionDenied
from apps.core.principal_cache import PrincipalCache
from apps.projects.models import Membership, Project
from apps.projects.permissions import codename, kind_of, permission_from_codename

if TYPE_CHECKING:
    from apps.accounts.models import ApiToken

_CACHE_ATTR = "_workbench_project_permissions"


def _active(user) -> bool:
    return user is not None and user.is_authenticated and user.is_active


_memberships: PrincipalCache[frozenset[str]] = PrincipalCache("project permissions")


def _role_permissions(user, project_id: int) -> frozenset[str]:
    """What the user's membership grants on a project: kept on the (per-request) user object, and
    across requests by the process (apps.core.principal_cache)."""
    cache = user.__dict__.setdefault(_CACHE_ATTR, {})
    if project_id not in cache:
        cache[project_id] = _memberships.get((project_id, user.pk), lambda: _membership_permissions(project_id, user.pk))
    return cache[project_id]


def _membership_permissions(project_id: int, user_id: int) -> frozenset[str]:
    membership = (Membership.objects.select_related("custom_role")
                  .filter(project_id=project_id, user_id=user_id).first())
    return membership.permission_set if membership else frozenset()


def forget_cached_permissions(user) -> None:
    user.__dict__.pop(_CACHE_ATTR, None)


def project_of(obj: Model) -> Project:
    return obj if isinstance(obj, Project) else obj.project


def granted_permissions(user, obj: Model) -> frozenset[str]:
    """Permissions granted to the user on this one object (not through a role)."""
    if not _active(user) or isinstance(obj, Project) or kind_of(obj) is None:
        return frozenset()  # only the GRANTABLE kinds can carry a grant: no query for the others
    codes = UserObjectPermission.objects.filter(
        user_id=user.pk, content_type=ContentType.objects.get_for_model(obj), object_pk=str(obj.pk),
    ).values_list("permission__codename", flat=True)
    return frozenset(permission_from_codename(code) for code in codes)


def _permissions_and_grants(user, obj: Model, token: ApiToken | None) -> tuple[frozenset[str], frozenset[str]]:
    """(everything the principal may do on obj, the part of it that comes from object grants)."""
    if not _active(user):
        return frozenset(), frozenset()
    project = project_of(obj)
    grants = granted_permissions(user, obj)
    permissions = _role_permissions(user, project.pk) | grants
    if token is not None:
        permissions = token.narrow(permissions, project_id=project.pk)
        grants = grants & permissions
    return permissions, grants


def permissions_on(user, obj: Model, token: ApiToken | None = None) -> frozenset[str]:
    """Everything the principal may do on `obj` (a project or an object inside one)."""
    return _permissions_and_grants(user, obj, token)[0]


def project_permissions(user, project: Project, token: ApiToken | None = None) -> frozenset[str]:
    return permissions_on(user, project, token)


def can(user, permission: str, obj: Model, token: ApiToken | None = None) -> bool:
    return permission in permissions_on(user, obj, token)


def require(user, permission: str, obj: Model, token: ApiToken | None = None) -> None:
    """Raise NotFound when the principal may not know `obj` exists, PermissionDenied when it
    may see it but lacks `permission`."""
    permissions, grants = _permissions_and_grants(user, obj, token)
    if not ("project.view" in permissions or grants):
        raise NotFound()
    if permission not in permissions:
        raise PermissionDenied(permission)


def visible_projects(user, token: ApiToken | None = None) -> QuerySet[Project]:
    """Projects the principal is a member of (one query)."""
    if not _active(user):
        return Project.objects.none()
    projects = Project.objects.filter(memberships__user=user)
    if token is not None:
        if "project.view" not in token.permissions:
            return Project.objects.none()
        if token.project_id is not None:
            projects = projects.filter(pk=token.project_id)
    return projects


def project_ids_with(user, permission: str) -> list[int]:
    """The projects where the user's role holds `permission` (one query), for cross-project lists."""
    if not _active(user):
        return []
    memberships = Membership.objects.filter(user=user).select_related("custom_role")
    return [m.project_id for m in memberships if permission in m.permission_set]


def get_project(user, project_id, permission: str = "project.view", token: ApiToken | None = None) -> Project:
    """Fetch a project for a principal, enforcing `permission`. Unknown and invisible look alike."""
    try:
        project = Project.objects.get(pk=int(project_id))
    except (Project.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound() from None
    require(user, permission, project, token)
    return project


def get_object(user, model: type[Model], pk, permission: str, token: ApiToken | None = None,
               project_id=None, related: tuple[str, ...] = ()) -> Model:
    """Fetch an object for a principal, enforcing `permission`; with `project_id` (from a URL)
    the object must also belong to that project. `related`: more relations to fetch with it."""
    try:
        objects = model.objects.select_related("project", *related)
        if project_id is not None:
            objects = objects.filter(project_id=int(project_id))
        obj = objects.get(pk=int(pk))
    except (model.DoesNotExist, ValueError, TypeError, OverflowError):
        raise NotFound() from None
    require(user, permission, obj, token)
    return obj


def _granted_ids(user, model: type[Model], permission: str) -> QuerySet:
    return (UserObjectPermission.objects
            .filter(user_id=user.pk, content_type=ContentType.objects.get_for_model(model),
                    permission__codename=codename(permission))
            .annotate(object_id=Cast("object_pk", BigIntegerField())).values("object_id"))


def visible_in_project(user, model: type[Model], project: Project, permission: str,
                       token: ApiToken | None = None) -> QuerySet:
    """Objects of `model` in `project` the principal holds `permission` on: all of them through
    a role, or the ones granted to them. A constant number of queries whatever the data size."""
    if not _active(user) or (token is not None and not token.narrow(frozenset({permission}),
                                                                    project_id=project.pk)):
        return model.objects.none()
    if permission in _role_permissions(user, project.pk):
        return model.objects.filter(project=project)
    return model.objects.filter(project=project, pk__in=_granted_ids(user, model, permission))


def shared_with(user, model: type[Model], permission: str, token: ApiToken | None = None) -> QuerySet:
    """Objects granted to the user one by one (the "shared with me" list), within the token's reach."""
    if not _active(user) or (token is not None and permission not in token.permissions):
        return model.objects.none()
    objects = model.objects.filter(pk__in=_granted_ids(user, model, permission)).select_related("project")
    if token is not None and token.project_id is not None:
        objects = objects.filter(project_id=token.project_id)
    return objects
