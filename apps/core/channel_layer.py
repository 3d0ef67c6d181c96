"""The Channels layer: channels_redis's, with a receive that ends when it is cancelled.

A consumer that goes away cancels its pending receive and waits for it to end. A cancellation
that lands while the layer (re)connects to Redis is lost inside redis-py (reproduced: a socket
refused before its first message, with redis-py 7.1 and 8.1 on Python 3.11), and that receive
then went on reading forever: its consumer never finished, `/readyz` and Ctrl-C waited on it,
and the test suite hung in asyncio's shutdown. Here the inner receive runs as a task of its own
and is cancelled again until it has ended.
"""

import asyncio

from channels_redis.core import RedisChannelLayer

CANCEL_RETRY_S = 0.05
CANCEL_ATTEMPTS = 200  # 10 s: far past any one reconnect


class ChannelLayer(RedisChannelLayer):
    async def receive(self, channel):
        inner = asyncio.ensure_future(super().receive(channel))
        try:
            return await asyncio.shield(inner)
        except asyncio.CancelledError:
            await _cancel_until_done(inner)
            raise


async def _cancel_until_done(task: asyncio.Future) -> None:
    for _ in range(CANCEL_ATTEMPTS):
        if task.done():
            break
        task.cancel()
        try:
            await asyncio.wait([task], timeout=CANCEL_RETRY_S)
        except asyncio.CancelledError:  # cancelled again meanwhile: the caller re-raises anyway
            continue
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: a message or error that arrived as we left is not reported as lost
