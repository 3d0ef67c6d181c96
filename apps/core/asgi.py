"""ASGI guards that must act before Django reads a request."""

import json
import re
from urllib.parse import urlsplit

# This answer never reaches Django's middleware: it carries the headers that middleware would add.
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"), (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"), (b"content-security-policy", b"default-src 'none'"),
    (b"cache-control", b"no-store"),
]


FORM_TYPES = {b"multipart/form-data", b"application/x-www-form-urlencoded"}


def _too_large_message(limit: int) -> str:
    return f"Request body too large: the limit is {limit / (1024 * 1024):.0f} MB."


class BodySizeLimit:
    """Answer 413 to any HTTP request whose body exceeds `max_bytes`.

    Checks the declared Content-Length first, then counts bytes as they stream in (chunked
    bodies have no length), so memory stays bounded. Once over the limit it answers itself
    and tells Django the client went away; Django then drops the request without replying.
    """

    def __init__(self, app, max_bytes: int, upload_max_bytes: int | None = None,
                 upload_paths: str | None = None) -> None:
        self.app = app
        self.default_max_bytes = max_bytes
        self.upload_max_bytes = upload_max_bytes or max_bytes
        self.upload_paths = re.compile(upload_paths) if upload_paths else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        is_upload = self.upload_paths is not None and self.upload_paths.match(scope.get("path", ""))
        limit = self.upload_max_bytes if is_upload else self.default_max_bytes
        return await self._limited(scope, receive, send, limit)

    async def _limited(self, scope, receive, send, limit: int):
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                declared_size = int(declared)
            except ValueError:
                return await self._answer(scope, send, 400, "Malformed Content-Length header.")
            if declared_size > limit:
                return await self._answer(scope, send, 413, _too_large_message(limit))

        elif headers.get(b"content-type", b"").split(b";")[0].strip().lower() in FORM_TYPES:
            # Django parses forms and file uploads by their declared length: a chunked one would be
            # read whole (up to the upload limit) and then seen as empty.
            return await self._answer(scope, send, 411, "Send forms and file uploads with a Content-Length "
                                                        "header (chunked transfer encoding is not accepted).")

        received = 0
        answered = False

        async def counting_receive():
            nonlocal received, answered
            message = await receive()
            if message["type"] == "http.request" and not answered:
                received += len(message.get("body", b""))
                if received > limit:
                    answered = True
                    await self._answer(scope, send, 413, _too_large_message(limit))
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            if not answered:
                await send(message)

        await self.app(scope, counting_receive, guarded_send)

    @staticmethod
    async def _answer(scope, send, status: int, message: str) -> None:
        path = scope.get("path", "")
        openai = path == "/v1" or path.startswith("/v1/")  # OpenAI's error shape (apps.core.views.openai_error)
        if openai or path.startswith("/api/"):
            kind = "invalid_request_error"
            body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": None}} if openai
                              else {"detail": message}).encode()
            content_type = b"application/json"
        else:
            body = (f"<!doctype html><title>{status}</title><h1>{status}</h1><p>{message}</p>").encode()
            content_type = b"text/html; charset=utf-8"
        await send({
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"), *SECURITY_HEADERS],
        })
        await send({"type": "http.response.body", "body": body})




def _origin(scheme: str, host: str) -> str | None:
    """`scheme://host[:port]` lower-cased with the scheme's default port dropped; None if malformed."""
    try:
        parsed = urlsplit(f"{scheme}://{host}")
        port = parsed.port
    except ValueError:
        return None
    if not parsed.hostname:
        return None
    hostname = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{hostname}" + (f":{port}" if port and port != default else "")


def _parse_origin(value: str) -> str | None:
    parsed = urlsplit(value.strip().lower())
    if parsed.scheme not in {"http", "https"} or parsed.path or parsed.query or parsed.fragment:
        return None
    return _origin(parsed.scheme, parsed.netloc)


class SameOriginWebsocket:
    """Accept a websocket handshake only from the site's own origin, compared in full (scheme,
    host and port) as Django's CSRF check compares a form's Origin: a page on another port of the
    same host (`http://127.0.0.1:9999`) or another scheme (`https://localhost`) is another site.

    The site's origin is the handshake's own Host (which must be one of ALLOWED_HOSTS) with the
    scheme the connection came in on (`wss` → https; behind a TLS-terminating proxy its
    `X-Forwarded-Proto: https` when TRUST_X_FORWARDED_PROTO is on); CSRF_TRUSTED_ORIGINS are
    accepted too. A handshake without an Origin is refused: browsers always send one, and
    scripts use the API's tokens, not a session cookie.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not self.allowed(scope):
            from channels.security.websocket import WebsocketDenier

            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)

    @staticmethod
    def allowed(scope) -> bool:
        from django.conf import settings
        from django.http.request import validate_host

        headers = {}
        for name, value in scope.get("headers") or []:
            headers.setdefault(name.lower(), value.decode("latin1"))
        origin = headers.get(b"origin")
        if origin is None or (origin := _parse_origin(origin)) is None:
            return False
        if origin in {_parse_origin(trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS}:
            return True
        host = headers.get(b"host", "")
        hostname = urlsplit(f"//{host}").hostname if host else None
        if not hostname or not validate_host(hostname, settings.ALLOWED_HOSTS):
            return False
        secure = scope.get("scheme") == "wss" or (
            getattr(settings, "SECURE_PROXY_SSL_HEADER", None) is not None
            and headers.get(b"x-forwarded-proto", "").split(",")[0].strip().lower() == "https")
        return origin == _origin("https" if secure else "http", host.lower())
