"""Results of pure computations kept in the shared cache under a digest of their inputs: the
same inputs are computed once while the entry lives (a day), different inputs never share an
entry, so nothing can be stale. For reads too heavy to repeat on every page view (agreement over
every answer, a leaderboard's bootstrap) whose inputs are cheap to read.

Some are too heavy even once for a web process: Python holding the GIL for a few hundred ms
stalls every other request of that process (bench/sync_views.py measured /healthz at p99 160+ ms
beside one). Those are asked for with `memoized_by_worker`: the web reads what is already
computed, or the subject's newest value while a Celery worker computes the new one."""

import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from celery import current_app
from django.core.cache import cache

T = TypeVar("T")
logger = logging.getLogger(__name__)
KEEP_S = 24 * 3600
# A computation asked of a worker is asked again after this long without an answer (the worker
# died, or none consumes the queue).
PENDING_S = 60


def _key(kind: str, inputs: Any) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
    return f"memo:{kind}:{digest}"


def _latest_key(kind: str, subject: Any) -> str:
    return f"memo-latest:{kind}:{subject}"


def memoized(kind: str, inputs: Any, compute: Callable[[], T], *, subject: Any = None) -> T:
    """compute(), or what it returned before for the same `kind` and `inputs` (JSON-able; str()
    for what JSON does not know). With a `subject` (the campaign, say), it is also kept as the
    subject's newest value, which `memoized_by_worker` shows while the next one is computed."""
    key = _key(kind, inputs)
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, KEEP_S)
        if subject is not None:
            cache.set(_latest_key(kind, subject), value, KEEP_S)
    return value


class Latest(NamedTuple):
    value: Any  # computed from exactly the inputs asked for (fresh), else the subject's newest, else None
    fresh: bool


def memoized_by_worker(kind: str, subject: Any, inputs: Any, *, task: str, args: list, queue: str = "default") -> Latest:
    """What `memoized(kind, inputs, ..., subject=subject)` keeps, without computing it here: when
    it is not there, the Celery task `task(*args)` is sent (once per inputs while PENDING_S lasts)
    to compute it with `memoized`, and the subject's newest value is returned meanwhile."""
    key = _key(kind, inputs)
    value = cache.get(key)
    if value is not None:
        return Latest(value, True)
    pending = f"memo-pending:{key}"
    if cache.add(pending, 1, PENDING_S):
        try:
            current_app.send_task(task, args=args, queue=queue)
        except Exception:  # the broker is away: the page shows what it has, the next read asks again
            logger.exception("could not send %s for %s %s", task, kind, subject)
            cache.delete(pending)
    return Latest(cache.get(_latest_key(kind, subject)), False)


def forget(kind: str, inputs: Any) -> None:
    """Drops what memoized(kind, inputs, ...) kept: the next call computes (a benchmark's cold read)."""
    cache.delete(_key(kind, inputs))
