"""Fair sharing of serving: per API token and per project, how many generations run at once and
how many tokens (prompt and completion) a minute they use.

    lease = acquire(project, token, slots=n, reserve=max_tokens * n)   # or LimitExceeded (429)
    ...                                                                # the generations run
    release(lease, used_tokens)                                        # when they end, however

The counts live in the shared Redis (settings.REDIS_URL; the embedded default runs one too), and
each check-and-take is one Lua script, so every web process sees the same numbers and two
requests can never both take the last slot. Running generations are a sorted set of slots per
token and per project, each scored with the time it expires: a web process that dies holding
slots leaks them only until then (the generation's own timeout, plus a margin). Tokens a minute
are a sliding window: each request's tokens, timed, in a sorted set (the times) and a hash (the
amounts, and their running sum); at admission it reserves its max_tokens, and when it ends the real count replaces the
reservation (a stream the client left keeps its reservation: what it used is not known here).
Over a limit, the answer names the limit and says when to retry: for tokens a minute, when enough
of the window's oldest requests will have left it; for generations at once, a second.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

import redis
from django.conf import settings

from apps.core.errors import DomainError, QuotaExceeded

logger = logging.getLogger(__name__)

KEY_PREFIX = "workbench:serving-limits:"
WINDOW_S = 60
CONCURRENT_RETRY_S = 1  # a running generation may end any moment
SOCKET_TIMEOUT_S = 2.0

# Where a limit comes from: the project's field, else the site's setting (0 there: no limit).
LIMITS = {
    "serving_max_concurrent_per_token": "SERVING_MAX_CONCURRENT_PER_TOKEN",
    "serving_max_concurrent_per_project": "SERVING_MAX_CONCURRENT_PER_PROJECT",
    "serving_tokens_per_minute_per_token": "SERVING_TOKENS_PER_MINUTE_PER_TOKEN",
    "serving_tokens_per_minute_per_project": "SERVING_TOKENS_PER_MINUTE_PER_PROJECT",
}
MESSAGES = {
    "serving_max_concurrent_per_token": "generations running at once for this API token",
    "serving_max_concurrent_per_project": "generations running at once for this project",
    "serving_tokens_per_minute_per_token": "tokens per minute for this API token",
    "serving_tokens_per_minute_per_project": "tokens per minute for this project",
}

# KEYS: running slots of the token, of the project; window times of the token, of the project;
# window amounts of the token, of the project.
# ARGV: now, lease id, slots, reserve, slot lifetime s, window s, then the four limits (0: none) in
# the order of LIMITS. Returns {1} when taken, or {0, index of the limit (1-4), retry after s, whether
# the request alone is over it}.
_ACQUIRE = """
local now, id, slots, reserve = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lifetime, window = tonumber(ARGV[5]), tonumber(ARGV[6])
for i = 1, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  local limit = tonumber(ARGV[6 + i])
  if limit > 0 then
    if slots > limit then return {0, i, 0, 1} end
    if redis.call('ZCARD', KEYS[i]) + slots > limit then return {0, i, 0, 0} end
  end
end
for i = 3, 4 do
  local times, amounts = KEYS[i], KEYS[i + 2]
  for _, old in ipairs(redis.call('ZRANGEBYSCORE', times, '-inf', now - window)) do
    redis.call('HINCRBY', amounts, TOTAL, -tonumber(redis.call('HGET', amounts, old) or 0))
    redis.call('HDEL', amounts, old)
  end
  redis.call('ZREMRANGEBYSCORE', times, '-inf', now - window)
  local limit = tonumber(ARGV[6 + i])
  if limit > 0 then
    if reserve > limit then return {0, i, 0, 1} end
    local used = tonumber(redis.call('HGET', amounts, TOTAL) or 0)
    if used + reserve > limit then
      local entries = redis.call('ZRANGE', times, 0, -1, 'WITHSCORES')
      local retry = window
      for j = 1, #entries, 2 do
        used = used - tonumber(redis.call('HGET', amounts, entries[j]) or 0)
        if used + reserve <= limit then retry = tonumber(entries[j + 1]) + window - now; break end
      end
      return {0, i, tostring(retry), 0}
    end
  end
end
for i = 1, 2 do
  if i == 2 or tonumber(ARGV[6 + i]) > 0 then  -- a project's are always kept: the in-flight figure
    for s = 1, slots do redis.call('ZADD', KEYS[i], now + lifetime, id .. ':' .. s) end
    redis.call('EXPIRE', KEYS[i], math.ceil(lifetime) + 1)
  end
end
for i = 3, 4 do
  if tonumber(ARGV[6 + i]) > 0 then
    redis.call('ZADD', KEYS[i], now, id)
    redis.call('HSET', KEYS[i + 2], id, reserve)
    redis.call('HINCRBY', KEYS[i + 2], TOTAL, reserve)
    redis.call('EXPIRE', KEYS[i], window + 1)
    redis.call('EXPIRE', KEYS[i + 2], window + 1)
  end
end
return {1}
"""

# KEYS as _ACQUIRE's. ARGV: now, lease id, slots, tokens used (-1: keep the reservation), window s.
_RELEASE = """
local now, id, slots, used, window = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
for i = 1, 2 do
  for s = 1, slots do redis.call('ZREM', KEYS[i], id .. ':' .. s) end
end
if used >= 0 then
  for i = 3, 4 do
    local reserved = redis.call('HGET', KEYS[i + 2], id)
    if reserved and redis.call('ZSCORE', KEYS[i], id) then
      redis.call('ZADD', KEYS[i], now, id)
      redis.call('HSET', KEYS[i + 2], id, used)
      redis.call('HINCRBY', KEYS[i + 2], TOTAL, used - tonumber(reserved))
      redis.call('EXPIRE', KEYS[i], window + 1)
      redis.call('EXPIRE', KEYS[i + 2], window + 1)
    end
  end
end
return 1
"""
# Each window's hash keeps its running sum under this field, so a check reads one number instead
# of adding up the minute's requests (measured: bench/serving_limits.py).
_TOTAL_FIELD = "total"
_ACQUIRE = f"local TOTAL = '{_TOTAL_FIELD}'\n" + _ACQUIRE
_RELEASE = f"local TOTAL = '{_TOTAL_FIELD}'\n" + _RELEASE


class LimitExceeded(QuotaExceeded):
    """Over one of the serving limits (`field` names it): 429 with Retry-After."""

    def __init__(self, message: str, *, field: str, retry_after_s: int) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s


class LimitsUnavailable(DomainError):
    status = 503


@dataclass(frozen=True)
class Lease:
    """What one request took: `slots` generations running, `reserve` tokens of the window."""

    id: str
    keys: tuple[str, ...]
    slots: int
    reserve: int


_client: redis.Redis | None = None
_scripts: dict[str, object] = {}


def _redis() -> redis.Redis:
    """One client per process (redis-py's pool opens fresh connections after a fork)."""
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=SOCKET_TIMEOUT_S,
                                       socket_connect_timeout=SOCKET_TIMEOUT_S, decode_responses=True)
        _scripts["acquire"] = _client.register_script(_ACQUIRE)
        _scripts["release"] = _client.register_script(_RELEASE)
    return _client


def limits_for(project) -> dict[str, int]:
    """Each limit of LIMITS for `project`: its own value, else the site's (0: no limit)."""
    return {name: getattr(project, name) if getattr(project, name) is not None else max(0, getattr(settings, setting))
            for name, setting in LIMITS.items()}


def _keys(project_id: int, token_id) -> tuple[str, ...]:
    token = f"token:{token_id}" if token_id is not None else "token:none"
    project = f"project:{project_id}"
    return (f"{KEY_PREFIX}running:{token}", f"{KEY_PREFIX}running:{project}",
            f"{KEY_PREFIX}window:{token}", f"{KEY_PREFIX}window:{project}",
            f"{KEY_PREFIX}amounts:{token}", f"{KEY_PREFIX}amounts:{project}")


def acquire(project, token, *, slots: int, reserve: int) -> Lease:
    """Take `slots` running generations and `reserve` tokens of the minute for `token` (None: a
    person in the playground, only the project's limits apply) and its project, or raise
    LimitExceeded naming the first limit it is over."""
    limits = limits_for(project)
    if token is None:
        limits["serving_max_concurrent_per_token"] = limits["serving_tokens_per_minute_per_token"] = 0
    lease = Lease(uuid.uuid4().hex, _keys(project.pk, getattr(token, "pk", None)), slots, reserve)
    lifetime = settings.INFERENCE_TIMEOUT_S + 60  # a stream's wait on the worker ends by then
    _redis()
    try:
        answer = _scripts["acquire"](keys=lease.keys, args=[time.time(), lease.id, slots, reserve, lifetime, WINDOW_S,
                                                            *limits.values()])
    except redis.RedisError as exc:
        raise LimitsUnavailable(f"The serving limits cannot be checked now: {exc}") from None
    if answer[0] == 1:
        return lease
    name = list(LIMITS)[int(answer[1]) - 1]
    limit = limits[name]
    if int(answer[3]):
        asked = f"{slots} generations" if name.startswith("serving_max_concurrent") else f"{reserve} tokens"
        raise LimitExceeded(f"The request alone is over the limit of {limit:,} {MESSAGES[name]} (it asks for "
                            f"{asked}: lower n or max_tokens).", field=name, retry_after_s=WINDOW_S)
    retry = CONCURRENT_RETRY_S if name.startswith("serving_max_concurrent") else max(1, int(float(answer[2]) + 0.999))
    raise LimitExceeded(f"Rate limit reached: {limit:,} {MESSAGES[name]}. Retry in {retry} s.", field=name,
                        retry_after_s=retry)


def release(lease: Lease, used_tokens: int | None) -> None:
    """Give the lease's slots back; count `used_tokens` in the window in place of its reservation
    (None: keep the reservation). An unreachable Redis is logged, not raised: the slots expire."""
    try:
        _redis()
        _scripts["release"](keys=lease.keys, args=[time.time(), lease.id, lease.slots,
                                                   -1 if used_tokens is None else int(used_tokens), WINDOW_S])
    except redis.RedisError:
        logger.warning("releasing serving lease %s failed; its slots will expire", lease.id)


def running_by_project() -> dict[int, int]:
    """Generations each project runs now (those running any), as the limits count them; {} when
    Redis cannot be asked."""
    try:
        client = _redis()
        prefix = f"{KEY_PREFIX}running:project:"
        now = time.time()
        counts = {int(key[len(prefix):]): client.zcount(key, now, "+inf")
                  for key in client.scan_iter(match=f"{prefix}*", count=1000)}
    except redis.RedisError:
        return {}
    return {project: count for project, count in sorted(counts.items()) if count}


def running(project_id: int) -> int:
    """Generations the project runs now, as the limits count them."""
    try:
        client = _redis()
        return client.zcount(_keys(project_id, None)[1], time.time(), "+inf")
    except redis.RedisError:
        return 0
