"""The test provider's own parts: claims from ExtraClaims, a refresh refused for a disabled account
(as real providers do), the /control/ endpoints, and faults injected into issued ID tokens."""

import base64
import json
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from jwcrypto import jwk, jwt
from oauth2_provider.models import Application, jwk_from_pem
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import TokenView

from tests.sso.provider.models import ExtraClaims

# The fault the token endpoint injects into the next ID tokens it issues ("" for none).
FAULT = {"mode": ""}


class ClaimsValidator(OAuth2Validator):
    oidc_claim_scope = None  # every claim goes out, whatever the scopes

    def get_additional_claims(self, request):
        user = request.user
        claims = {"email": user.email, "email_verified": True, "preferred_username": user.username}
        extra = ExtraClaims.objects.filter(user=user).first()
        return {**claims, **(extra.claims if extra else {})}

    def validate_refresh_token(self, refresh_token, client, request, *args, **kwargs):
        valid = super().validate_refresh_token(refresh_token, client, request, *args, **kwargs)
        return valid and request.user.is_active


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims_of(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _sign(claims: dict, key: jwk.JWK, kid: str) -> str:
    signed = jwt.JWT(header={"alg": "RS256", "kid": kid}, claims=claims)
    signed.make_signed_token(key)
    return signed.serialize()


def spoil(id_token: str, mode: str) -> str:
    active = jwk_from_pem(oauth2_settings.OIDC_RSA_PRIVATE_KEY)
    claims = _claims_of(id_token)
    if mode == "tamper":  # claims changed after signing: the signature no longer matches
        header, _, signature = id_token.split(".")
        claims["sub"] = "someone-else"
        return ".".join([header, _b64(json.dumps(claims).encode()), signature])
    if mode == "foreign_key":  # signed by a key the provider never published, under its key id
        return _sign(claims, jwk.JWK.generate(kty="RSA", size=2048), active.thumbprint())
    if mode == "alg_none":
        return ".".join([_b64(b'{"alg":"none","typ":"JWT"}'), _b64(json.dumps(claims).encode()), ""])
    if mode == "wrong_aud":
        claims["aud"] = "another-client"
    elif mode == "wrong_iss":
        claims["iss"] = "http://127.0.0.1:1/evil"
    elif mode == "expired":
        claims["iat"], claims["exp"] = int(time.time()) - 7200, int(time.time()) - 3600
    elif mode == "wrong_nonce":
        claims["nonce"] = "not-the-nonce-that-was-sent"
    else:
        raise ValueError(mode)
    return _sign(claims, active, active.thumbprint())  # properly signed, but wrong


class MischievousTokenView(TokenView):
    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        if FAULT["mode"] and response.status_code == 200:
            body = json.loads(response.content)
            if body.get("id_token"):
                body["id_token"] = spoil(body["id_token"], FAULT["mode"])
                response.content = json.dumps(body).encode()
        return response


@csrf_exempt
def control(request, action: str):
    data = json.loads(request.body or b"{}")
    if action == "user":
        user, _ = get_user_model().objects.get_or_create(username=data["username"])
        user.email = data.get("email", user.email)
        user.is_active = data.get("active", True)
        if "password" in data:
            user.set_password(data["password"])
        user.save()
        if "claims" in data:
            ExtraClaims.objects.update_or_create(user=user, defaults={"claims": data["claims"]})
    elif action == "client":
        Application.objects.filter(client_id=data["client_id"]).delete()
        Application.objects.create(
            name="workbench", client_id=data["client_id"], client_secret=data["client_secret"],
            client_type=Application.CLIENT_CONFIDENTIAL, authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
            redirect_uris=" ".join(data["redirect_uris"]), algorithm=Application.RS256_ALGORITHM,
            post_logout_redirect_uris=" ".join(data.get("post_logout_redirect_uris", [])),
            skip_authorization=True)
    elif action == "fault":
        FAULT["mode"] = data.get("mode", "")
    elif action == "rotate":  # a new signing key; the old one stays published, inactive
        new = jwk.JWK.generate(kty="RSA", size=2048).export_to_pem(private_key=True, password=None).decode()
        config = settings.OAUTH2_PROVIDER
        config["OIDC_RSA_PRIVATE_KEYS_INACTIVE"] = [config["OIDC_RSA_PRIVATE_KEY"]]
        config["OIDC_RSA_PRIVATE_KEY"] = new
        oauth2_settings.reload()
    else:
        return JsonResponse({"error": action}, status=404)
    return JsonResponse({"ok": True, "kid": jwk_from_pem(oauth2_settings.OIDC_RSA_PRIVATE_KEY).thumbprint()})
