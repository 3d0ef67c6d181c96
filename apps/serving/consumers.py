import asyncio
import time
from contextlib import aclosing

from channels.db import database_sync_to_async

from apps.core.errors import DomainError
from apps.projects.events import user_group
from apps.projects.models import Project
from apps.projects.sockets import PolicyConsumer
from apps.serving import services, stream
from apps.serving.models import Generation


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
        try:
            generation = await database_sync_to_async(self._create)(content)
        except DomainError as exc:
            await self.send_json({"type": "error", "detail": exc.message, "field": exc.field})
            return
        self.running = asyncio.create_task(self._stream(generation.pk))

    def _create(self, content: dict) -> Generation:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.get(pk=self.scope["user"].pk)
        return services.generation_create(user=user, project=self.project, model_ref=content.get("model"),
                                          source=Generation.Source.PLAYGROUND, messages=content.get("messages"),
                                          params=content.get("params") or {})

    def _cancel(self, generation_id) -> None:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.get(pk=self.scope["user"].pk)
        services.generation_cancel(user=user, project=self.project, generation_id=generation_id)

    async def _stream(self, generation_id: int) -> None:
        sent = time.monotonic()
        await self.send_json({"type": "started", "id": generation_id})
        # Closed when this task is cancelled (the socket went away): the generation is abandoned.
        async with aclosing(stream.follow(generation_id)) as events:
            async for event in events:
                if event["type"] == "delta":
                    await self.send_json({"type": "delta", "id": generation_id, "text": event["text"]})
                else:
                    await self.send_json({"type": event["type"], "id": generation_id, "result": event["result"],
                                          "html": event.get("html", ""),
                                          "round_trip_s": round(time.monotonic() - sent, 3)})

    async def disconnect(self, code):
        if getattr(self, "running", None):
            self.running.cancel()
        await super().disconnect(code)
