"""The inference engine's figures, per model and adapter: Prometheus metrics in each inference
worker, published through Redis to the web's /metrics and the monitoring page.

In the worker: the batcher (workers.inference) tells an Observer what it does; EngineObserver
turns that into histograms, counters and gauges in a registry of the worker's own (not the
process-wide one: the worker's process metrics are not ours to publish). The worker writes the
registry's text exposition to Redis under one key per worker with a TTL, like the resource
reports of worker_report: after every generation (so a figure is current as soon as an answer
ends) and on the report tick (so the key lives while the worker does, and vanishes with it).

In the web: /metrics serves every live worker's figures with a `worker` label added (each
worker's counters reset on its own restart, which Prometheus' rate() understands per series);
the monitoring page sums them over workers per model and adapter.

Label cardinality is bounded: `model` is the served base model's name and `adapter` the adapter
version's name (empty for the base's own requests). A worker process gives at most
settings.INFERENCE_METRIC_SERIES_MAX (model, adapter) pairs labels of their own; requests of any later pair count under
model="other", adapter="other", so a worker that served thousands of adapters still publishes a
bounded text. Batch figures (occupancy, key/value cache, memory) are per model only: one batch
runs a base model's rows of every adapter together.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable

import redis
from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from apps.monitoring import redis_store
from workers.inference import Observer

logger = logging.getLogger(__name__)

KEY = redis_store.KEY_PREFIX + "engine:"
TTL_S = 30  # as worker_report.REPORT_TTL_S: three report ticks
OTHER = "other"
LABELS = ["model", "adapter"]

# Bucket bounds (seconds) around what the demo model does on 2 CPU cores: a first token in
# 0.05-1 s, a token every 20-100 ms, and the tail a loaded worker adds.
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
GAP_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.5, 5.0)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RATIO_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class EngineObserver(Observer):
    """The batcher's observations as Prometheus metrics. `name()` gives a model key and an
    adapter directory the labels they are published under (call it before submitting);
    `memory` (optional) reads the model cache's (base bytes, adapter bytes) per model key;
    `max_series` bounds the (model, adapter) pairs labelled on their own."""

    def __init__(self, memory: Callable[[], dict[str, tuple[int, int]]] | None = None, *, max_series: int) -> None:
        self.memory, self.max_series = memory, max_series
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._models: dict[str, str] = {}  # model key -> model label
        self._series: dict[tuple[str, str | None], tuple[str, str]] = {}  # (model key, adapter dir) -> labels
        r = self.registry
        self.requests = Counter("workbench_inference_requests", "Generations the engine ended, by model and adapter.",
                                LABELS, registry=r)
        self.tokens = Counter("workbench_inference_tokens", "Tokens generated, by model and adapter.", LABELS,
                              registry=r)
        self.ttft = Histogram("workbench_inference_ttft_seconds",
                              "Time from a request's submission to its first token (queue wait and prefill).",
                              LABELS, buckets=TTFT_BUCKETS, registry=r)
        self.gap = Histogram("workbench_inference_inter_token_seconds",
                             "Time between a request's consecutive tokens.", LABELS, buckets=GAP_BUCKETS, registry=r)
        self.wait = Histogram("workbench_inference_queue_wait_seconds",
                              "Time from a request's submission to its admission into the running batch.",
                              LABELS, buckets=WAIT_BUCKETS, registry=r)
        self.occupancy = Histogram("workbench_inference_batch_occupancy_ratio",
                                   "At each prefill or decoding step, how full the batch was: rows of its row limit, "
                                   "or tokens of what the key/value cache budget holds.",
                                   ["model", "resource"], buckets=RATIO_BUCKETS, registry=r)
        self.busy = Counter("workbench_inference_busy_seconds",
                            "Time the model's batch spent in prefills and decoding steps.", ["model"], registry=r)
        self.kv_cache = Gauge("workbench_inference_kv_cache_bytes", "The running batch's key/value cache now.",
                              ["model"], registry=r)
        self.model_memory = Gauge("workbench_inference_model_memory_bytes",
                                  "Weights held in the model cache: the base model, and the adapters beside it.",
                                  ["model", "part"], registry=r)

    def name(self, model_key: str, model: str, adapter_path: str | None, adapter: str) -> None:
        with self._lock:
            series = (model_key, adapter_path)
            if series in self._series:
                return
            if len(self._series) >= self.max_series:
                return  # left unnamed: counted as "other" (and nothing kept per pair)
            self._series[series] = (model, adapter if adapter_path is not None else "")
            self._models.setdefault(model_key, model)

    def _labels(self, model_key: str, adapter: str | None) -> tuple[str, str]:
        return self._series.get((model_key, adapter), (OTHER, OTHER))

    def _model(self, model_key: str) -> str:
        return self._models.get(model_key, OTHER)

    def admitted(self, model_key, adapter, queue_wait_s):
        self.wait.labels(*self._labels(model_key, adapter)).observe(queue_wait_s)

    def first_token(self, model_key, adapter, seconds):
        self.ttft.labels(*self._labels(model_key, adapter)).observe(seconds)

    def next_token(self, model_key, adapter, gap_s):
        self.gap.labels(*self._labels(model_key, adapter)).observe(gap_s)

    def finished(self, model_key, adapter, *, tokens, reason):
        labels = self._labels(model_key, adapter)
        self.requests.labels(*labels).inc()
        self.tokens.labels(*labels).inc(tokens)

    def step(self, model_key, *, rows, max_rows, tokens, token_budget, kv_cache_bytes, seconds):
        model = self._model(model_key)
        self.busy.labels(model).inc(seconds)
        self.occupancy.labels(model, "rows").observe(rows / max_rows)
        if token_budget:
            self.occupancy.labels(model, "kv_cache").observe(min(tokens / token_budget, 1.0))
        self.kv_cache.labels(model).set(kv_cache_bytes)

    def exposition(self) -> str:
        if self.memory is not None:
            for model_key, (base, adapters) in self.memory().items():
                model = self._model(model_key)
                self.model_memory.labels(model, "base").set(base)
                self.model_memory.labels(model, "adapters").set(adapters)
        return generate_latest(self.registry).decode()


_observer: EngineObserver | None = None


def observer(memory: Callable[[], dict[str, tuple[int, int]]] | None = None) -> EngineObserver:
    """This process's observer, made on first use; `memory`, when given, is what it reads the model
    cache's sizes with from then on (the runner gives it when it makes the cache)."""
    global _observer
    if _observer is None:
        _observer = EngineObserver(max_series=settings.INFERENCE_METRIC_SERIES_MAX)
    if memory is not None:
        _observer.memory = memory
    return _observer


def publish(hostname: str) -> None:
    """Write this worker's figures to Redis, if it serves; never raises (a figure missing for a
    tick is better than a failed generation or a dead report thread)."""
    if _observer is None or not hostname:
        return
    try:
        redis_store.client().set(KEY + hostname, _observer.exposition(), ex=TTL_S)
    except redis.RedisError as exc:
        logger.warning("could not publish this worker's inference figures: %s", exc)


def forget(hostname: str) -> None:
    """A worker that stops cleanly takes its figures with it at once."""
    try:
        redis_store.client().delete(KEY + hostname)
    except redis.RedisError:
        pass


# --- the web's side ------------------------------------------------------------------------------


def worker_expositions() -> dict[str, str]:
    """Every live inference worker's published text, by hostname. Raises redis.RedisError."""
    client = redis_store.client()
    keys = sorted(client.scan_iter(match=KEY + "*", count=200))
    return {key[len(KEY):]: text for key, text in zip(keys, client.mget(keys) if keys else []) if text}


def families(expositions: dict[str, str]) -> list[Metric]:
    """The workers' metrics as one family per name, each sample labelled with its worker
    (`_created` samples left out: the web does not publish them for its own metrics either). A
    worker whose text does not parse is left out."""
    merged: dict[str, Metric] = {}
    for worker, text in sorted(expositions.items()):
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError as exc:  # one worker's garbled text must not cost the others' figures (or the scrape)
            logger.warning("the inference figures of worker %s do not parse: %s", worker, exc)
            continue
        for family in parsed:
            target = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    target.add_sample(sample.name, {**sample.labels, "worker": worker}, sample.value)
    return list(merged.values())


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The q-quantile from cumulative bucket counts {upper bound: count}, interpolated linearly
    within its bucket as Prometheus' histogram_quantile does; None without observations. Above
    the largest finite bound it answers that bound."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if not total:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if bound == float("inf"):
                return lower
            inside = buckets[bound] - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0)
        lower, below = bound, buckets[bound]
    return lower


def lines(metrics: Iterable[Metric]) -> list[dict]:
    """Per (model, adapter), summed over workers: requests, tokens, TTFT p50/p99, inter-token p50,
    tokens per second (its tokens over the time its model's batch was busy: its share of the
    batch's throughput) and per stream (1 / mean inter-token time), queue wait p50 and mean; and
    per model (repeated on each of its adapters' lines): mean batch occupancy (rows), key/value
    cache and weight bytes now."""
    series: dict[tuple[str, str], dict] = defaultdict(lambda: defaultdict(float))
    buckets: dict[tuple, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    per_model: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    for family in metrics:
        for sample in family.samples:
            labels = sample.labels
            if family.name == "workbench_inference_batch_occupancy_ratio":
                suffix = sample.name[len(family.name):]
                if labels.get("resource") == "rows" and suffix in ("_sum", "_count"):
                    per_model[labels["model"]]["occupancy" + suffix] += sample.value
                continue
            if family.name == "workbench_inference_busy_seconds":
                per_model[labels["model"]]["busy_s"] += sample.value
                continue
            if family.name == "workbench_inference_kv_cache_bytes":
                per_model[labels["model"]]["kv_cache_bytes"] += sample.value
                continue
            if family.name == "workbench_inference_model_memory_bytes":
                per_model[labels["model"]]["memory_bytes"] += sample.value
                continue
            if "adapter" not in labels:
                continue
            key = (labels["model"], labels["adapter"])
            short = family.name.removeprefix("workbench_inference_")
            if sample.name.endswith("_bucket"):
                buckets[(key, short)][float(labels["le"])] += sample.value
            else:
                series[key][short + sample.name[len(family.name):]] += sample.value
    result = []
    for (model, adapter), values in sorted(series.items()):
        gaps, gap_s = values["inter_token_seconds_count"], values["inter_token_seconds_sum"]
        waits = values["queue_wait_seconds_count"]
        shared = per_model.get(model, {})
        occupancy_n = shared.get("occupancy_count", 0)
        result.append({
            "model": model, "adapter": adapter,
            "requests": int(values["requests_total"]), "tokens": int(values["tokens_total"]),
            "ttft_p50_s": histogram_quantile(0.5, buckets[((model, adapter), "ttft_seconds")]),
            "ttft_p99_s": histogram_quantile(0.99, buckets[((model, adapter), "ttft_seconds")]),
            "inter_token_p50_s": histogram_quantile(0.5, buckets[((model, adapter), "inter_token_seconds")]),
            "tokens_per_s": round(values["tokens_total"] / shared["busy_s"], 2) if shared.get("busy_s") else None,
            "stream_tokens_per_s": round(gaps / gap_s, 2) if gaps and gap_s else None,
            "queue_wait_p50_s": histogram_quantile(0.5, buckets[((model, adapter), "queue_wait_seconds")]),
            "queue_wait_mean_s": values["queue_wait_seconds_sum"] / waits if waits else None,
            "occupancy": shared["occupancy_sum"] / occupancy_n if occupancy_n else None,
            "kv_cache_bytes": int(shared.get("kv_cache_bytes", 0)),
            "memory_bytes": int(shared.get("memory_bytes", 0)),
        })
    return result
