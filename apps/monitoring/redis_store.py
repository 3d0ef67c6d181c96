"""The Redis that web processes and workers share (settings.REDIS_URL), for the figures each
process publishes for the others: worker resource reports and windows of request counts.

Timeouts are short because these reads and writes sit in web requests: an unreachable Redis
must cost a page a fraction of a second, never hang it.
"""

import redis
from django.conf import settings

KEY_PREFIX = "workbench:monitoring:"
SOCKET_TIMEOUT_S = 0.5

_client: redis.Redis | None = None


def client() -> redis.Redis:
    """One client per process (redis-py's pool opens fresh connections after a fork)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=SOCKET_TIMEOUT_S,
                                       socket_connect_timeout=SOCKET_TIMEOUT_S, decode_responses=True)
    return _client
