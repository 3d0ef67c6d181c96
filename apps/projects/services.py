"""Writes on projects, memberships, custom roles and object grants.

Each service takes the acting user, checks the policy first, writes inside one transaction
and records an audit event. Rules that make this IAM-like:
- nobody grants a permission they do not hold themselves (roles, custom roles, grants);
- owners are made, unmade and removed only by someone with `owner.manage`;
- the last owner cannot leave, be removed or be demoted;
- nobody changes their own role.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Model
from django.utils import timezone
from guardian.models import UserObjectPermission
from guardian.shortcuts import assign_perm, remove_perm

from apps.core.errors import Conflict, Invalid, NotFound, PermissionDenied
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.projects.models import SERVING_LIMIT_FIELDS, Membership, Project, Role
from apps.projects.permissions import BUILTIN_ROLES, PERMISSIONS, codename, kind_of

MAX_NAME_LENGTH = 120
User = get_user_model()


def _clean_name(name: str, what: str = "project", limit: int = MAX_NAME_LENGTH) -> str:
    if not isinstance(name, str) or not name.strip():
        raise Invalid(f"A {what} needs a name.", field="name")
    name = " ".join(name.split())
    if len(name) > limit:
        raise Invalid(f"{what.capitalize()} names are at most {limit} characters.", field="name")
    return name


# --- projects -----------------------------------------------------------------------------------

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


UNCHANGED = object()


@transaction.atomic
def project_update(*, user, project: Project, name: str | None = None, description: str | None = None,
                   gpu_hour_budget=UNCHANGED, token=None, ip_address: str | None = None, **serving_limits) -> Project:
    """`serving_limits`: any of SERVING_LIMIT_FIELDS, a whole number or None (the site's default)."""
    policy.require(user, "project.edit", project, token)
    changed = ["name", "description", "gpu_hour_budget"]
    before = {name: getattr(project, name) for name in changed + list(serving_limits)}
    if name is not None:
        project.name = _clean_name(name)
    if description is not None:
        project.description = description.strip()
    if gpu_hour_budget is not UNCHANGED:
        if gpu_hour_budget is not None and (isinstance(gpu_hour_budget, bool) or not isinstance(
                gpu_hour_budget, (int, float)) or not 0 <= gpu_hour_budget <= 1_000_000):
            raise Invalid("The GPU-hour budget is a number of hours from 0 to 1,000,000, or empty for none.",
                          field="gpu_hour_budget")
        project.gpu_hour_budget = gpu_hour_budget
    for name, value in serving_limits.items():
        if name not in SERVING_LIMIT_FIELDS:
            raise Invalid(f"Unknown project setting {name}.", field=name)
        highest = SERVING_LIMIT_FIELDS[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= highest):
            raise Invalid(f"{name} is a whole number from 1 to {highest:,}, or empty for the site's default.",
                          field=name)
        setattr(project, name, value)
        changed.append(name)
    project.save(update_fields=changed)
    audit_record(actor=user, action="project.update", project=project, target=project, ip_address=ip_address,
                 before=before, after={name: getattr(project, name) for name in before})
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


@transaction.atomic
def project_delete(*, user, project: Project, confirm_name: str, token=None, ip_address: str | None = None) -> None:
    policy.require(user, "project.delete", project, token)
    if confirm_name != project.name:
        raise Invalid("Type the project's exact name to confirm deletion.", field="confirm_name")
    audit_record(actor=user, action="project.delete", project=None, target=project, ip_address=ip_address,
                 before={"id": project.pk, "name": project.name})
    project.delete()


# --- roles ----------------------------------------------------------------------------------------

def resolve_role(project: Project, role: str) -> tuple[str, Role | None, frozenset[str]]:
    """A role named by a person or an API call: a built-in key ("scientist") or a custom role's
    name. Returns (built-in key or "", custom role or None, its permissions)."""
    if not isinstance(role, str) or not role.strip():
        raise Invalid("Choose a role.", field="role")
    key = role.strip().lower()
    if key in BUILTIN_ROLES:
        return key, None, BUILTIN_ROLES[key].permissions
    custom = project.roles.filter(name__iexact=role.strip()).first()
    if custom is None:
        raise Invalid(f"There is no role called “{role.strip()}” in this project.", field="role")
    return "", custom, custom.permission_set


def _require_holds(actor_permissions: frozenset[str], wanted: frozenset[str]) -> None:
    missing = sorted(wanted - actor_permissions)
    if missing:
        raise PermissionDenied(missing[0], "You cannot grant permissions you do not hold yourself: "
                                           + ", ".join(missing) + ".")


def _clean_permissions(permissions) -> frozenset[str]:
    if not isinstance(permissions, (list, tuple, set, frozenset)) or not all(isinstance(p, str) for p in permissions):
        raise Invalid("Permissions are a list of permission names.", field="permissions")
    unknown = sorted(set(permissions) - set(PERMISSIONS))
    if unknown:
        raise Invalid(f"Unknown permission(s): {', '.join(unknown)}.", field="permissions")
    if not permissions:
        raise Invalid("Tick at least one permission.", field="permissions")
    chosen = frozenset(permissions)
    return chosen | {"project.view"}  # a role always lets its members see the project


def _clean_role_name(project: Project, name: str, exclude: Role | None = None) -> str:
    name = _clean_name(name, "role", 60)
    if name.lower() in BUILTIN_ROLES or name.lower() in {r.name.lower() for r in BUILTIN_ROLES.values()}:
        raise Invalid(f"“{name}” is a built-in role; choose another name.", field="name")
    clash = project.roles.filter(name__iexact=name)
    if exclude is not None:
        clash = clash.exclude(pk=exclude.pk)
    if clash.exists():
        raise Invalid(f"This project already has a role called “{name}”.", field="name")
    return name


@transaction.atomic
def role_create(*, actor, project: Project, name: str, permissions, description: str = "", token=None,
                ip_address: str | None = None) -> Role:
    policy.require(actor, "role.manage", project, token)
    chosen = _clean_permissions(permissions)
    _require_holds(policy.project_permissions(actor, project, token), chosen)
    role = Role.objects.create(project=project, name=_clean_role_name(project, name),
                               description=(description or "").strip()[:300],
                               permissions=sorted(chosen), created_by=actor)
    audit_record(actor=actor, action="role.create", project=project, target=role, ip_address=ip_address,
                 after={"name": role.name, "permissions": role.permissions})
    return role


@transaction.atomic
def role_update(*, actor, role: Role, name: str | None = None, permissions=None, description: str | None = None,
                token=None, ip_address: str | None = None) -> Role:
    """Change a custom role; its members' permissions change with it at once."""
    project = role.project
    policy.require(actor, "role.manage", project, token)
    before = {"name": role.name, "permissions": role.permissions}
    if name is not None:
        role.name = _clean_role_name(project, name, exclude=role)
    if permissions is not None:
        chosen = _clean_permissions(permissions)
        # Both what is added and what is taken away must be within the actor's own powers.
        _require_holds(policy.project_permissions(actor, project, token), chosen ^ role.permission_set)
        role.permissions = sorted(chosen)
    if description is not None:
        role.description = description.strip()[:300]
    role.save()
    audit_record(actor=actor, action="role.update", project=project, target=role, ip_address=ip_address,
                 before=before, after={"name": role.name, "permissions": role.permissions})
    return role


@transaction.atomic
def role_delete(*, actor, role: Role, token=None, ip_address: str | None = None) -> None:
    policy.require(actor, "role.manage", role.project, token)
    if role.memberships.exists():
        raise Conflict(f"“{role.name}” is still assigned to members; give them another role first.")
    audit_record(actor=actor, action="role.delete", project=role.project, target=role, ip_address=ip_address,
                 before={"name": role.name, "permissions": role.permissions})
    role.delete()


# --- memberships --------------------------------------------------------------------------------

def _owner_count(project: Project) -> int:
    return Membership.objects.filter(project=project, role="owner").count()


def _lock_owners(project: Project) -> None:
    # Serialise owner changes per project so two admins cannot demote the last two owners at once.
    Project.objects.select_for_update().filter(pk=project.pk).first()


def check_role_assignable(*, actor, project: Project, key: str, custom: Role | None, token=None) -> None:
    """Raise unless `actor` may hand out this role: owners only by owners, and never a role
    holding a permission the actor lacks."""
    actor_permissions = policy.project_permissions(actor, project, token)
    if key == "owner" and "owner.manage" not in actor_permissions:
        raise PermissionDenied("owner.manage", "Only owners can make owners.")
    _require_holds(actor_permissions, custom.permission_set if custom else BUILTIN_ROLES[key].permissions)


@transaction.atomic
def member_add(*, actor, project: Project, username: str, role: str, token=None,
               ip_address: str | None = None) -> Membership:
    policy.require(actor, "member.manage", project, token)
    key, custom, _ = resolve_role(project, role)
    check_role_assignable(actor=actor, project=project, key=key, custom=custom, token=token)
    user = User.objects.filter(username__iexact=(username or "").strip(), is_active=True).first()
    if user is None:
        raise Invalid(f"No account is called “{username}”. Invite them instead.", field="username")
    if Membership.objects.filter(project=project, user=user).exists():
        raise Invalid(f"{user.username} is already a member.", field="username")
    membership = Membership.objects.create(project=project, user=user, role=key, custom_role=custom)
    audit_record(actor=actor, action="member.add", project=project, target=membership, ip_address=ip_address,
                 after={"user": user.username, "role": membership.role_name})
    return membership


@transaction.atomic
def member_change_role(*, actor, membership: Membership, role: str, token=None,
                       ip_address: str | None = None) -> Membership:
    project = membership.project
    policy.require(actor, "member.manage", project, token)
    if membership.user_id == actor.pk:
        raise PermissionDenied("member.manage", "You cannot change your own role.")
    actor_permissions = policy.project_permissions(actor, project, token)
    key, custom, wanted = resolve_role(project, role)
    if (key == "owner" or membership.role == "owner") and "owner.manage" not in actor_permissions:
        raise PermissionDenied("owner.manage", "Only owners can make or unmake owners.")
    _require_holds(actor_permissions, wanted | membership.permission_set)
    _lock_owners(project)
    if membership.role == "owner" and key != "owner" and _owner_count(project) <= 1:
        raise Conflict("This is the project's last owner: make someone else an owner first.")
    before = {"user": membership.user.username, "role": membership.role_name}
    membership.role, membership.custom_role = key, custom
    membership.save(update_fields=["role", "custom_role"])
    audit_record(actor=actor, action="member.role_change", project=project, target=membership,
                 ip_address=ip_address, before=before, after={"user": membership.user.username,
                                                              "role": membership.role_name})
    return membership


@transaction.atomic
def member_remove(*, actor, membership: Membership, token=None, ip_address: str | None = None) -> None:
    """Remove a member (or leave, when actor is the member). Access ends at once: their
    permissions are computed per request, and their tokens act through them."""
    project = membership.project
    leaving = membership.user_id == actor.pk
    if leaving and token is not None and not policy.can(actor, "member.manage", project, token):
        raise PermissionDenied("member.manage", "An API token needs member.manage to leave a project for you.")
    if not leaving:
        policy.require(actor, "member.manage", project, token)
        actor_permissions = policy.project_permissions(actor, project, token)
        if membership.role == "owner" and "owner.manage" not in actor_permissions:
            raise PermissionDenied("owner.manage", "Only owners can remove owners.")
        _require_holds(actor_permissions, membership.permission_set)
    _lock_owners(project)
    if membership.role == "owner" and _owner_count(project) <= 1:
        raise Conflict("This is the project's last owner: make someone else an owner first.")
    user = membership.user
    audit_record(actor=actor, action="member.leave" if leaving else "member.remove", project=project,
                 target=membership, ip_address=ip_address, before={"user": user.username,
                                                                   "role": membership.role_name})
    membership.delete()
    from apps.projects.events import access_revoked

    transaction.on_commit(lambda: access_revoked(user_id=user.pk, project_id=project.pk))


# --- object grants ------------------------------------------------------------------------------

def _grantable(obj: Model, permission: str) -> Permission:
    kind = kind_of(obj)
    if kind is None:
        raise Invalid("Only datasets and models can be shared one by one.", field="object_type")
    if not isinstance(permission, str) or not permission.startswith(f"{kind}.") or permission not in PERMISSIONS:
        raise Invalid(f"“{permission}” is not a permission on a {kind}.", field="permission")
    return Permission.objects.get(content_type=ContentType.objects.get_for_model(obj), codename=codename(permission))


@transaction.atomic
def grant_create(*, actor, obj: Model, username: str, permission: str, token=None,
                 ip_address: str | None = None) -> UserObjectPermission:
    """Give one person one permission on one object, without a project role."""
    project = policy.project_of(obj)
    policy.require(actor, "member.manage", project, token)
    _grantable(obj, permission)
    _require_holds(policy.permissions_on(actor, obj, token), frozenset({permission}))
    user = User.objects.filter(username__iexact=(username or "").strip(), is_active=True).first()
    if user is None:
        raise Invalid(f"No account is called “{username}”.", field="username")
    grant = assign_perm(codename(permission), user, obj)
    audit_record(actor=actor, action="grant.create", project=project, target=obj, ip_address=ip_address,
                 after={"user": user.username, "permission": permission})
    return grant


@transaction.atomic
def grant_revoke(*, actor, grant_id: int, project: Project, token=None, ip_address: str | None = None) -> None:
    policy.require(actor, "member.manage", project, token)
    grant = UserObjectPermission.objects.select_related("permission", "user", "content_type").filter(
        pk=grant_id).first()
    obj = grant.content_object if grant is not None else None
    if obj is None or policy.project_of(obj).pk != project.pk:
        raise NotFound()
    permission = f"{grant.permission.codename.replace('_', '.', 1)}"
    _require_holds(policy.permissions_on(actor, obj, token), frozenset({permission}))
    remove_perm(grant.permission.codename, grant.user, obj)
    audit_record(actor=actor, action="grant.revoke", project=project, target=obj, ip_address=ip_address,
                 before={"user": grant.user.username, "permission": permission})
    from apps.projects.events import access_revoked

    user_id = grant.user_id
    transaction.on_commit(lambda: access_revoked(user_id=user_id, project_id=project.pk))


# --- memberships from identity-provider groups ----------------------------------------------------

def _role_rank(key: str, custom: Role | None) -> tuple[int, int]:
    order = list(BUILTIN_ROLES)  # owner first
    permissions = custom.permission_set if custom else BUILTIN_ROLES[key].permissions
    return (len(permissions), -order.index(key) if key else -len(order))


def strongest_role(roles: list[tuple[str, Role | None]]) -> tuple[str, Role | None]:
    """Of the roles several groups give on one project, the one holding the most permissions."""
    return max(roles, key=lambda pair: _role_rank(*pair))


@transaction.atomic
def memberships_sync_from_groups(*, user, wanted: dict[int, tuple[str, Role | None]], provider_id: str,
                                 ip_address: str | None = None) -> list[str]:
    """Make the user's group-made memberships (source GROUPS) match `wanted` ({project id: (built-in
    key or "", custom role or None)}): add, change and remove them. Memberships added by hand are
    never touched (and a project where the user already has one gets no second). The last owner of a
    project is kept rather than removed or demoted. Each change is audited with no actor (the
    provider's groups decided it). Returns the changes, as audit actions."""
    changes = []
    existing = {m.project_id: m for m in Membership.objects.select_for_update(of=("self",)).select_related(
        "custom_role", "project").filter(user=user)}
    revoked = []
    via = {"source": Membership.Source.GROUPS, "provider": provider_id}
    for project_id, (key, custom) in wanted.items():
        membership = existing.get(project_id)
        if membership is None:
            membership = Membership.objects.create(project_id=project_id, user=user, role=key, custom_role=custom,
                                                   source=Membership.Source.GROUPS)
            audit_record(actor=None, action="member.add", project=membership.project, target=membership,
                         ip_address=ip_address, after={"user": user.username, "role": membership.role_name, **via})
            changes.append("member.add")
        elif membership.source == Membership.Source.GROUPS and (membership.role, membership.custom_role_id) != (
                key, custom.pk if custom else None):
            if membership.role == "owner" and key != "owner":
                _lock_owners(membership.project)
                if _owner_count(membership.project) <= 1:
                    continue
            before = {"user": user.username, "role": membership.role_name}
            membership.role, membership.custom_role = key, custom
            membership.save(update_fields=["role", "custom_role"])
            audit_record(actor=None, action="member.role_change", project=membership.project, target=membership,
                         ip_address=ip_address, before=before,
                         after={"user": user.username, "role": membership.role_name, **via})
            changes.append("member.role_change")
            revoked.append(project_id)
    for project_id, membership in existing.items():
        if membership.source != Membership.Source.GROUPS or project_id in wanted:
            continue
        if membership.role == "owner":
            _lock_owners(membership.project)
            if _owner_count(membership.project) <= 1:
                continue
        audit_record(actor=None, action="member.remove", project=membership.project, target=membership,
                     ip_address=ip_address, before={"user": user.username, "role": membership.role_name}, after=via)
        membership.delete()
        changes.append("member.remove")
        revoked.append(project_id)
    if changes:
        policy.forget_cached_permissions(user)
    if revoked:
        from apps.projects.events import access_revoked

        user_id = user.pk
        transaction.on_commit(lambda: [access_revoked(user_id=user_id, project_id=p) for p in revoked])
    return changes
