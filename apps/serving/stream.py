"""Following a generation from async code (a websocket consumer, a streaming HTTP response):
subscribe to its group first, then send it to a worker, so no delta can be missed."""

import asyncio
import time
from collections.abc import AsyncIterator

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from apps.serving import events, services


async def follow(generation_id: int) -> AsyncIterator[dict]:
    """Yield {"type": "delta", "text", "logprobs"} events (logprobs None unless asked for), then one {"type": "done"|"error", "result"}.

    If the follower goes away first (its socket closed, its HTTP client disconnected: this
    generator is cancelled or closed), the generation is abandoned: a queued one never starts,
    a running one stops after its next token, and the channel and group are released."""
    layer = get_channel_layer()
    group = events.generation_group(generation_id)
    channel = None
    finished = False
    try:  # from the first await: a follower cancelled while it subscribes abandons the generation too
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        await database_sync_to_async(services.generation_enqueue)(generation_id)
        deadline = time.monotonic() + settings.INFERENCE_TIMEOUT_S + 30
        while True:
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
                # that meets a message, and the receiver then outlived its socket.
                async with asyncio.timeout(max(deadline - time.monotonic(), 0)):
                    message = await layer.receive(channel)
            except TimeoutError:
                finished = True
                yield {"type": "error", "result": {"id": generation_id, "error": "No worker answered in time.",
                                                   "field": ""}}
                return
            if message.get("id") != generation_id:
                continue
            if message["type"] == "generation.delta":
                yield {"type": "delta", "text": message["text"], "logprobs": message.get("logprobs")}
            else:
                finished = True
                yield {"type": "done" if message["type"] == "generation.done" else "error",
                       "result": message["result"], "html": message.get("html", "")}
                return
    finally:
        await asyncio.shield(_release(layer, group, channel, None if finished else generation_id))


async def _release(layer, group: str, channel: str | None, abandoned_id: int | None) -> None:
    if channel is not None:
        await layer.group_discard(group, channel)
    if abandoned_id is not None:
        await database_sync_to_async(services.generation_abandon)(abandoned_id)
