"""ASGI guards that must act before Django reads a request."""

import json
import re


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
        wants_json = scope.get("path", "").startswith("/api/")
        if wants_json:
            body = json.dumps({"detail": message}).encode()
            content_type = b"application/json"
        else:
            body = (f"<!doctype html><title>{status}</title><h1>{status}</h1><p>{message}</p>").encode()
            content_type = b"text/html; charset=utf-8"
        await send({
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close")],
        })
        await send({"type": "http.response.body", "body": body})


