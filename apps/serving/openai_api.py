"""OpenAI-compatible endpoints for a project's models: /v1/models, /v1/chat/completions and
/v1/completions, streaming (server-sent events) and not. The official `openai` client works
against them unchanged (tests/serving/test_openai_api.py uses it).

Authentication is a project API token only (`Authorization: Bearer wb_...`): no session
cookie, so there is no CSRF exposure. The token's project is the project served, its
permissions narrow the caller's as everywhere else (policy layer), and its request budget is
the token rate limit of the REST API. Generation runs in an `inference` worker; these views
only wait on the channel layer, asynchronously.
"""

import json
import time
from contextlib import aclosing
from types import SimpleNamespace

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed

from apps.accounts.authentication import BearerTokenAuthentication
from apps.accounts.throttling import TokenRateThrottle
from apps.core.errors import DomainError, Invalid
from apps.projects import policy
from apps.serving import services, stream
from apps.serving.models import Generation

# OpenAI names -> ours. max_completion_tokens is the newer name of max_tokens.
PARAM_NAMES = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens", "temperature": "temperature",
               "top_p": "top_p", "top_k": "top_k", "stop": "stop", "seed": "seed"}
OUR_TO_OPENAI = {"max_new_tokens": "max_tokens"}


def error(status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error",
          headers: dict | None = None) -> JsonResponse:
    response = JsonResponse({"error": {"message": message, "type": kind, "param": param, "code": None}},
                            status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _authenticate(request: HttpRequest):
    """(user, token, project) for a project API token, or an error response."""
    try:
        principal = BearerTokenAuthentication().authenticate(request)
    except AuthenticationFailed as exc:
        return error(401, str(exc.detail), kind="authentication_error")
    if principal is None:
        return error(401, "Send a project API token: Authorization: Bearer wb_...", kind="authentication_error")
    user, token = principal
    if token.project_id is None:
        return error(403, "Use an API token scoped to one project: its models are the ones served.",
                     kind="permission_error")
    throttle = TokenRateThrottle()
    if not throttle.allow_request(SimpleNamespace(auth=token), None):
        wait = throttle.wait()
        return error(429, "Rate limit reached for this API token.", kind="rate_limit_error",
                     headers={"Retry-After": str(int(wait or 1) + 1)})
    try:
        project = policy.get_project(user, token.project_id, token=token)
    except DomainError:
        return error(404, "The project of this token is gone.", kind="not_found_error")
    return user, token, project


def _domain_error(exc: DomainError) -> JsonResponse:
    param = OUR_TO_OPENAI.get(exc.field, exc.field) if exc.field else None
    kinds = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}
    return error(exc.status, exc.message, param=param, kind=kinds.get(exc.status, "invalid_request_error"))


@csrf_exempt
async def models(request: HttpRequest) -> HttpResponse:
    if request.method != "GET":
        return error(405, "Use GET.")
    auth = await sync_to_async(_authenticate)(request)
    if isinstance(auth, HttpResponse):
        return auth
    user, token, project = auth

    def listing():
        from apps.registry.selectors import served_names

        # Each ready model by name, and each alias of one as name@alias (read afresh: a moved alias shows at once).
        return [{"id": name, "object": "model", "created": int(m.created_at.timestamp()), "owned_by": project.name}
                for name, m in served_names(user, project, token)]

    return JsonResponse({"object": "list", "data": await sync_to_async(listing)()})


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _complete(request, chat=True)


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponse:
    return await _complete(request, chat=False)


def _parse(request: HttpRequest, chat: bool) -> dict:
    try:
        body = json.loads(request.body or b"")
    except (ValueError, UnicodeDecodeError):
        raise Invalid("The body is not valid JSON.", field="body") from None
    if not isinstance(body, dict):
        raise Invalid("The body is a JSON object.", field="body")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("Name the model (see /v1/models).", field="model")
    if body.get("n", 1) != 1:
        raise Invalid("Only n=1 is supported.", field="n")
    if not isinstance(body.get("stream", False), bool):
        raise Invalid("stream is true or false.", field="stream")
    params = {ours: body[theirs] for theirs, ours in PARAM_NAMES.items() if body.get(theirs) is not None}
    caller = body.get("user")  # the end user, as OpenAI's clients name it: keeps them on one canary side
    if caller is not None and (not isinstance(caller, str) or len(caller) > 256):
        raise Invalid("user is a string of at most 256 characters naming the end user.", field="user")
    if chat:
        return {"model": body["model"], "messages": body.get("messages"), "prompt": None, "params": params,
                "stream": body.get("stream", False), "caller": caller}
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise Invalid("The prompt is one string.", field="prompt")
    return {"model": body["model"], "messages": None, "prompt": prompt, "params": params,
            "stream": body.get("stream", False), "caller": caller}


async def _complete(request: HttpRequest, *, chat: bool) -> HttpResponse:
    if request.method != "POST":
        return error(405, "Use POST.")
    auth = await sync_to_async(_authenticate)(request)
    if isinstance(auth, HttpResponse):
        return auth
    user, token, project = auth
    try:
        call = _parse(request, chat)
        generation = await sync_to_async(services.generation_create)(
            user=user, project=project, model_ref=call["model"], source=Generation.Source.API, token=token,
            messages=call["messages"], prompt=call["prompt"], params=call["params"],
            caller=f"user:{call['caller']}" if call["caller"] else f"token:{token.pk}")
    except DomainError as exc:
        return _domain_error(exc)

    events = stream.follow(generation.pk)
    first = await anext(events)  # an error before the first token (a prompt too long) is a 400
    if first["type"] == "error":
        result = first["result"]
        return error(400 if result.get("field") else 503, result["error"], param=result.get("field") or None,
                     kind="invalid_request_error" if result.get("field") else "server_error")
    reply = Reply(generation.pk, call["model"], chat)
    if call["stream"]:
        return StreamingHttpResponse(reply.sse(first, events), content_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    text, result = [], None
    async with aclosing(events):  # a client gone mid-answer abandons the generation (stream.follow)
        async for event in _chain(first, events):
            if event["type"] == "delta":
                text.append(event["text"])
            else:
                result = event["result"]
    if result is None or result["state"] != "succeeded":
        return error(500, (result or {}).get("error") or "The generation failed.", kind="server_error")
    return JsonResponse(reply.whole(result))


async def _chain(first: dict, rest):
    yield first
    async for event in rest:
        yield event


class Reply:
    """OpenAI's response shapes for one generation."""

    def __init__(self, generation_id: int, model: str, chat: bool) -> None:
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{generation_id}"
        self.model, self.chat, self.created = model, chat, int(time.time())

    def _envelope(self, choices: list[dict], *, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def whole(self, result: dict) -> dict:
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": result["text"]},
                      "finish_reason": result["finish_reason"]}
        else:
            choice = {"index": 0, "text": result["text"], "logprobs": None, "finish_reason": result["finish_reason"]}
        return {**self._envelope([choice], chunk=False), "usage": usage(result)}

    def _chunk(self, text: str | None, finish_reason: str | None, *, first: bool = False) -> str:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        return f"data: {json.dumps(self._envelope([choice], chunk=True))}\n\n"

    async def sse(self, first: dict, events):
        async with aclosing(events):  # a client gone mid-stream abandons the generation (stream.follow)
            if self.chat:
                yield self._chunk(None, None, first=True)
            async for event in _chain(first, events):
                if event["type"] == "delta":
                    yield self._chunk(event["text"], None)
                elif event["type"] == "done":
                    yield self._chunk(None, event["result"]["finish_reason"])
                else:
                    yield f"data: {json.dumps({'error': {'message': event['result']['error'], 'type': 'server_error'}})}\n\n"
            yield "data: [DONE]\n\n"


def usage(result: dict) -> dict:
    return {"prompt_tokens": result["prompt_tokens"], "completion_tokens": result["completion_tokens"],
            "total_tokens": result["prompt_tokens"] + result["completion_tokens"]}
