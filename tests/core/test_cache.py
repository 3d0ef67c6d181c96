"""One Redis client per process: Django makes a cache object per async context (every ASGI
request starts one), and the stock backend made a new connection pool, and connection, for each."""

import contextvars

from django.core.cache import caches


def test_every_request_context_shares_one_redis_client():
    here = caches["default"]
    there = contextvars.Context().run(lambda: caches["default"])  # a fresh context, as a new request's
    assert there is not here  # Django's premise: a cache object per context
    assert there._cache is here._cache  # but one client, one pool
    here.set("shared-cache-check", 41)
    assert there.get("shared-cache-check") == 41
    here.delete("shared-cache-check")
