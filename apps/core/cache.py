"""The Redis cache with one client (and so one connection pool) per process.

Django keeps cache objects per async context, and under ASGI every request runs in a context
of its own: the stock RedisCache made a new connection pool, and a new TCP connection to Redis,
for each request that touched the cache (every API call, through the rate throttles).
"""

import threading

from django.core.cache.backends.redis import RedisCache

_clients: dict[tuple, object] = {}
_lock = threading.Lock()


class SharedRedisCache(RedisCache):
    @property
    def _cache(self):
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        client = _clients.get(key)
        if client is None:
            with _lock:
                client = _clients.setdefault(key, self._class(self._servers, **self._options))
        return client
