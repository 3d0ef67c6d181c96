"""Results of pure computations kept in the shared cache under a digest of their inputs: the
same inputs are computed once while the entry lives (a day), different inputs never share an
entry, so nothing can be stale. For reads too heavy to repeat on every page view (agreement over
every answer, a leaderboard's bootstrap) whose inputs are cheap to read."""

import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.cache import cache

T = TypeVar("T")
KEEP_S = 24 * 3600


def _key(kind: str, inputs: Any) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
    return f"memo:{kind}:{digest}"


def memoized(kind: str, inputs: Any, compute: Callable[[], T]) -> T:
    """compute(), or what it returned before for the same `kind` and `inputs` (JSON-able; str()
    for what JSON does not know)."""
    key = _key(kind, inputs)
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, KEEP_S)
    return value


def forget(kind: str, inputs: Any) -> None:
    """Drops what memoized(kind, inputs, ...) kept: the next call computes (a benchmark's cold read)."""
    cache.delete(_key(kind, inputs))
