"""What the serving limits (apps/serving/limits.py) add to each /v1 request, against what every
/v1 request already pays for the token's request throttle (DRF's TokenRateThrottle, a cache get
and set in the same Redis).

Ours: one `limits.acquire` (the check-and-take Lua script: two running-slot sets and two
token windows, each holding BENCH_LIMITS_WINDOW requests of the last minute) and one
`limits.release` per request, sequentially from one thread. Baseline: one
`TokenRateThrottle.allow_request` per request, the same Redis, interleaved in rounds with ours so
load from other work falls on both. Target: ours <= 3x the baseline (two round trips against
two, the scripts doing more per trip). Redis at BENCH_REDIS_URL (keys cleared at the end); no
database. Under a minute.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from bench.report import publish, result

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/2")
REQUESTS = int(os.environ.get("BENCH_LIMITS_REQUESTS", "2000"))
ROUNDS = 4
WINDOW = int(os.environ.get("BENCH_LIMITS_WINDOW", "500"))  # earlier requests in each token window
TARGET_RATIO = 3.0


def _setup() -> None:
    os.environ.update(DJANGO_SETTINGS_MODULE="workbench.settings", REDIS_URL=REDIS_URL,
                      WORKBENCH_DATA_DIR=os.environ.get("WORKBENCH_DATA_DIR", "/tmp/bench-serving-limits"))
    import django

    django.setup()


def run(options: list[str] = ()) -> list[dict]:
    _setup()
    from django.conf import settings
    from django.core.cache import cache
    from rest_framework.settings import api_settings

    from apps.accounts.throttling import TokenRateThrottle
    from apps.serving import limits

    # Limits high enough never to refuse: the cost of the check, not of a refusal.
    project = SimpleNamespace(pk=999_001, serving_max_concurrent_per_token=10_000,
                              serving_max_concurrent_per_project=10_000,
                              serving_tokens_per_minute_per_token=1_000_000_000,
                              serving_tokens_per_minute_per_project=1_000_000_000)
    token = SimpleNamespace(pk=999_002, key_id="bench-serving-limits")
    TokenRateThrottle.THROTTLE_RATES = {**api_settings.DEFAULT_THROTTLE_RATES, "token": "100000000/min"}
    throttled = SimpleNamespace(auth=token)
    for _ in range(WINDOW):  # a window as a busy minute leaves it
        limits.release(limits.acquire(project, token, slots=1, reserve=64), 80)

    def ours() -> float:
        started = time.perf_counter()
        for _ in range(REQUESTS):
            limits.release(limits.acquire(project, token, slots=1, reserve=64), 80)
        return time.perf_counter() - started

    def baseline() -> float:
        started = time.perf_counter()
        for _ in range(REQUESTS):
            TokenRateThrottle().allow_request(throttled, None)
        return time.perf_counter() - started

    ours_s, baseline_s = [], []
    try:
        for _ in range(ROUNDS):
            baseline_s.append(baseline())
            ours_s.append(ours())
    finally:
        client = limits._redis()
        keys = list(client.scan_iter(match=f"{limits.KEY_PREFIX}*"))
        if keys:
            client.delete(*keys)
        cache.delete(TokenRateThrottle.cache_format % {"scope": "token", "ident": token.key_id})
    ours_us = min(ours_s) / REQUESTS * 1e6
    baseline_us = min(baseline_s) / REQUESTS * 1e6
    return publish([result(
        name="serving_limits_per_request", metric="acquire + release per /v1 request", unit="us", value=ours_us,
        baseline_what="TokenRateThrottle.allow_request", baseline_value=baseline_us,
        target=f"<= {TARGET_RATIO:g}x the throttle", passed=ours_us <= TARGET_RATIO * baseline_us,
        extra={"requests": REQUESTS, "rounds": ROUNDS, "window_entries": WINDOW, "redis": settings.REDIS_URL})])


if __name__ == "__main__":
    run()
