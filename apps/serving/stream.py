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
    """Yield {"type": "delta", "text"} events, then one {"type": "done"|"error", "result"}."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = events.generation_group(generation_id)
    await layer.group_add(group, channel)
    try:
        await database_sync_to_async(services.generation_enqueue)(generation_id)
        deadline = time.monotonic() + settings.INFERENCE_TIMEOUT_S + 30
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=max(deadline - time.monotonic(), 0))
            except asyncio.TimeoutError:
                yield {"type": "error", "result": {"id": generation_id, "error": "No worker answered in time.",
                                                   "field": ""}}
                return
            if message.get("id") != generation_id:
                continue
            if message["type"] == "generation.delta":
                yield {"type": "delta", "text": message["text"]}
            else:
                yield {"type": "done" if message["type"] == "generation.done" else "error",
                       "result": message["result"]}
                return
    finally:
        await layer.group_discard(group, channel)
