"""Writes on users, invitations and API tokens."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.models import ApiToken, Invitation, hash_secret
from apps.core.errors import Gone, Invalid, NotFound, PermissionDenied
from apps.core.http import client_ip
from apps.projects.audit import audit_record
from apps.projects.models import Membership

User = get_user_model()


def _require_site_admin(user) -> None:
    if not (user.is_authenticated and user.is_active and user.is_staff):
        raise PermissionDenied("site.admin", "Only site admins can manage user accounts.")


def _clean_username(username: str) -> str:
    username = (username or "").strip()
    try:
        User.username_validator(username)
    except ValidationError:
        raise Invalid("Usernames may contain letters, digits and @/./+/-/_ only.", field="username") from None
    if not username or len(username) > 150:
        raise Invalid("A username is 1 to 150 characters.", field="username")
    if User.objects.filter(username__iexact=username).exists():
        raise Invalid(f"The username “{username}” is taken.", field="username")
    return username


def _validate_password(password: str, user) -> None:
    try:
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise Invalid(" ".join(exc.messages), field="password") from None


@transaction.atomic
def user_create(*, by, username: str, email: str = "", password: str, is_staff: bool = False,
                ip_address: str | None = None):
    _require_site_admin(by)
    user = User(username=_clean_username(username), email=email.strip(), is_staff=is_staff)
    _validate_password(password, user)
    user.set_password(password)
    user.save()
    audit_record(actor=by, action="user.create", target=user, ip_address=ip_address,
                 after={"username": user.username, "is_staff": is_staff})
    return user


@transaction.atomic
def invitation_create(*, by, username: str, email: str = "", ip_address: str | None = None) -> tuple[Invitation, str]:
    """Create a one-time invitation. Returns it with the raw secret, which is never stored."""
    _require_site_admin(by)
    username = _clean_username(username)
    if Invitation.objects.filter(username__iexact=username, used_at__isnull=True,
                                 expires_at__gt=timezone.now()).exists():
        raise Invalid(f"“{username}” already has a pending invitation.", field="username")
    raw = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        username=username, email=email.strip(), token_hash=hash_secret(raw), created_by=by,
        expires_at=timezone.now() + settings.INVITATION_TTL,
    )
    audit_record(actor=by, action="invitation.create", target=invitation, ip_address=ip_address,
                 after={"username": username})
    return invitation, raw


@transaction.atomic
def project_invitation_create(*, by, project, username: str, role: str, email: str = "", token=None,
                              ip_address: str | None = None) -> tuple[Invitation, str]:
    """A project admin invites someone without an account: the link creates the account and
    the membership together. The role obeys the same rules as adding a member."""
    from apps.projects import policy
    from apps.projects.services import check_role_assignable, resolve_role

    policy.require(by, "member.manage", project, token)
    key, custom, _ = resolve_role(project, role)
    check_role_assignable(actor=by, project=project, key=key, custom=custom, token=token)
    username = _clean_username(username)
    if Invitation.objects.filter(username__iexact=username, used_at__isnull=True,
                                 expires_at__gt=timezone.now()).exists():
        raise Invalid(f"“{username}” already has a pending invitation.", field="username")
    raw = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        username=username, email=email.strip(), token_hash=hash_secret(raw), created_by=by, project=project,
        role=key or custom.name, expires_at=timezone.now() + settings.INVITATION_TTL,
    )
    audit_record(actor=by, action="invitation.create", project=project, target=invitation, ip_address=ip_address,
                 after={"username": username, "role": invitation.role})
    return invitation, raw


def invitation_for_token(raw: str) -> Invitation:
    """The pending invitation behind a link; NotFound for unknown links, Gone for spent ones."""
    invitation = Invitation.objects.filter(token_hash=hash_secret(raw or "")).first()
    if invitation is None:
        raise NotFound("This invitation link is not valid.")
    if invitation.used_at is not None:
        raise Gone("This invitation was already used. Log in, or ask your admin for a new link.")
    if invitation.is_expired:
        raise Gone("This invitation has expired. Ask your admin for a new link.")
    return invitation


def invitation_accept(*, raw: str, password: str, request=None):
    """Create the invited account with `password`; the link works once."""
    with transaction.atomic():
        invitation = invitation_for_token(raw)
        # Lock the row so two submissions of the same link cannot both create an account.
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.used_at is not None:
            raise Gone("This invitation was already used. Log in, or ask your admin for a new link.")
        user = User(username=invitation.username, email=invitation.email)
        _validate_password(password, user)
        user.set_password(password)
        try:
            with transaction.atomic():
                user.save()
        except IntegrityError:
            raise Invalid(f"The username “{invitation.username}” was taken meanwhile; ask for a new invitation.",
                          field="username") from None
        invitation.used_at = timezone.now()
        invitation.user = user
        invitation.save(update_fields=["used_at", "user"])
        if invitation.project_id and invitation.role:
            from apps.projects.services import resolve_role

            try:
                key, custom, _ = resolve_role(invitation.project, invitation.role)
            except Invalid:  # the custom role was deleted meanwhile: join with the least access
                key, custom = "viewer", None
            Membership.objects.create(project_id=invitation.project_id, user=user, role=key, custom_role=custom)
        audit_record(actor=user, action="invitation.accept", project=invitation.project, target=invitation,
                     ip_address=client_ip(request) if request else None)
    return user


MAX_TOKEN_LIFETIME_DAYS = 366


@transaction.atomic
def token_create(*, user, name: str, permissions, project=None, expires_at=None, token=None,
                 ip_address: str | None = None) -> tuple[ApiToken, str]:
    """Create an API token with a subset of the creator's permissions.

    Personal tokens (project=None) act in any project of their user; project tokens act in one
    project and need `token.manage` there. What a token may do is always re-checked against its
    user's current permissions, so it never outlives their access. The raw value is returned
    once; only its hash is kept.
    """
    from apps.projects import policy
    from apps.projects.permissions import PERMISSIONS, implied_by, with_implied

    if token is not None:
        raise PermissionDenied("token.manage", "API tokens cannot create API tokens.")
    name = " ".join((name or "").split())
    if not name or len(name) > 100:
        raise Invalid("A token needs a name of at most 100 characters.", field="name")
    if not isinstance(permissions, (list, tuple, set)) or not permissions or \
            not all(isinstance(p, str) for p in permissions):
        raise Invalid("Choose at least one permission.", field="permissions")
    unknown = sorted(set(permissions) - set(PERMISSIONS))
    if unknown:
        raise Invalid(f"Unknown permission(s): {', '.join(unknown)}.", field="permissions")
    if expires_at is not None:
        now = timezone.now()
        if expires_at <= now:
            raise Invalid("The expiry must be in the future.", field="expires_at")
        if (expires_at - now).days > MAX_TOKEN_LIFETIME_DAYS:
            raise Invalid(f"Tokens live at most {MAX_TOKEN_LIFETIME_DAYS} days.", field="expires_at")
    if project is not None:
        policy.require(user, "token.manage", project)
        held = policy.project_permissions(user, project)
        missing = sorted(set(permissions) - held)
        if missing:
            raise PermissionDenied(missing[0], "A token cannot hold permissions you do not hold: "
                                               + ", ".join(missing) + ".")
        # What the asked permissions cannot work without comes with them (model.generate alone
        # could not even see its project); a need the creator does not hold is refused, named.
        for permission in sorted(permissions):
            lacking = sorted(implied_by(permission) - held)
            if lacking:
                raise Invalid(f"{permission} needs {', '.join(lacking)} to work, which you do not hold.",
                              field="permissions")
    permissions = with_implied(permissions)
    key_id = secrets.token_hex(6)
    raw = f"{ApiToken.PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    api_token = ApiToken.objects.create(name=name, user=user, project=project, permissions=sorted(set(permissions)),
                                        key_id=key_id, key_hash=hash_secret(raw), expires_at=expires_at)
    audit_record(actor=user, action="token.create", project=project, target=api_token, ip_address=ip_address,
                 after={"name": name, "permissions": api_token.permissions,
                        "expires_at": expires_at.isoformat() if expires_at else None})
    return api_token, raw


@transaction.atomic
def token_revoke(*, user, api_token: ApiToken, token=None, ip_address: str | None = None) -> ApiToken:
    """Revoke a token: its owner may, and for project tokens anyone with `token.manage`."""
    from apps.projects import policy

    if token is not None:
        # A token acting on tokens: only within its own project and with token.manage there.
        if api_token.project is None or (token.project_id is not None and token.project_id != api_token.project_id):
            raise NotFound()
        policy.require(user, "token.manage", api_token.project, token)
    elif api_token.user_id != user.pk:
        if api_token.project is None:
            raise NotFound()
        policy.require(user, "token.manage", api_token.project)
    if api_token.revoked_at is None:
        api_token.revoked_at = timezone.now()
        api_token.save(update_fields=["revoked_at"])
        audit_record(actor=user, action="token.revoke", project=api_token.project, target=api_token,
                     ip_address=ip_address, before={"name": api_token.name})
    return api_token


def token_record_rejected_use(*, token: ApiToken, reason: str, request=None) -> None:
    audit_record(actor=None, action=f"token.use_after_{reason}", project=token.project, target=token,
                 ip_address=client_ip(request) if request else None)


def user_set_active(*, by, user, active: bool, ip_address: str | None = None):
    """A site admin deactivates an account (its sessions end, its sockets close, its tokens stop
    working: every check asks for an active user, Django's session backend included) or
    reactivates it. Never one's own."""
    from apps.projects.events import access_revoked

    _require_site_admin(by)
    if user.pk == by.pk:
        raise Invalid("You cannot deactivate your own account.", field="user")
    with transaction.atomic():
        user.is_active = bool(active)
        user.save(update_fields=["is_active"])
        audit_record(actor=by, action="user.activate" if active else "user.deactivate", target=user,
                     ip_address=ip_address, after={"username": user.username})
    if not active:  # open sockets re-check their session and close
        access_revoked(user_id=user.pk, project_id=None)
    return user


def user_reset_link(*, by, user, ip_address: str | None = None) -> str:
    """A one-time path where the person sets a new password (Django's password-reset token: it
    stops working once the password changes, and after PASSWORD_RESET_TIMEOUT). No mail server:
    the admin copies it to the person."""
    from django.contrib.auth.tokens import default_token_generator
    from django.urls import reverse
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    _require_site_admin(by)
    if not user.is_active:
        raise Invalid("Reactivate the account first.", field="user")
    audit_record(actor=by, action="user.password_reset_link", target=user, ip_address=ip_address,
                 after={"username": user.username})
    return reverse("accounts:password_reset", args=[urlsafe_base64_encode(force_bytes(user.pk)),
                                                     default_token_generator.make_token(user)])



# --- single sign-on: group mappings and account links (site admins) ----------------------------

def _sso_provider_id(provider_id: str) -> str:
    if not any(p["id"] == provider_id for p in settings.SSO_PROVIDERS):
        raise Invalid("Choose a configured identity provider.", field="provider_id")
    return provider_id


@transaction.atomic
def sso_mapping_create(*, by, provider_id: str, group: str, site_admin: bool = False, project=None,
                       role: str = "", ip_address: str | None = None):
    """Map a provider group to a project role (built-in key or custom role name) or to site admin.
    It takes effect at each member's next sign-in or session re-check."""
    from apps.accounts.models import SsoGroupMapping
    from apps.projects.services import resolve_role

    _require_site_admin(by)
    provider_id = _sso_provider_id(provider_id)
    if not isinstance(group, str) or not group.strip() or len(group.strip()) > 256:
        raise Invalid("A group name has 1 to 256 characters.", field="group")
    group = group.strip()
    if site_admin:
        if project is not None:
            raise Invalid("A group maps either to site admin or to a project role.", field="project")
        key, custom = "", None
        clash = SsoGroupMapping.objects.filter(provider_id=provider_id, group=group, site_admin=True)
    else:
        if project is None:
            raise Invalid("Choose a project (or site admin).", field="project")
        key, custom, _ = resolve_role(project, role)
        clash = SsoGroupMapping.objects.filter(provider_id=provider_id, group=group, project=project)
    if clash.exists():
        raise Invalid("This group is already mapped there; delete that mapping first.", field="group")
    mapping = SsoGroupMapping.objects.create(provider_id=provider_id, group=group, site_admin=site_admin,
                                             project=project, role=key, custom_role=custom, created_by=by)
    audit_record(actor=by, action="sso.mapping_create", project=project, target=mapping, ip_address=ip_address,
                 after={"provider": provider_id, "group": group, "target": mapping.target})
    return mapping


@transaction.atomic
def sso_mapping_delete(*, by, mapping, ip_address: str | None = None) -> None:
    _require_site_admin(by)
    audit_record(actor=by, action="sso.mapping_delete", project=mapping.project, target=mapping,
                 ip_address=ip_address, before={"provider": mapping.provider_id, "group": mapping.group,
                                                "target": mapping.target})
    mapping.delete()


@transaction.atomic
def sso_link_approve(*, by, username: str, provider_id: str, email: str, ip_address: str | None = None):
    """Let the provider identity carrying `email` sign in to the existing account `username` once
    (its first sign-in links them; later ones find the account by the provider's `sub`)."""
    from apps.accounts.models import SsoLinkApproval

    _require_site_admin(by)
    provider_id = _sso_provider_id(provider_id)
    user = User.objects.filter(username__iexact=(username or "").strip()).first()
    if user is None:
        raise Invalid(f"No account is called “{username}”.", field="username")
    email = (email or "").strip()
    if not email or user.email.lower() != email.lower():
        raise Invalid("The email must be the account's own email address.", field="email")
    approval = SsoLinkApproval.objects.create(user=user, provider_id=provider_id, email=email, created_by=by,
                                              expires_at=timezone.now() + settings.INVITATION_TTL)
    audit_record(actor=by, action="sso.link_approve", target=user, ip_address=ip_address,
                 after={"username": user.username, "provider": provider_id, "email": email})
    return approval


# --- single sign-on, as other apps reach it -----------------------------------------------------
# (apps.accounts.sso imports apps.projects, whose sockets call these: imported when called.)

def sso_session(session) -> bool:
    """Whether this session came from the identity provider (apps.accounts.sso)."""
    from apps.accounts import sso

    return sso.is_sso_session(session)


def sso_socket_recheck(session_key: str, *, user_id: int, ip_address: str | None) -> float | None:
    """Re-check a socket's single-sign-on session with its provider: seconds until the next
    check, or None when the session has ended (apps.accounts.sso.socket_recheck)."""
    from apps.accounts import sso

    return sso.socket_recheck(session_key, user_id=user_id, ip_address=ip_address)
