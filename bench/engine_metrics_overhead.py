"""What the inference engine's metrics cost (#18 item 8, Observability): tokens/s of the batcher
with the inference worker's observer against the batcher observing nothing, same run.

Ours: `workers.inference.Batcher` with `apps.monitoring.engine_metrics.EngineObserver` (Prometheus
histograms of queue wait, TTFT and every token's gap, counters, occupancy and key/value cache
gauges, per model and adapter, in a registry of its own), and after every finished request its
text exposition written to Redis with a TTL — what an inference worker does (engine_metrics.publish,
called after each generation; here on the request's own thread, as the worker's task does).
Baseline: the same Batcher with the plain `Observer` (does nothing) and no publishing.
CLIENTS requests submitted together (chat prompts of serve_concurrent, greedy, NEW_TOKENS new
tokens) on the demo model fp32 CPU, the model loaded and warmed first. Rounds alternate baseline,
ours, ours, baseline (ROUNDS of each); mean tokens/s per side; the outputs of both compared.

Redis at BENCH_LIVE_REDIS_URL (db 5 by default); the bench's key is removed at the end. Target:
ratio ours / baseline >= 0.98 (the metrics must not cost the engine more than 2%). About 2 minutes.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from bench.generate_batched import demo_model_dir
from bench.report import publish, result
from bench.serve_concurrent import prompts

CLIENTS = 16
NEW_TOKENS = 64
ROUNDS = int(os.environ.get("BENCH_METRICS_ROUNDS", "2"))
REDIS_URL = os.environ.get("BENCH_LIVE_REDIS_URL", "redis://127.0.0.1:6379/5")
KEY = "bench:engine-metrics-overhead"
TARGET = 0.98


def run() -> list[dict]:
    import redis
    import torch

    from apps.monitoring.engine_metrics import TTL_S, EngineObserver
    from workers.inference import Batcher, ModelCache, Observer, SamplingParams

    directory = demo_model_dir()
    cache = ModelCache(10**10)
    cache.get("demo", directory, device="cpu", dtype="fp32")
    store = redis.Redis.from_url(REDIS_URL)
    texts = prompts(CLIENTS)
    params = SamplingParams(max_new_tokens=NEW_TOKENS)

    def one_round(observed: bool) -> tuple[float, list[list[int]], int]:
        observer = EngineObserver(cache.memory, max_series=64) if observed else Observer()
        if observed:
            observer.name("demo", "Demo", None, "Demo")
        published = []
        with Batcher(cache, max_batch_size=32, observer=observer) as batcher:
            started = time.perf_counter()
            futures = [batcher.submit("demo", directory, messages=[{"role": "user", "content": t}], params=params,
                                      on_token=lambda delta: None) for t in texts]

            def finish(future) -> None:
                future.result()
                if observed:  # the worker's publish after each generation
                    store.set(KEY, observer.exposition(), ex=TTL_S)
                    published.append(1)

            threads = [threading.Thread(target=finish, args=(f,)) for f in futures]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - started
        results = [f.result() for f in futures]
        return sum(r.completion_tokens for r in results) / seconds, [r.token_ids for r in results], len(published)

    one_round(False)  # warm the kernels for these shapes
    rates: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, list[list[int]]] = {}
    publishes = 0
    for _ in range(ROUNDS):
        for observed in (False, True, True, False):
            rate, tokens, count = one_round(observed)
            rates[observed].append(rate)
            outputs.setdefault(observed, tokens)
            publishes += count
    store.delete(KEY)
    ours, base = statistics.mean(rates[True]), statistics.mean(rates[False])
    ratio = ours / base
    identical = sum(a == b for a, b in zip(outputs[True], outputs[False]))
    print(f"engine_metrics_overhead: {CLIENTS} chat requests x {NEW_TOKENS} new tokens, greedy, demo model fp32 on "
          f"{torch.get_num_threads()} CPU threads, {ROUNDS * 2} rounds a side (ABBA)")
    print(f"  {'side':<44} {'tok/s (mean)':>12} {'rounds':>30}")
    for observed, label in ((False, "plain Observer, nothing published"),
                            (True, "EngineObserver + exposition to Redis a request")):
        print(f"  {label:<44} {statistics.mean(rates[observed]):>12.1f} "
              f"{' / '.join(f'{r:.1f}' for r in rates[observed]):>30}")
    print(f"  ratio {ratio:.3f}; outputs identical {identical}/{CLIENTS}; expositions published {publishes}")
    return publish([result(
        name="engine_metrics_overhead", metric=f"tokens/s, {CLIENTS} requests, with the engine's metrics", unit="tok/s",
        value=ours, baseline_what="the same batcher observing nothing", baseline_value=base,
        target=f"ratio >= {TARGET:g}", passed=ratio >= TARGET and identical == CLIENTS,
        extra={"rounds": {"ours": rates[True], "baseline": rates[False]}, "identical": identical,
               "expositions_published": publishes, "new_tokens": NEW_TOKENS,
               "torch_threads": torch.get_num_threads(), "load_average": os.getloadavg()})])


if __name__ == "__main__":
    run()
