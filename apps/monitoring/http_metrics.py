"""Web request metrics, kept two ways:

- a Prometheus histogram in this process (route, method, status class), for /metrics and the
  per-route table of the monitoring page;
- per-minute request and 5xx counts and summed durations in Redis, over every web process, so
  the error rate alert can be evaluated anywhere (the periodic task in a worker included) and
  the dashboard can chart the last hour's latency and error rate.

One uvicorn process serves the web in the embedded default, so the histogram is that process's
whole story. With several web processes (`manage.py up` on PostgreSQL starts one per core) they
share it through prometheus_client's multiprocess mode: PROMETHEUS_MULTIPROC_DIR set before they
start (`up` sets it), each writes its samples to files there, and readers (route_stats, /metrics)
merge every process's files.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

import redis
from prometheus_client import Histogram

from apps.monitoring import redis_store

REQUEST_DURATION = Histogram(
    "workbench_http_request_duration_seconds",
    "Time from the request reaching Django to the response leaving it, by route pattern.",
    ["route", "method", "status"])
UNMATCHED_ROUTE = "[unmatched]"  # no URL pattern matched (a 404 for an unknown path, say)
METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

WINDOW_KEY = redis_store.KEY_PREFIX + "http:"
WINDOW_KEY_TTL_S = 2 * 3600
# Counts reach Redis at most this often per process (one pipeline), not once per request.
FLUSH_EVERY_S = 5.0


def observe(*, route: str, method: str, status: int, seconds: float) -> None:
    """Record one finished request. Labels stay bounded: route patterns, known methods and
    status classes, never raw paths."""
    REQUEST_DURATION.labels(route=route, method=method if method in METHODS else "other",
                            status=f"{status // 100}xx").observe(seconds)
    _window.add(status >= 500, seconds)


class _MinuteCounts:
    """Request and 5xx counts and summed durations per minute, kept here and added to Redis now
    and then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, list[float]] = defaultdict(lambda: [0, 0, 0.0])
        self._flushed_at = time.monotonic()

    def add(self, server_error: bool, seconds: float) -> None:
        with self._lock:
            counts = self._pending[int(time.time() // 60)]
            counts[0] += 1
            counts[1] += server_error
            counts[2] += seconds
            due = time.monotonic() - self._flushed_at >= FLUSH_EVERY_S
        if due:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0.0])
            self._flushed_at = time.monotonic()
        if not pending:
            return
        try:
            with redis_store.client().pipeline(transaction=False) as pipe:
                for minute, (requests, errors, seconds) in pending.items():
                    key = f"{WINDOW_KEY}{minute}"
                    pipe.hincrby(key, "requests", requests)
                    pipe.hincrby(key, "errors", errors)
                    pipe.hincrbyfloat(key, "seconds", seconds)
                    pipe.expire(key, WINDOW_KEY_TTL_S)
                pipe.execute()
        except redis.RedisError:
            # Dropped, not retried: the window is for alerting on a rate, and a Redis outage
            # must not make every request wait or memory grow.
            pass


_window = _MinuteCounts()


def flush() -> None:
    """Push this process's pending counts now (before reading the window in this process)."""
    _window.flush()


@dataclass(frozen=True)
class WindowCounts:
    minutes: int
    requests: int
    errors: int  # 5xx answers

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None


def window_counts(minutes: int) -> WindowCounts:
    """Requests and 5xx answers of every web process in the last `minutes` whole minutes plus
    the current one. Raises redis.RedisError when Redis cannot be reached."""
    now_minute = int(time.time() // 60)
    with redis_store.client().pipeline(transaction=False) as pipe:
        for minute in range(now_minute - minutes, now_minute + 1):
            pipe.hmget(f"{WINDOW_KEY}{minute}", "requests", "errors")
        rows = pipe.execute()
    return WindowCounts(minutes=minutes, requests=sum(int(r or 0) for r, _ in rows),
                        errors=sum(int(e or 0) for _, e in rows))


@dataclass(frozen=True)
class Minute:
    start: int  # epoch seconds
    requests: int
    errors: int  # 5xx answers
    seconds: float  # summed request durations

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None

    @property
    def mean_s(self) -> float | None:
        return self.seconds / self.requests if self.requests else None


def minutes(count: int) -> list[Minute]:
    """Every web process's requests, 5xx answers and time spent, minute by minute, oldest first:
    the last `count` whole minutes and the current one (at most WINDOW_KEY_TTL_S back). Raises
    redis.RedisError when Redis cannot be reached."""
    now_minute = int(time.time() // 60)
    span = range(now_minute - count, now_minute + 1)
    with redis_store.client().pipeline(transaction=False) as pipe:
        for minute in span:
            pipe.hmget(f"{WINDOW_KEY}{minute}", "requests", "errors", "seconds")
        rows = pipe.execute()
    return [Minute(start=minute * 60, requests=int(r or 0), errors=int(e or 0), seconds=float(s or 0))
            for minute, (r, e, s) in zip(span, rows)]


@dataclass
class RouteStats:
    route: str
    requests: int = 0
    server_errors: int = 0
    seconds_total: float = 0.0
    buckets: dict[float, float] | None = None  # upper bound -> cumulative count

    @property
    def error_rate(self) -> float | None:
        return self.server_errors / self.requests if self.requests else None

    @property
    def mean_s(self) -> float | None:
        return self.seconds_total / self.requests if self.requests else None

    @property
    def p95_bound_s(self) -> float | None:
        return self.quantile_bound_s(0.95)

    def quantile_bound_s(self, q: float) -> float | None:
        """The histogram bucket bound under which at least `q` of the requests finished (the
        histogram keeps buckets, not the latencies themselves); None above the largest bound."""
        if not self.requests or not self.buckets:
            return None
        for bound in sorted(self.buckets):
            if self.buckets[bound] >= q * self.requests:
                return None if bound == float("inf") else bound
        return None


def request_metrics():
    """The request histogram as collected metrics: this process's, or in multiprocess mode every
    web process's, merged."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REQUEST_DURATION.collect()
    from prometheus_client import CollectorRegistry, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return [metric for metric in registry.collect() if metric.name == "workbench_http_request_duration_seconds"]


def route_stats() -> list[RouteStats]:
    """Requests per route since the web processes started, busiest first."""
    routes: dict[str, RouteStats] = {}
    for metric in request_metrics():
        for sample in metric.samples:
            stats = routes.setdefault(sample.labels["route"], RouteStats(route=sample.labels["route"], buckets={}))
            if sample.name.endswith("_count"):
                stats.requests += int(sample.value)
                if sample.labels["status"] == "5xx":
                    stats.server_errors += int(sample.value)
            elif sample.name.endswith("_sum"):
                stats.seconds_total += sample.value
            elif sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                stats.buckets[bound] = stats.buckets.get(bound, 0) + sample.value
    return sorted(routes.values(), key=lambda s: (-s.requests, s.route))
