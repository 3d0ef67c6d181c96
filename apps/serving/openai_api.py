"""OpenAI-compatible endpoints for a project's models: /v1/models (and /v1/models/{id}),
/v1/chat/completions and /v1/completions, streaming (server-sent events) and not. The official
`openai` client works against them unchanged (tests/serving/test_openai_api.py uses it).

Authentication is a project API token only (`Authorization: Bearer wb_...`): no session
cookie, so there is no CSRF exposure. The token's project is the project served, its
permissions narrow the caller's as everywhere else (policy layer), and its request budget is
the token rate limit of the REST API. Generations running at once and tokens a minute are limited
per token and per project (apps.serving.limits): a request over one is answered 429
rate_limit_exceeded with Retry-After, and what it took is given back when its answer ends.
Generation runs in an `inference` worker; these views only wait on the channel layer,
asynchronously.

What is supported, as OpenAI defines it: `n` choices (each its own generation, batched
together by the worker; a seed gives choice i the seed + i), `logprobs`/`top_logprobs`,
`presence_penalty`/`frequency_penalty`, `stop`, `seed`, `stream_options.include_usage`, message
`content` as a list of text parts, the `developer` role (the model's system role). Refused with
a 400 naming the field: `tools`/`functions`/`tool_choice` (no tool calling yet), `logit_bias`.
`response_format` json_object and json_schema constrain the output to JSON (valid against the
schema) as it is generated (workers.inference.constrain); a schema that cannot be compiled is a
400 naming response_format. Errors
carry OpenAI's `type`, `param` (the request's own field name) and, where OpenAI has one, `code`
(model_not_found, invalid_api_key, context_length_exceeded, rate_limit_exceeded).
"""

import asyncio
import json
import time
from contextlib import aclosing
from types import SimpleNamespace

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed

from apps.accounts.authentication import BearerTokenAuthentication
from apps.accounts.throttling import TokenRateThrottle
from apps.core.errors import DomainError, Invalid
from apps.projects import policy
from apps.registry.selectors import served_names
from apps.serving import limits, services, stream
from apps.serving.captures import feedback_record
from apps.serving.models import Generation

# OpenAI names -> ours. max_completion_tokens is the newer name of max_tokens.
PARAM_NAMES = {"max_tokens": "max_new_tokens", "max_completion_tokens": "max_new_tokens", "temperature": "temperature",
               "top_p": "top_p", "top_k": "top_k", "stop": "stop", "seed": "seed",
               "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty"}
MAX_CHOICES = 8  # n
MAX_COMPLETION_LOGPROBS = 5  # /v1/completions: logprobs is the number of alternatives, at most 5
ROLE_ALIASES = {"developer": "system"}  # OpenAI's newer name of the system role


class BodyTooLarge(DomainError):
    status = 413


def error(status: int, message: str, *, param: str | None = None, kind: str = "invalid_request_error",
          code: str | None = None, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                            status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _unauthorized(message: str) -> JsonResponse:
    return error(401, message, kind="authentication_error", code="invalid_api_key",
                 headers={"WWW-Authenticate": 'Bearer realm="workbench"'})


def _authenticate(request: HttpRequest):
    """(user, token, project) for a project API token, or an error response."""
    try:
        principal = BearerTokenAuthentication().authenticate(request)
    except AuthenticationFailed as exc:
        return _unauthorized(str(exc.detail))
    if principal is None:
        return _unauthorized("Send a project API token: Authorization: Bearer wb_...")
    user, token = principal
    if token.project_id is None:
        return error(403, "Use an API token scoped to one project: its models are the ones served.",
                     kind="permission_error")
    throttle = TokenRateThrottle()
    if not throttle.allow_request(SimpleNamespace(auth=token), None):
        wait = throttle.wait()
        return error(429, "Rate limit reached for this API token.", kind="rate_limit_error",
                     code="rate_limit_exceeded", headers={"Retry-After": str(int(wait or 1) + 1)})
    try:
        project = policy.get_project(user, token.project_id, token=token)
    except DomainError:
        return error(404, "The project of this token is gone.", kind="not_found_error")
    return user, token, project


def _domain_error(exc: DomainError, names: dict[str, str] | None = None) -> JsonResponse:
    field = exc.field or None
    # a limit's name is in the message: `param` names only the request's own fields
    param = (names or {}).get(field, field) if field and exc.status != 429 else None
    kinds = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}
    code = {429: "rate_limit_exceeded"}.get(exc.status)
    if exc.status == 404 and field == "model":
        code = "model_not_found"
    headers = {"Retry-After": str(exc.retry_after_s)} if hasattr(exc, "retry_after_s") else None
    return error(exc.status, exc.message, param=param, kind=kinds.get(exc.status, "invalid_request_error"),
                 code=code, headers=headers)


def _model_entry(model, api_id: str, display: str, project) -> dict:
    """One /v1/models entry: `id` is what a client sends (a slug, no spaces), `name` the display name."""
    return {"id": api_id, "object": "model", "created": int(model.created_at.timestamp()), "owned_by": project.name,
            "name": display}


async def _caller(request: HttpRequest, method: str):
    """(user, token, project) of a request made with `method`, or the error response (405, 401, 403, 429)."""
    if request.method != method:
        return error(405, f"Use {method}.", headers={"Allow": method})
    return await sync_to_async(_authenticate)(request)


@csrf_exempt
async def models(request: HttpRequest) -> HttpResponse:
    auth = await _caller(request, "GET")
    if isinstance(auth, HttpResponse):
        return auth
    user, token, project = auth

    def listing():
        # Each ready model by API id, and each alias of one as id@alias (read afresh: a moved alias shows at once).
        return [_model_entry(m, api_id, display, project) for api_id, m, display in served_names(user, project, token)]

    return JsonResponse({"object": "list", "data": await sync_to_async(listing)()})


@csrf_exempt
async def model_detail(request: HttpRequest, model_id: str) -> HttpResponse:
    auth = await _caller(request, "GET")
    if isinstance(auth, HttpResponse):
        return auth
    user, token, project = auth

    def one():
        entries = served_names(user, project, token)
        wanted = model_id.strip().lower()
        for api_id, model, display in entries:  # as listed, by API id or display name
            if wanted in (api_id, display.lower()):
                return _model_entry(model, api_id, display, project)
        model = services.servable_model(user, project, model_id, token)  # by id, or NotFound
        api_id, model, display = next(entry for entry in entries if entry[1].pk == model.pk and "@" not in entry[0])
        return _model_entry(model, api_id, display, project)

    try:
        return JsonResponse(await sync_to_async(one)())
    except DomainError as exc:
        return _domain_error(exc)


@csrf_exempt
async def feedback(request: HttpRequest) -> HttpResponse:
    """A user's feedback on an answer: recorded on its capture (apps.serving.captures)."""
    auth = await _caller(request, "POST")
    if isinstance(auth, HttpResponse):
        return auth
    user, token, project = auth
    try:
        body = _json_body(request)
        capture = await sync_to_async(feedback_record)(
            user=user, project=project, completion=body.get("completion_id"), score=body.get("score"),
            comment=body.get("comment"), choice_index=body.get("choice_index", 0), token=token)
    except DomainError as exc:
        return _domain_error(exc)
    return JsonResponse({"completion_id": capture.completion_id, "choice_index": capture.choice_index,
                         "recorded": True})


@csrf_exempt
async def chat_completions(request: HttpRequest) -> HttpResponse:
    return await _complete(request, chat=True)


@csrf_exempt
async def completions(request: HttpRequest) -> HttpResponse:
    return await _complete(request, chat=False)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise Invalid(f"{name} is true or false.", field=name)
    return value


def _whole_number(body: dict, name: str, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise Invalid(f"{name} is a whole number from {low} to {high}.", field=name)
    return value


def _refuse_unsupported(body: dict) -> None:
    for name in ("tools", "functions"):
        if body.get(name):
            raise Invalid(f"{name} are not supported yet: this server does not do tool or function calling.",
                          field=name)
    for name in ("tool_choice", "function_call"):
        if body.get(name) not in (None, "none"):
            raise Invalid(f"{name} is not supported yet: this server does not do tool or function calling.",
                          field=name)
    if body.get("logit_bias"):
        raise Invalid("logit_bias is not supported.", field="logit_bias")


def _response_format(body: dict) -> dict | None:
    """The JSON schema `response_format` asks the output to follow (json_object: any object), None
    for text; each refusal names response_format (a schema the engine cannot compile is refused by
    the sampling parameters' check, naming it too)."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise Invalid('response_format json_schema is {"type": "json_schema", "json_schema": {"name": ..., '
                          '"schema": {...}}}.', field="response_format")
        return spec["schema"]
    raise Invalid('response_format is {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", '
                  '"json_schema": {"name": ..., "schema": {...}}}.', field="response_format")


def _chat_messages(messages):
    """OpenAI's message forms in ours: a content list of text parts joined (by newlines), the
    developer role as the system role. Anything else goes on as it came, for the shared
    validation (services) to name."""
    if not isinstance(messages, list):
        return messages
    plain = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            plain.append(message)
            continue
        message = dict(message)
        message["role"] = ROLE_ALIASES.get(message.get("role"), message.get("role"))
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise Invalid("Only text parts are supported: {\"type\": \"text\", \"text\": ...}.",
                                  field=f"messages[{i}].content[{j}]")
                if not isinstance(part.get("text"), str):
                    raise Invalid("A text part's text is a string.", field=f"messages[{i}].content[{j}].text")
                texts.append(part["text"])
            message["content"] = "\n".join(texts)
        plain.append(message)
    return plain


def _nul_at(value, where: str) -> str | None:
    """Where in `value` a string holds a NUL character, or None."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    items = enumerate(value) if isinstance(value, list) else value.items() if isinstance(value, dict) else ()
    for key, item in items:
        found = _nul_at(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}")
        if found is not None:
            return found
    return None


def _json_body(request: HttpRequest) -> dict:
    """The request's JSON object; each refusal names the field."""
    try:
        body = json.loads(request.body or b"")
    except RequestDataTooBig:
        raise BodyTooLarge(f"The body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 2**20} MB.",
                           field="body") from None
    except (ValueError, UnicodeDecodeError):
        raise Invalid("The body is not valid JSON.", field="body") from None
    if not isinstance(body, dict):
        raise Invalid("The body is a JSON object.", field="body")
    for name, value in body.items():
        where = _nul_at(value, str(name))
        if where is not None:  # a database text column cannot hold one
            raise Invalid("Text may not contain NUL (\\u0000) characters.", field=where)
    return body


def _parse(request: HttpRequest, chat: bool) -> dict:
    """The request as a call: model, messages or prompt, sampling params, n, stream, and `names`,
    our field names -> the request's own (so an error names what the client sent)."""
    body = _json_body(request)
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("Name the model (see /v1/models).", field="model")
    _refuse_unsupported(body)
    n = _whole_number(body, "n", 1, 1, MAX_CHOICES)
    streaming = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None:
        if not streaming:
            raise Invalid("stream_options is only allowed with stream: true.", field="stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise Invalid('stream_options is {"include_usage": true|false}.', field="stream_options")
        if not isinstance(options.get("include_usage", False), bool):
            raise Invalid("include_usage is true or false.", field="stream_options.include_usage")
    include_usage = bool((options or {}).get("include_usage"))
    params = {ours: body[theirs] for theirs, ours in PARAM_NAMES.items() if body.get(theirs) is not None}
    schema = _response_format(body)
    if schema is not None:
        params["json_schema"] = schema
    caller = body.get("user")  # the end user, as OpenAI's clients name it: keeps them on one canary side
    if caller is not None and (not isinstance(caller, str) or len(caller) > 256):
        raise Invalid("user is a string of at most 256 characters naming the end user.", field="user")
    names = {"max_new_tokens": "max_completion_tokens" if body.get("max_completion_tokens") is not None
             else "max_tokens"}
    if chat:
        if _flag(body, "logprobs"):
            params["logprobs"] = True
            params["top_logprobs"] = body.get("top_logprobs") or 0
        elif body.get("top_logprobs") is not None:
            raise Invalid("top_logprobs needs logprobs: true.", field="top_logprobs")
        names["prompt"] = "messages"  # a prompt too long: the messages rendered
        messages, prompt = _chat_messages(body.get("messages")), None
    else:
        top = body.get("logprobs")
        if top is not None:
            params["logprobs"] = True
            params["top_logprobs"] = _whole_number(body, "logprobs", 0, 0, MAX_COMPLETION_LOGPROBS)
        names["top_logprobs"] = names["logprobs"] = "logprobs"
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise Invalid("The prompt is one string.", field="prompt")
        messages = None
    return {"model": body["model"], "messages": messages, "prompt": prompt, "params": params, "n": n,
            "stream": streaming, "include_usage": include_usage, "names": names,
            "caller": f"user:{caller}" if caller else ""}


def _create(user, project, token, call: dict) -> list[Generation]:
    """One generation per choice; choice i of a seeded request samples with seed + i."""
    generations = []
    for i in range(call["n"]):
        params = dict(call["params"])
        if i and isinstance(params.get("seed"), int) and not isinstance(params["seed"], bool):
            params["seed"] += i
        generations.append(services.generation_create(
            user=user, project=project, model_ref=call["model"], source=Generation.Source.API, token=token,
            messages=call["messages"], prompt=call["prompt"], params=params,
            caller=call["caller"] or f"token:{token.pk}", first_choice=generations[0] if generations else None,
            choice_index=i))
    return generations


def _admit(user, project, token, call: dict):
    """(the lease on the serving limits, the generations): the request's n generations and its
    max_tokens for each are taken from the token's and the project's limits (apps.serving.limits),
    or LimitExceeded; given back if the generations cannot be created."""
    reserve = services.sampling_params(call["params"]).max_new_tokens * call["n"]
    lease = limits.acquire(project, token, slots=call["n"], reserve=reserve)
    try:
        return lease, _create(user, project, token, call)
    except BaseException:
        limits.release(lease, 0)
        raise


async def _complete(request: HttpRequest, *, chat: bool) -> HttpResponse:
    auth = await _caller(request, "POST")
    if isinstance(auth, HttpResponse):
        return auth
    user, token, project = auth
    names = None
    try:
        call = _parse(request, chat)
        names = call["names"]
        lease, generations = await sync_to_async(_admit)(user, project, token, call)
    except DomainError as exc:
        return _domain_error(exc, names)

    follows = [stream.follow(g.pk) for g in generations]
    # An error before the first token (a prompt too long) is a 400: wait for every choice's first event.
    try:
        firsts = await asyncio.gather(*(anext(f) for f in follows))
    except BaseException:
        await asyncio.shield(sync_to_async(limits.release)(lease, None))
        raise
    failed = next((first for first in firsts if first["type"] == "error"), None)
    if failed is not None:
        for follow in follows:
            await follow.aclose()  # the other choices are abandoned
        await sync_to_async(limits.release)(lease, 0)
        return _worker_error(failed["result"], names)
    reply = Reply(generations[0].pk, call["model"], chat, n=len(generations))
    events = _released(_merge([_chain(first, follow) for first, follow in zip(firsts, follows)]), lease)
    if call["stream"]:
        return StreamingHttpResponse(reply.sse(events, include_usage=call["include_usage"]),
                                     content_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    results: dict[int, dict] = {}
    async with aclosing(events):  # a client gone mid-answer abandons the generations (stream.follow)
        async for index, event in events:
            if event["type"] != "delta":
                results[index] = event["result"]
    if len(results) < len(generations) or any(r["state"] != "succeeded" for r in results.values()):
        failed = next((r for r in results.values() if r["state"] != "succeeded"), {})
        return error(500, failed.get("error") or "The generation failed.", kind="server_error")
    return JsonResponse(reply.whole([results[i] for i in range(len(generations))]))


def _worker_error(result: dict, names: dict) -> JsonResponse:
    field = result.get("field") or None
    if not field:
        return error(503, result["error"], kind="server_error")
    code = "context_length_exceeded" if field == "prompt" and "context" in result["error"] else None
    return error(400, result["error"], param=names.get(field, field), code=code)


async def _released(events, lease):
    """The events; once they end (every choice done or failed, or the client gone: closed), the
    lease's slots are given back and the tokens the choices used counted in place of its reservation
    (a choice unfinished: the reservation stays)."""
    results: dict[int, dict] = {}
    try:
        async with aclosing(events):
            async for index, event in events:
                if event["type"] != "delta":
                    results[index] = event["result"]
                yield index, event
    finally:
        used = None
        if len(results) == lease.slots:
            used = sum(r.get("prompt_tokens", 0) + r.get("completion_tokens", 0) for r in results.values())
        await asyncio.shield(sync_to_async(limits.release)(lease, used))


async def _chain(first: dict, rest):
    yield first
    async for event in rest:
        yield event


async def _merge(streams: list):
    """(index, event) from several event streams as they come. Closing it closes every stream
    (a choice not finished is abandoned, as stream.follow does for a caller gone)."""
    if len(streams) == 1:  # the usual case: no task, no queue
        async with aclosing(streams[0]) as only:
            async for event in only:
                yield 0, event
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, events) -> None:
        try:
            async for event in events:
                await queue.put((index, event))
        finally:
            queue.put_nowait((index, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            index, event = await queue.get()
            if event is None:
                left -= 1
            else:
                yield index, event
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for events in streams:
            await events.aclose()


class Reply:
    """OpenAI's response shapes for one request (its n generations)."""

    def __init__(self, generation_id: int, model: str, chat: bool, n: int = 1) -> None:
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{generation_id}"
        self.model, self.chat, self.n, self.created = model, chat, n, int(time.time())

    def _envelope(self, choices: list[dict], *, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}

    def _logprobs(self, entries: list[dict] | None, offset: int = 0):
        if entries is None:
            return None
        if self.chat:
            return {"content": entries, "refusal": None}
        offsets, at = [], offset
        for entry in entries:
            offsets.append(at)
            at += len(entry["token"])
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
                "text_offset": offsets}

    @staticmethod
    def _fingerprint(results) -> dict:
        """OpenAI's `system_fingerprint` (the backend configuration that answered): the precision the
        worker loaded the model in, so a client sees when a change of it changes the answers."""
        precisions = {r.get("precision") for r in results if r.get("precision")}
        return {"system_fingerprint": f"workbench-{precisions.pop()}"} if len(precisions) == 1 else {}

    def whole(self, results: list[dict]) -> dict:
        choices = []
        for index, result in enumerate(results):
            logprobs = self._logprobs(result.get("logprobs"))
            if self.chat:
                choices.append({"index": index, "message": {"role": "assistant", "content": result["text"]},
                                "logprobs": logprobs, "finish_reason": result["finish_reason"]})
            else:
                choices.append({"index": index, "text": result["text"], "logprobs": logprobs,
                                "finish_reason": result["finish_reason"]})
        return {**self._envelope(choices, chunk=False), **self._fingerprint(results), "usage": usage(results)}

    def _chunk(self, index: int, text: str | None, finish_reason: str | None, *, first: bool = False,
               logprobs=None, include_usage: bool = False, result: dict | None = None) -> str:
        if self.chat:
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        else:
            choice = {"index": index, "text": text or "", "logprobs": logprobs, "finish_reason": finish_reason}
        envelope = {**self._envelope([choice], chunk=True), **self._fingerprint([result] if result else [])}
        if include_usage:
            envelope["usage"] = None  # OpenAI's shape: null on every chunk but the last
        return f"data: {json.dumps(envelope)}\n\n"

    async def sse(self, events, *, include_usage: bool = False):
        results: dict[int, dict] = {}
        offsets = [0] * self.n  # /v1/completions logprobs: where each choice's text is so far
        async with aclosing(events):  # a client gone mid-stream abandons the generations (stream.follow)
            if self.chat:
                for index in range(self.n):
                    yield self._chunk(index, None, None, first=True, include_usage=include_usage)
            async for index, event in events:
                if event["type"] == "delta":
                    logprobs = self._logprobs(event.get("logprobs"), offsets[index])
                    offsets[index] += len(event["text"])
                    yield self._chunk(index, event["text"], None, logprobs=logprobs, include_usage=include_usage)
                elif event["type"] == "done":
                    results[index] = event["result"]
                    yield self._chunk(index, None, event["result"]["finish_reason"], include_usage=include_usage,
                                      result=event["result"])
                else:
                    failure = {"message": event["result"]["error"], "type": "server_error"}
                    yield f"data: {json.dumps({'error': failure})}\n\n"
            if include_usage and len(results) == self.n:
                yield f"data: {json.dumps({**self._envelope([], chunk=True), 'usage': usage(list(results.values()))})}\n\n"
            yield "data: [DONE]\n\n"


def usage(results: list[dict]) -> dict:
    """The prompt once (every choice has the same), the completion tokens of every choice."""
    prompt = results[0]["prompt_tokens"] if results else 0
    completion = sum(r["completion_tokens"] for r in results)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
