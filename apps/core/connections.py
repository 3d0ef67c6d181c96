"""How many websockets one person and one address hold open, across every web process.

Each open socket is a member of a Redis sorted set per user and per address, scored with the
time it last said it was alive; a socket refreshes its entries while open and removes them when
it closes, and entries of a process that died expire after STALE_S. A new socket over either cap
is refused (CLOSE_TOO_MANY_SOCKETS). Memory stays bounded: at most the caps' worth of entries a key.
"""

import time

from django.conf import settings
from django.core.cache import cache

STALE_S = 120.0
REFRESH_S = STALE_S / 3


def _client():
    return cache._cache.get_client(write=True)


def _keys(user_id: int, address: str | None) -> list[tuple[str, int]]:
    prefix = settings.CACHES["default"]["KEY_PREFIX"]
    keys = [(f"{prefix}:ws:user:{user_id}", settings.WEBSOCKETS_PER_USER)]
    if address:
        keys.append((f"{prefix}:ws:addr:{address}", settings.WEBSOCKETS_PER_ADDRESS))
    return keys


def admit(*, user_id: int, address: str | None, channel: str) -> str | None:
    """Count this socket in; None if admitted, else which cap it is over ("user" or "address")."""
    client = _client()
    now = time.time()
    keys = _keys(user_id, address)
    pipe = client.pipeline()
    for key, _ in keys:
        pipe.zremrangebyscore(key, "-inf", now - STALE_S)
        pipe.zcard(key)
    counts = pipe.execute()[1::2]
    for (key, cap), count in zip(keys, counts):
        if count >= cap:
            return "user" if ":ws:user:" in key else "address"
    pipe = client.pipeline()
    for key, _ in keys:
        pipe.zadd(key, {channel: now})
        pipe.expire(key, int(STALE_S) + 1)
    pipe.execute()
    return None


def refresh(*, user_id: int, address: str | None, channel: str) -> None:
    client = _client()
    pipe = client.pipeline()
    for key, _ in _keys(user_id, address):
        pipe.zadd(key, {channel: time.time()}, xx=True)
        pipe.expire(key, int(STALE_S) + 1)
    pipe.execute()


def release(*, user_id: int, address: str | None, channel: str) -> None:
    client = _client()
    pipe = client.pipeline()
    for key, _ in _keys(user_id, address):
        pipe.zrem(key, channel)
    pipe.execute()


def scope_address(scope) -> str | None:
    """The client's address as the login lockout sees it: the connection's, or with
    TRUSTED_PROXY_COUNT proxies in front, the hop they vouch for in X-Forwarded-For."""
    proxies = settings.AXES_IPWARE_PROXY_COUNT
    if proxies:
        for name, value in scope.get("headers") or []:
            if name.lower() == b"x-forwarded-for":
                hops = [hop.strip() for hop in value.decode("latin1").split(",") if hop.strip()]
                if len(hops) >= proxies:
                    return hops[-proxies][:64]
    client = scope.get("client")
    return client[0] if client else None
