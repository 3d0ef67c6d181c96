"""OpenID Connect sign-in: django-allauth's openid_connect provider, tightened.

allauth carries the authorization code flow (PKCE, single-use state bound to the session, the
token exchange, accounts keyed on the provider's `sub`). What this module adds:
- a nonce in every authorization request, checked against the ID token;
- the ID token's signature always checked against the provider's JWKS (allauth skips it when the
  token came straight from the token endpoint, which the spec allows but we do not rely on), with
  the issuer, audience (and `azp`), expiry and an asymmetric algorithm required;
- the discovery document and the keys cached, and the keys fetched again when a token names a key
  id they lack (the provider rotated its key);
- providers configured by environment (settings.SSO_PROVIDERS), never from the database;
- every refusal audited and answered with our own page (apps/accounts/sso.py decides who may in).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from urllib.parse import urlencode, urlsplit

import jwt
import requests
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from allauth.utils import build_absolute_uri
from django.conf import settings
from django.core.cache import cache
from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

logger = logging.getLogger(__name__)

PROVIDER = "openid_connect"  # allauth's provider id; each configured provider is one of its apps
# Asymmetric algorithms only: an HS* token would be checked with the client secret, "none" with nothing.
ALLOWED_ALGORITHMS = {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
CLOCK_SKEW_S = 60
MAX_METADATA_BYTES = 1_000_000


def provider_config(provider_id: str) -> dict | None:
    return next((p for p in settings.SSO_PROVIDERS if p["id"] == provider_id), None)


def providers() -> list[dict]:
    return list(settings.SSO_PROVIDERS)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def authorization_origins() -> list[str]:
    """Where the login page's provider buttons lead (through our redirect): the page's CSP
    form-action must allow them, as browsers apply it to the redirect after a form's POST."""
    origins = []
    for provider in settings.SSO_PROVIDERS:
        try:
            origin = _origin(discovery(provider)["authorization_endpoint"])
        except (OAuth2Error, requests.RequestException, ValueError) as exc:
            logger.warning("provider %s: no discovery document (%s)", provider["id"], exc)
            origin = _origin(provider["discovery_url"])
        if origin not in origins:
            origins.append(origin)
    return origins


# --- provider metadata and keys ------------------------------------------------------------------

def _cache_key(kind: str, url: str) -> str:
    return f"sso:{kind}:{hashlib.sha256(url.encode()).hexdigest()[:32]}"


def _fetch_json(url: str) -> dict:
    with requests.get(url, timeout=settings.SOCIALACCOUNT_REQUESTS_TIMEOUT, stream=True) as response:
        response.raise_for_status()
        body = response.raw.read(MAX_METADATA_BYTES + 1, decode_content=True)
    if len(body) > MAX_METADATA_BYTES:
        raise OAuth2Error(f"{url} answered more than {MAX_METADATA_BYTES} bytes")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise OAuth2Error(f"{url} did not answer JSON") from exc
    if not isinstance(data, dict):
        raise OAuth2Error(f"{url} did not answer a JSON object")
    return data


def discovery(provider: dict) -> dict:
    """The provider's discovery document, checked (OIDC Discovery 4.3: its issuer is the URL it
    was found under) and cached."""
    url = provider["discovery_url"]
    if "/.well-known/" not in url:
        url = url.rstrip("/") + "/.well-known/openid-configuration"
    key = _cache_key("meta", url)
    config = cache.get(key)
    if config is None:
        config = _fetch_json(url)
        issuer = config.get("issuer")
        needed = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
        if not all(isinstance(config.get(name), str) for name in needed):
            raise OAuth2Error("the discovery document lacks " + ", ".join(n for n in needed if not config.get(n)))
        if url.split("/.well-known/")[0].rstrip("/") != issuer.rstrip("/"):
            raise OAuth2Error(f"the discovery document's issuer {issuer!r} is not the URL it was found under")
        cache.set(key, config, settings.SSO_METADATA_CACHE_S)
    return config


def _jwks(jwks_uri: str, *, refresh: bool) -> dict:
    key = _cache_key("jwks", jwks_uri)
    keys = None if refresh else cache.get(key)
    if keys is None:
        keys = _fetch_json(jwks_uri)
        if not isinstance(keys.get("keys"), list):
            raise OAuth2Error("the provider's JWKS has no keys")
        cache.set(key, keys, settings.SSO_METADATA_CACHE_S)
    return keys


def _signing_key(jwks_uri: str, kid: str | None, alg: str):
    """The provider's public key for this token. A key id the cached set lacks fetches the set again
    once: the provider rotated its key. ID tokens reach this only from the provider's own token
    endpoint, so a stranger cannot make us fetch at will."""
    for refresh in (False, True):
        for jwk in _jwks(jwks_uri, refresh=refresh)["keys"]:
            if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
                continue
            if (kid is None or jwk.get("kid") == kid) and jwk.get("alg", alg) == alg:
                try:
                    return jwt.PyJWK(jwk, algorithm=alg).key
                except jwt.PyJWTError as exc:
                    raise OAuth2Error(f"the provider's key {kid!r} is unusable") from exc
    raise OAuth2Error(f"no key {kid!r} in the provider's JWKS")


def verify_id_token(id_token: str, *, provider: dict, nonce: str | None) -> dict:
    """The ID token's claims, after checking its signature (the provider's JWKS), issuer, audience
    and authorized party, expiry and, for a sign-in (`nonce` given), the nonce we sent. A refreshed
    token (`nonce=None`) carries no fresh nonce to check."""
    config = discovery(provider)
    try:
        header = jwt.get_unverified_header(id_token)
    except jwt.PyJWTError as exc:
        raise OAuth2Error("the ID token is not a JWT") from exc
    alg = header.get("alg")
    supported = config.get("id_token_signing_alg_values_supported") or ["RS256"]
    if alg not in ALLOWED_ALGORITHMS or alg not in supported:
        raise OAuth2Error(f"the ID token's algorithm {alg!r} is not accepted")
    key = _signing_key(config["jwks_uri"], header.get("kid"), alg)
    try:
        claims = jwt.decode(id_token, key=key, algorithms=[alg], audience=provider["client_id"],
                            issuer=config["issuer"], leeway=CLOCK_SKEW_S,
                            options={"require": ["iss", "sub", "aud", "exp", "iat"]})
    except jwt.PyJWTError as exc:
        raise OAuth2Error(f"the ID token was refused: {exc}") from exc
    audience = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audience) > 1 and claims.get("azp") != provider["client_id"]:
        raise OAuth2Error("the ID token names other audiences and we are not its authorized party")
    if not isinstance(claims["sub"], str) or not 0 < len(claims["sub"]) <= 255:
        raise OAuth2Error("the ID token's subject is not a string of 1 to 255 characters")
    if nonce is not None:
        sent = claims.get("nonce")
        if not nonce or not isinstance(sent, str) or not hmac.compare_digest(sent, nonce):
            raise OAuth2Error("the ID token's nonce is not the one this sign-in sent")
    return claims


# --- allauth's provider, adapter and views ------------------------------------------------------

def _end_session_endpoint(state: dict) -> tuple[dict, str] | None:
    provider = provider_config(state.get("provider", ""))
    if provider is None:
        return None
    try:
        endpoint = discovery(provider).get("end_session_endpoint")
    except (OAuth2Error, requests.RequestException):
        logger.warning("provider %s unreachable: signing out ends only the local session", provider["id"])
        return None
    if not isinstance(endpoint, str) or not endpoint.startswith(("https://", "http://")):
        return None
    return provider, endpoint


def end_session_origin(state: dict) -> str | None:
    """The origin signing out of this single-sign-on session leads to (for the pages' CSP), or None.
    Asked on every page, so an answer (none included: a provider down) is kept for a minute."""
    key = _cache_key("end-session-origin", state.get("provider", ""))
    origin = cache.get(key)
    if origin is None:
        found = _end_session_endpoint(state)
        origin = _origin(found[1]) if found else ""
        cache.set(key, origin, 60)
    return origin or None


def end_session_url(state: dict, *, after_logout: str) -> str | None:
    """Where to send a person signing out so the provider ends its session too (OIDC RP-Initiated
    Logout 1.0), or None: the provider offers no end_session_endpoint, cannot be reached, or this
    session has no ID token to name it by. The local session is ended either way."""
    found = _end_session_endpoint(state) if state.get("id_token") else None
    if found is None:
        return None
    provider, endpoint = found
    query = urlencode({"id_token_hint": state["id_token"], "client_id": provider["client_id"],
                       "post_logout_redirect_uri": after_logout})
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


class WorkbenchOIDCAdapter(OpenIDConnectOAuth2Adapter):
    # The callback view sets the nonce stashed with the state; "" (none stashed) matches no token.
    expected_nonce: str = ""

    @property
    def _provider(self) -> dict:
        provider = provider_config(self.provider_id)
        if provider is None:
            raise Http404
        return provider

    @property
    def openid_config(self):
        return discovery(self._provider)

    def get_callback_url(self, request, app):
        return build_absolute_uri(request, reverse("accounts:sso_callback", args=[self.provider_id]))

    def _decode_id_token(self, app, id_token: str) -> dict:
        return verify_id_token(id_token, provider=self._provider, nonce=self.expected_nonce)

    def complete_login(self, request, app, token, **kwargs):
        from apps.accounts.sso import KEPT_CLAIMS

        if not kwargs["response"].get("id_token"):
            raise OAuth2Error("the provider sent no ID token")
        login = super().complete_login(request, app, token, **kwargs)
        data = login.account.extra_data
        id_token, userinfo = data.get("id_token") or {}, data.get("userinfo") or {}
        if userinfo and userinfo.get("sub") != id_token.get("sub"):
            raise OAuth2Error("the user info is not about the ID token's subject")  # OIDC Core 5.3.2
        # Every claim is read once, here and in apps/accounts/sso.py; only a few small ones are kept
        # with the account (allauth saves an existing account's data before our checks run).
        login.workbench_claims = {**userinfo, **id_token}
        login.workbench_id_token = kwargs["response"]["id_token"]  # the hint for RP-initiated logout
        login.account.extra_data = {k: v for k, v in login.workbench_claims.items()
                                    if k in KEPT_CLAIMS and (not isinstance(v, str) or len(v) <= 254)}
        return login


class WorkbenchOIDCProvider(OpenIDConnectProvider):
    oauth2_adapter_class = WorkbenchOIDCAdapter

    def get_login_url(self, request, **kwargs):
        return reverse("accounts:sso_login", args=[self.app.provider_id])

    def get_callback_url(self):
        return reverse("accounts:sso_callback", args=[self.app.provider_id])

    def get_pkce_params(self) -> dict:
        from allauth.socialaccount.providers.oauth2.utils import generate_code_challenge

        return generate_code_challenge()  # always: PKCE (S256) is not a per-provider option here

    # What the authorization request asks is ours alone: no scope or parameter from the query string.
    def get_auth_params_from_request(self, request, action):
        return self.get_auth_params()

    def get_scope_from_request(self, request):
        return self.get_scope()

    def redirect(self, request, process, next_url=None, data=None, **kwargs):
        nonce = secrets.token_urlsafe(32)
        auth_params = {**(kwargs.pop("auth_params", None) or self.get_auth_params()), "nonce": nonce}
        # The nonce travels in the state allauth keeps in the session, used once with it.
        return super().redirect(request, process, next_url, data, auth_params=auth_params, nonce=nonce, **kwargs)


class SsoCallbackView(OAuth2CallbackView):
    def _get_state(self, request, provider):
        state, response = super()._get_state(request, provider)
        self.adapter.expected_nonce = (state or {}).get("nonce") or ""
        return state, response


class SsoAccountAdapter(DefaultSocialAccountAdapter):
    """Providers from settings.SSO_PROVIDERS; who may sign in is decided in apps/accounts/sso.py."""

    def list_apps(self, request, provider=None, client_id=None) -> list[SocialApp]:
        apps = []
        for config in settings.SSO_PROVIDERS:
            app = SocialApp(provider=PROVIDER, provider_id=config["id"], name=config["name"],
                            client_id=config["client_id"], secret=config["secret"],
                            settings={"server_url": config["discovery_url"], "oauth_pkce_enabled": True})
            if provider not in (None, PROVIDER, config["id"]) or client_id not in (None, config["client_id"]):
                continue
            apps.append(app)
        return apps

    def is_open_for_signup(self, request, sociallogin) -> bool:
        return False  # accounts are created (or refused) in pre_social_login, never by allauth's signup form

    def pre_social_login(self, request, sociallogin) -> None:
        from apps.accounts import sso

        try:
            sso.admit(request, sociallogin)
        except sso.SsoRefused as refused:
            raise ImmediateHttpResponse(refusal_page(request, refused.message)) from None

    def on_authentication_error(self, request, provider, error=None, exception=None, extra_context=None):
        from apps.accounts import sso

        reason = str(exception) if exception else (error or "the sign-in did not complete")
        if not exception and extra_context and extra_context.get("state_id") is not None:
            reason = "unknown, used or expired state"
        sso.record_refusal(request, provider_id=getattr(getattr(provider, "app", None), "provider_id", ""),
                           reason=str(reason)[:300])
        raise ImmediateHttpResponse(refusal_page(
            request, "The sign-in with your identity provider could not be completed. Try again; if it "
                     "fails again, tell your administrator."))


def refusal_page(request, message: str):
    return render(request, "accounts/sso_refused.html", {"message": message}, status=403)


@require_POST
def sso_login(request, provider_id: str):
    """Starts the sign-in (a POST from the login page, so another site cannot start one for you)."""
    if provider_config(provider_id) is None:
        raise Http404
    return OAuth2LoginView.adapter_view(WorkbenchOIDCAdapter(request, provider_id))(request)


@require_http_methods(["GET"])
def sso_callback(request, provider_id: str):
    if provider_config(provider_id) is None:
        raise Http404
    return SsoCallbackView.adapter_view(WorkbenchOIDCAdapter(request, provider_id))(request)
