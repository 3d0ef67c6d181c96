"""The Redis cache with one client (and so one connection pool) per process.

Django keeps cache objects per async context, and under ASGI every request runs in a context
of its own: the stock RedisCache made a new connection pool, and a new TCP connection to Redis,
for each request that touched the cache (every API call, through the rate throttles). Its client
also built a new `redis.Redis` (with its table of ~170 reply callbacks) for every operation:
a cost paid two to four times a request (throttle, principal cache); one per pool is kept here
(`redis.Redis` is safe to share between threads: each command takes a pooled connection).
"""

import threading

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

_clients: dict[tuple, object] = {}
_lock = threading.Lock()


class _ReusingClient(RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._redis: dict[int, object] = {}

    def get_client(self, key=None, *, write=False):
        index = self._get_connection_pool_index(write)
        client = self._redis.get(index)
        if client is None:
            client = self._redis.setdefault(index, self._client(connection_pool=self._get_connection_pool(write)))
        return client


class SharedRedisCache(RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = _ReusingClient

    @property
    def _cache(self):
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        client = _clients.get(key)
        if client is None:
            with _lock:
                client = _clients.setdefault(key, self._class(self._servers, **self._options))
        return client
