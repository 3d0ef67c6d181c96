"""Single-sign-on sessions: re-checked with their provider, and their pages allowed to sign out there."""

import logging
import time

import requests
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, logout

from apps.core.http import client_ip

logger = logging.getLogger(__name__)
SSO_BACKEND = "apps.accounts.backends.SsoBackend"


class SsoRevalidationMiddleware:
    """Every SSO_REVALIDATE_S a session that single sign-on opened is checked with its provider
    (apps.accounts.sso.recheck; its open websockets check it too, apps/projects/sockets.py). A
    refusal logs the person out (Django's logout: their sockets close too); an unreachable provider
    is logged and tried again on the next request."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        interval = settings.SSO_REVALIDATE_S
        if interval > 0 and request.session.get(BACKEND_SESSION_KEY) == SSO_BACKEND \
                and request.user.is_authenticated:
            from apps.accounts import sso

            state = request.session.get(sso.SESSION_KEY) or {}
            if time.time() - state.get("checked_at", 0) >= interval:
                try:
                    checked = sso.recheck(request.session.session_key, user=request.user,
                                          ip_address=client_ip(request))
                except sso.RevalidationFailed as failed:
                    from apps.projects.audit import audit_record

                    audit_record(actor=request.user, action="sso.session_ended", target=request.user,
                                 after={"provider": state.get("provider"), "reason": str(failed)[:300]})
                    logout(request)
                except (requests.RequestException, ValueError) as exc:
                    logger.warning("could not re-check a single-sign-on session: %s", exc)
                else:
                    if checked is not None and checked != state:
                        # Stored already; this request's copy of the session must not write the old one back.
                        request.session[sso.SESSION_KEY] = checked
        response = self.get_response(request)
        if request.session.get(BACKEND_SESSION_KEY) == SSO_BACKEND and "Content-Security-Policy" not in response \
                and response.get("Content-Type", "").startswith("text/html"):
            from apps.accounts import oidc, sso
            from apps.core.middleware import CONTENT_SECURITY_POLICY

            # Every page's "Log out" form ends at the provider (RP-initiated logout), and browsers
            # apply form-action to the redirects after a form's POST.
            origin = oidc.end_session_origin(request.session.get(sso.SESSION_KEY) or {})
            if origin:
                response["Content-Security-Policy"] = CONTENT_SECURITY_POLICY.replace(
                    "form-action 'self'", f"form-action 'self' {origin}")
        return response
