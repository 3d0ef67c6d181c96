"""`Authorization: Bearer wb_<key id>_<secret>` for the API."""

import copy
import hmac

from django.utils import timezone
from rest_framework import authentication, exceptions

from apps.accounts.models import ApiToken, hash_secret
from apps.core.principal_cache import PrincipalCache

# last_used_at is written at most this often per token, not on every request.
LAST_USED_RESOLUTION_S = 60


def parse_token(raw: str) -> tuple[str, str] | None:
    parts = raw.split("_", 2)  # the secret itself may contain "_"
    if len(parts) != 3 or parts[0] != ApiToken.PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


_tokens: PrincipalCache[ApiToken | None] = PrincipalCache("api tokens")


def _token(key_id: str) -> ApiToken | None:
    """The token with its user: this request's own copies of what the process keeps
    (apps.core.principal_cache), so nothing a request sets on them reaches another."""
    cached = _tokens.get(key_id, lambda: ApiToken.objects.select_related("user").filter(key_id=key_id).first())
    if cached is None:
        return None
    token = copy.copy(cached)
    token.user = copy.copy(cached.user)
    return token


def _note_used(token: ApiToken, now) -> None:
    """last_used_at, at most once a LAST_USED_RESOLUTION_S per token and process: kept on the
    cached token too (the column is not one a cached entry is outdated for)."""
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    cached = _tokens.peek(token.key_id)
    if cached is not None:
        cached.last_used_at = now


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        parsed = parse_token(raw.strip())
        if parsed is None:
            raise exceptions.AuthenticationFailed("Malformed API token.")
        key_id, secret = parsed
        token = _token(key_id)
        if token is None or not hmac.compare_digest(token.key_hash, hash_secret(raw.strip())):
            raise exceptions.AuthenticationFailed("Invalid API token.")
        if token.revoked_at is not None:
            from apps.accounts.services import token_record_rejected_use

            token_record_rejected_use(token=token, reason="revoked", request=request)
            raise exceptions.AuthenticationFailed("This API token was revoked.")
        if not token.is_active:
            raise exceptions.AuthenticationFailed("This API token has expired.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("The user of this API token is disabled.")
        now = timezone.now()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > LAST_USED_RESOLUTION_S:
            _note_used(token, now)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
