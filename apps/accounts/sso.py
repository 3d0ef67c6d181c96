"""Single sign-on: who may come in, with which account, and what their groups give them.

The protocol is in apps/accounts/oidc.py; this module is called once the provider's ID token and
user info are checked:
- accounts are found by (provider, `sub`), never by email alone;
- a first sign-in creates the account only with SSO_AUTO_CREATE and an email in an allowed domain;
- an email that belongs to an existing local account is refused, unless a site admin approved
  linking that account (SsoLinkApproval), which is then used up;
- the provider's groups (the claim named per provider) set the memberships that came from groups
  and the site admin flag that came from a group (SsoGroupMapping); hand-made ones stay;
- a session opened by single sign-on is re-checked with the provider's refresh token every
  SSO_REVALIDATE_S, by its page and API requests (apps/accounts/middleware.py) and by its open
  websockets (apps/projects/sockets.py), so a session that only holds a socket is checked too: a
  refused refresh ends the session and closes its sockets, a granted one brings the groups up to
  date (a membership a group no longer gives closes the sockets that needed it). The refresh token
  is kept encrypted with PROVIDER_KEYS;
- signing out of such a session sends the person on to the provider's end_session_endpoint with
  the ID token as the hint (RP-initiated logout), so the provider's session ends too.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from importlib import import_module

import requests
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, get_user_model
from django.contrib.auth import SESSION_KEY as SESSION_USER_KEY
from django.contrib.sessions.backends.base import UpdateError
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.accounts.models import SsoGroupMapping, SsoLinkApproval, SsoProfile
from apps.core.crypto import InvalidToken, fernet
from apps.core.http import client_ip
from apps.projects.audit import audit_record
from apps.projects.services import memberships_sync_from_groups, strongest_role

logger = logging.getLogger(__name__)
User = get_user_model()
SSO_BACKEND = "apps.accounts.backends.SsoBackend"

MAX_GROUPS = 1000
MAX_GROUP_LENGTH = 256
MAX_EMAIL_LENGTH = 254
SESSION_KEY = "workbench_sso"
# Only these claims are kept with the account (a provider may send large ones we do not read).
KEPT_CLAIMS = ("iss", "sub", "aud", "email", "email_verified", "preferred_username", "name", "given_name",
               "family_name")


class SsoRefused(Exception):
    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


def record_refusal(request, *, provider_id: str, reason: str, email: str = "") -> None:
    audit_record(actor=None, action="sso.refused", ip_address=client_ip(request),
                 after={"provider": provider_id[:40], "reason": reason[:300], "email": email[:MAX_EMAIL_LENGTH]})


def groups_from(claims: dict, claim_name: str) -> list[str]:
    """The provider's groups, bounded: a claim that is not a list of short strings, or too long a
    list, refuses the sign-in (trimming it could take access away, or keep it, by accident)."""
    groups = claims.get(claim_name, [])
    if groups is None:
        return []
    if isinstance(groups, str):
        groups = [groups]
    if not isinstance(groups, list) or len(groups) > MAX_GROUPS:
        raise SsoRefused("Your identity provider sent more groups than Workbench accepts.",
                         f"groups claim {claim_name!r} is not a list of at most {MAX_GROUPS}")
    if not all(isinstance(g, str) and 0 < len(g) <= MAX_GROUP_LENGTH for g in groups):
        raise SsoRefused("Your identity provider sent a group name Workbench cannot accept.",
                         f"a group is not a string of 1 to {MAX_GROUP_LENGTH} characters")
    return sorted(set(groups))


def _email(claims: dict) -> str:
    email = claims.get("email") or ""
    if not isinstance(email, str) or len(email) > MAX_EMAIL_LENGTH or (email and "@" not in email):
        raise SsoRefused("Your identity provider sent an email address Workbench cannot accept.", "bad email claim")
    if email and claims.get("email_verified") is False:
        return ""  # an address the provider has not verified matches nothing and opens nothing
    return email.strip()


def _domain_allowed(email: str) -> bool:
    domains = settings.SSO_ALLOWED_EMAIL_DOMAINS
    return not domains or (bool(email) and email.rsplit("@", 1)[1].lower() in domains)


def _new_username(claims: dict, email: str) -> str:
    for hint in (claims.get("preferred_username"), email.split("@")[0] if email else None):
        if isinstance(hint, str):
            base = re.sub(r"[^\w.@+-]", "", hint)[:140]
            if base:
                break
    else:
        base = "user"
    username, n = base, 1
    while User.objects.filter(username__iexact=username).exists():
        n += 1
        username = f"{base}-{n}"
    return username


def admit(request, sociallogin) -> None:
    """Decide who this sign-in is (called by allauth before it logs anyone in): an existing identity,
    an approved link to a local account, a new account, or a refusal (SsoRefused, audited)."""
    provider_id = sociallogin.account.provider
    provider = next(p for p in settings.SSO_PROVIDERS if p["id"] == provider_id)
    email = ""
    try:
        claims = getattr(sociallogin, "workbench_claims", None)
        if not claims:
            raise SsoRefused("Your identity provider sent no identity.", "no checked claims")
        email = _email(claims)
        groups = groups_from(claims, provider["groups_claim"])
        sociallogin.account.extra_data["groups"] = groups
        if sociallogin.is_existing:
            sociallogin.account.save(update_fields=["extra_data"])
        with transaction.atomic():
            user, how = _account_for(request, sociallogin, provider_id=provider_id, claims=claims, email=email)
            _sync(user=user, provider_id=provider_id, groups=groups, ip_address=client_ip(request))
    except SsoRefused as refused:
        record_refusal(request, provider_id=provider_id, reason=refused.reason, email=email)
        raise
    user.backend = "apps.accounts.backends.SsoBackend"
    audit_record(actor=user, action="sso.login", target=user, ip_address=client_ip(request),
                 after={"provider": provider_id, "sub": sociallogin.account.uid, "account": how})


def _account_for(request, sociallogin, *, provider_id: str, claims: dict, email: str):
    if sociallogin.is_existing:
        user = sociallogin.user
        if not user.is_active:
            raise SsoRefused("This account is deactivated. Ask a site admin.", "account deactivated")
        if not _domain_allowed(email):
            raise SsoRefused("Your email domain may not sign in here.", "email domain not allowed")
        return user, "existing"
    if not _domain_allowed(email):
        raise SsoRefused("Your email domain may not sign in here.", "email domain not allowed")
    local = User.objects.filter(email__iexact=email).order_by("pk").first() if email else None
    if local is not None:
        approval = SsoLinkApproval.objects.select_for_update().filter(
            user=local, provider_id=provider_id, email__iexact=email, used_at__isnull=True,
            expires_at__gt=timezone.now()).first()
        if approval is None:
            raise SsoRefused("An account with this email address already exists. A site admin must link it "
                             "to your identity provider before you can sign in with it.",
                             "email belongs to an existing account, no link approved")
        if not local.is_active:
            raise SsoRefused("This account is deactivated. Ask a site admin.", "account deactivated")
        approval.used_at = timezone.now()
        approval.save(update_fields=["used_at"])
        sociallogin.connect(request, local)
        audit_record(actor=local, action="sso.link", target=local, ip_address=client_ip(request),
                     after={"provider": provider_id, "sub": sociallogin.account.uid, "email": email,
                            "approved_by": approval.created_by.username if approval.created_by else None})
        return local, "linked"
    if not settings.SSO_AUTO_CREATE:
        raise SsoRefused("You have no Workbench account yet. Ask a site admin to create one.",
                         "no account and SSO_AUTO_CREATE is off")
    user = User(username=_new_username(claims, email), email=email,
                first_name=str(claims.get("given_name") or "")[:150], last_name=str(claims.get("family_name") or "")[:150])
    user.set_unusable_password()
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise SsoRefused("Your account could not be created; try again.", "username taken meanwhile") from None
    sociallogin.connect(request, user)
    audit_record(actor=user, action="sso.account_create", target=user, ip_address=client_ip(request),
                 after={"provider": provider_id, "sub": sociallogin.account.uid, "username": user.username,
                        "email": email})
    return user, "created"


def _sync(*, user, provider_id: str, groups: list[str], ip_address: str | None) -> None:
    """Memberships and the site admin flag from the provider's groups (see the module's notes)."""
    mappings = list(SsoGroupMapping.objects.select_related("custom_role").filter(
        provider_id=provider_id, group__in=groups))
    per_project: dict[int, list] = {}
    for mapping in mappings:
        if not mapping.site_admin:
            per_project.setdefault(mapping.project_id, []).append((mapping.role, mapping.custom_role))
    wanted = {project_id: strongest_role(roles) for project_id, roles in per_project.items()}
    memberships_sync_from_groups(user=user, wanted=wanted, provider_id=provider_id, ip_address=ip_address)

    profile, _ = SsoProfile.objects.select_for_update().get_or_create(user=user, defaults={"provider_id": provider_id})
    admin_from_groups = any(m.site_admin for m in mappings)
    if admin_from_groups and not user.is_staff:
        user.is_staff, profile.staff_from_groups = True, True
        user.save(update_fields=["is_staff"])
        audit_record(actor=None, action="user.site_admin_grant", target=user, ip_address=ip_address,
                     after={"username": user.username, "source": "groups", "provider": provider_id})
    elif not admin_from_groups and user.is_staff and profile.staff_from_groups:
        user.is_staff, profile.staff_from_groups = False, False
        user.save(update_fields=["is_staff"])
        audit_record(actor=None, action="user.site_admin_revoke", target=user, ip_address=ip_address,
                     after={"username": user.username, "source": "groups", "provider": provider_id})
    profile.provider_id, profile.groups, profile.synced_at = provider_id, groups, timezone.now()
    profile.save()


# --- the session, re-checked with the provider ----------------------------------------------------

def _seal(refresh_token: str) -> str:
    """The refresh token as the session keeps it: encrypted with PROVIDER_KEYS (apps/core/crypto.py),
    so neither the session row nor its cache entry holds it in the clear."""
    return fernet().encrypt(refresh_token.encode()).decode() if refresh_token else ""


def _unseal(state: dict) -> str:
    sealed = state.get("refresh_token_sealed") or ""
    if not sealed:
        return state.get("refresh_token") or ""  # a session from before tokens were sealed: sealed at its next check
    try:
        return fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise RevalidationFailed("the refresh token cannot be decrypted with PROVIDER_KEYS") from None


def remember_session(request, sociallogin) -> None:
    """After a sign-in: what re-checking this session needs (kept server-side, in the session; the
    refresh token encrypted)."""
    token = sociallogin.token
    request.session[SESSION_KEY] = {"provider": sociallogin.account.provider, "sub": sociallogin.account.uid,
                                    "refresh_token_sealed": _seal(getattr(token, "token_secret", "") or ""),
                                    "id_token": getattr(sociallogin, "workbench_id_token", ""),
                                    "checked_at": time.time()}


class RevalidationFailed(Exception):
    pass


def revalidate(state: dict, *, user, ip_address: str | None) -> dict:
    """Ask the provider again (refresh token grant), check the new ID token as at sign-in (less the
    nonce) and bring the groups up to date; returns the session's new state. RevalidationFailed: the
    provider refused (the person was disabled or signed out there), or the session cannot be
    re-checked at all. A provider that cannot be reached is not a refusal (requests' errors and
    ValueError pass through): the check is tried again later."""
    from apps.accounts import oidc

    provider = oidc.provider_config(state.get("provider", ""))
    refresh_token = _unseal(state)
    if provider is None or not refresh_token:
        raise RevalidationFailed("no provider or refresh token to re-check this session with")
    config = oidc.discovery(provider)
    data = {"grant_type": "refresh_token", "refresh_token": refresh_token,
            "client_id": provider["client_id"], "client_secret": provider["secret"]}
    response = requests.post(config["token_endpoint"], data=data, timeout=settings.SOCIALACCOUNT_REQUESTS_TIMEOUT)
    if response.status_code in (400, 401):
        raise RevalidationFailed(f"the provider refused the refresh ({response.status_code})")
    response.raise_for_status()
    body = response.json()
    claims = {}
    if body.get("id_token"):
        try:
            claims = oidc.verify_id_token(body["id_token"], provider=provider, nonce=None)
        except oidc.OAuth2Error as exc:
            raise RevalidationFailed(str(exc)) from None
        if claims["sub"] != state.get("sub"):
            raise RevalidationFailed("the refreshed ID token is about someone else")
    user.refresh_from_db(fields=["is_active"])
    if not user.is_active:
        raise RevalidationFailed("the account is deactivated")
    if claims and provider["groups_claim"] in claims:
        try:
            groups = groups_from(claims, provider["groups_claim"])
        except SsoRefused as refused:
            raise RevalidationFailed(refused.reason) from None
        with transaction.atomic():
            _sync(user=user, provider_id=provider["id"], groups=groups, ip_address=ip_address)
    new_state = {key: value for key, value in state.items() if key != "refresh_token"}
    new_state["refresh_token_sealed"] = _seal(body.get("refresh_token") or refresh_token)
    if claims:
        new_state["id_token"] = body["id_token"]
    new_state["checked_at"] = time.time()
    return new_state


def _session_store(session_key: str | None):
    return import_module(settings.SESSION_ENGINE).SessionStore(session_key=session_key)


def is_sso_session(session) -> bool:
    return session.get(BACKEND_SESSION_KEY) == SSO_BACKEND


def recheck(session_key: str | None, *, user, ip_address: str | None) -> dict | None:
    """Re-check the stored session `session_key` if SSO_REVALIDATE_S has passed since its last check,
    and store its new state at once; returns the state (checked now or recently), or None: not a
    single-sign-on session (any more), or another request or socket of this session is checking it
    right now. One check at a time per session (the provider rotates the refresh token, so a second
    refresh with the same token would be refused), and the state is read afresh under that lock: a
    page request and a socket of one session, in different processes, do not refresh twice.
    RevalidationFailed: the caller ends the session (end_session)."""
    interval = settings.SSO_REVALIDATE_S
    if not session_key or interval <= 0:
        return None
    lock = f"sso:recheck:{hashlib.sha256(session_key.encode()).hexdigest()[:32]}"
    if not cache.add(lock, 1, timeout=2 * settings.SOCIALACCOUNT_REQUESTS_TIMEOUT + 10):
        return None
    try:
        store = _session_store(session_key)
        if not is_sso_session(store) or str(store.get(SESSION_USER_KEY)) != str(user.pk):
            return None
        state = store.get(SESSION_KEY) or {}  # none: cannot be re-checked, so it ends
        if time.time() - state.get("checked_at", 0) < interval:
            return state
        state = revalidate(state, user=user, ip_address=ip_address)
        store[SESSION_KEY] = state
        try:
            store.save(must_create=False)
        except UpdateError:  # ended meanwhile (a sign-out while the provider answered): stays ended
            return None
        return state
    finally:
        cache.delete(lock)


def end_session(session_key: str | None, *, user, state: dict, reason: str) -> None:
    """A re-check failed where no request is at hand (a socket's check): the session ends as a sign-out
    ends it, and every socket of this person re-checks its own session and closes if it was this one."""
    from apps.projects.events import access_revoked

    audit_record(actor=user, action="sso.session_ended", target=user,
                 after={"provider": state.get("provider"), "reason": reason[:300]})
    if session_key:
        _session_store(session_key).delete()
    access_revoked(user_id=user.pk, project_id=None)


def socket_recheck(session_key: str | None, *, user_id: int, ip_address: str | None) -> float | None:
    """For an open websocket of a single-sign-on session (apps/projects/sockets.py): re-check the
    session when SSO_REVALIDATE_S has passed since its last check (by a page, an API request or
    another socket). Returns the seconds until the next check is due, or None: the session has ended
    (signed out, the account deactivated, or the provider refused it now), and the socket closes."""
    interval = settings.SSO_REVALIDATE_S
    store = _session_store(session_key)
    if not session_key or str(store.get(SESSION_USER_KEY)) != str(user_id):
        return None
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return None
    if interval <= 0 or not is_sso_session(store):
        return float(max(interval, 60))
    state = store.get(SESSION_KEY) or {}
    due = state.get("checked_at", 0) + interval - time.time()
    if due > 0:
        return due
    try:
        checked = recheck(session_key, user=user, ip_address=ip_address)
    except RevalidationFailed as failed:
        end_session(session_key, user=user, state=state, reason=str(failed))
        return None
    except (requests.RequestException, ValueError) as exc:
        logger.warning("could not re-check a single-sign-on session: %s", exc)
        return float(interval)
    if checked is None:  # being checked elsewhere right now, or ended meanwhile: look again soon
        return 1.0
    return checked.get("checked_at", 0) + interval - time.time()
