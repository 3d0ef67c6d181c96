import asyncio
import time
from contextlib import aclosing

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from apps.core.errors import DomainError, Invalid
from apps.projects import policy
from apps.projects.events import user_group
from apps.projects.models import Project
from apps.projects.sockets import PolicyConsumer
from apps.serving import limits, services, stream
from apps.serving.models import Generation

PROVIDER_PREFIX = "provider:"  # a playground model value naming a provider model (apps.providers)
# The playground's sampling names -> provider_chat's (OpenAI's).
PROVIDER_PARAMS = {"max_new_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p", "stop": "stop",
                   "seed": "seed"}


class PlaygroundConsumer(PolicyConsumer):
    """The playground of one project: {"type": "generate", "model", "messages", "params"} in
    ({"type": "cancel", "id"} stops one after its next token);
    "started", "delta" (text as it is generated), then "done" (with usage and timings) or
    "error" out. One generation at a time per socket; the stream runs as a task so the
    consumer still handles revocation while it runs."""

    def allowed(self) -> bool:
        self.project = Project.objects.filter(pk=self.scope["url_route"]["kwargs"]["project_id"]).first()
        return self.permits("model.generate", self.project)

    def groups_to_join(self) -> list[str]:
        return [user_group(self.scope["user"].pk)]

    async def receive_json(self, content, **kwargs):
        if content["type"] == "cancel" and str(content.get("id", "")).startswith("provider-"):
            return  # a provider's answer comes whole, in one HTTP call: nothing to stop midway
        if content["type"] == "cancel":
            try:
                await database_sync_to_async(self._cancel)(content.get("id"))
            except DomainError as exc:
                await self.send_json({"type": "error", "detail": exc.message, "field": exc.field})
            return
        if content["type"] != "generate":
            await super().receive_json(content, **kwargs)
            return
        if getattr(self, "running", None) and not self.running.done():
            await self.send_json({"type": "error", "detail": "Wait for the current answer to finish."})
            return
        if str(content.get("model", "")).startswith(PROVIDER_PREFIX):
            self.running = asyncio.create_task(self._provider_answer(content))
            return
        try:
            lease, generation = await database_sync_to_async(self._create)(content)
        except DomainError as exc:
            await self.send_json({"type": "error", "detail": exc.message, "field": exc.field})
            return
        self.running = asyncio.create_task(self._stream(generation.pk, lease))

    def _create(self, content: dict):
        """(the lease on the project's serving limits, the generation)."""
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.get(pk=self.scope["user"].pk)
        params = content.get("params") or {}
        policy.require(user, "model.generate", self.project)  # before a limit is taken or named
        reserve = services.sampling_params(params if isinstance(params, dict) else {}).max_new_tokens
        lease = limits.acquire(self.project, None, slots=1, reserve=reserve)
        try:
            return lease, services.generation_create(
                user=user, project=self.project, model_ref=content.get("model"), source=Generation.Source.PLAYGROUND,
                messages=content.get("messages"), params=params)
        except BaseException:
            limits.release(lease, 0)
            raise

    def _cancel(self, generation_id) -> None:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.get(pk=self.scope["user"].pk)
        services.generation_cancel(user=user, project=self.project, generation_id=generation_id)

    async def _stream(self, generation_id: int, lease) -> None:
        sent = time.monotonic()
        used = None  # tokens the answer used, once it ends; unknown if the socket goes first
        try:
            await self.send_json({"type": "started", "id": generation_id})
            # Closed when this task is cancelled (the socket went away): the generation is abandoned.
            async with aclosing(stream.follow(generation_id)) as events:
                async for event in events:
                    if event["type"] == "delta":
                        await self.send_json({"type": "delta", "id": generation_id, "text": event["text"]})
                    else:
                        result = event["result"]
                        used = result.get("prompt_tokens", 0) + result.get("completion_tokens", 0)
                        await self.send_json({"type": event["type"], "id": generation_id, "result": result,
                                              "html": event.get("html", ""),
                                              "round_trip_s": round(time.monotonic() - sent, 3)})
        finally:
            if used is None:  # no final event: the socket went away, perhaps before stream.follow began
                await asyncio.shield(database_sync_to_async(services.generation_abandon)(generation_id))
            await asyncio.shield(database_sync_to_async(limits.release)(lease, used))

    async def _provider_answer(self, content: dict) -> None:
        """An outside provider's answer, whole (provider_chat does not stream): "started", one
        "delta" with the text, then "done" with usage and the Markdown rendering, like a local one.
        The HTTP call runs off the shared database thread, so a slow provider holds up nobody else."""
        from apps.core.rendering import render_markdown

        sent = time.monotonic()
        label = f"provider-{int(sent * 1000)}"
        try:
            params = content.get("params") or {}
            if not isinstance(params, dict):
                raise Invalid("params is an object.", field="params")
            unknown = sorted(set(params) - set(PROVIDER_PARAMS))
            if unknown:
                raise Invalid(f"{unknown[0]} is not a setting outside providers take.", field=unknown[0])
            await self.send_json({"type": "started", "id": label})
            reply = await sync_to_async(self._provider_chat, thread_sensitive=False)(
                content["model"][len(PROVIDER_PREFIX):], content.get("messages"),
                {PROVIDER_PARAMS[k]: v for k, v in params.items()})
        except DomainError as exc:
            await self.send_json({"type": "error", "detail": exc.message, "field": exc.field})
            return
        result = {"id": label, "state": "succeeded", "text": reply.text, "finish_reason": reply.finish_reason,
                  "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                  "time_to_first_token_s": None, "total_s": reply.latency_s,
                  "tokens_per_s": round(reply.completion_tokens / reply.latency_s, 1) if reply.latency_s else None,
                  "error": "", "field": ""}
        await self.send_json({"type": "delta", "id": label, "text": reply.text})
        await self.send_json({"type": "done", "id": label, "result": result, "html": render_markdown(reply.text),
                              "round_trip_s": round(time.monotonic() - sent, 3)})

    def _provider_chat(self, model_id: str, messages, params: dict):
        from django.contrib.auth import get_user_model
        from django.db import connection

        from apps.providers import services as provider_services

        try:  # on an executor thread of its own: its connection is closed here, not left behind
            user = get_user_model().objects.get(pk=self.scope["user"].pk)
            return provider_services.provider_chat(self.project, model_id, messages, user=user, **params)
        finally:
            connection.close()

    async def disconnect(self, code):
        if getattr(self, "running", None):
            self.running.cancel()
        await super().disconnect(code)
