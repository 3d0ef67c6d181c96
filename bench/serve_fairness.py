"""One project floods the queue, another asks once: how long the other waits for its first token.

Project A submits FLOOD chat requests at once, then project B one, to a batcher of BATCH rows
(`workers.inference.Batcher`, in process, demo model fp32 CPU, NEW_TOKENS greedy tokens each), so
B's request waits behind A's. Ours: each request tagged with its project, admitted round-robin
across projects when rows free up. Baseline: the same requests untagged, first come first served
(the batcher before fair admission). Runs alternate (baseline, ours, ours, baseline). Reported:
B's time to first token (median of its runs) and the time until every request ended (fairness
must not cost throughput). Target: B's wait <= half the baseline's; the whole within 10%.
"""

from __future__ import annotations

import os
import statistics
import time

from bench.report import publish, result

FLOOD = int(os.environ.get("BENCH_FAIR_FLOOD", "20"))
BATCH = int(os.environ.get("BENCH_FAIR_BATCH", "4"))
NEW_TOKENS = 16
ROUNDS = 2  # each round: baseline, ours, ours, baseline


def run() -> list[dict]:
    from bench.generate_batched import QUESTIONS, demo_model_dir
    from workers.inference import Batcher, ModelCache, SamplingParams

    directory = demo_model_dir()
    cache = ModelCache(10**10)
    cache.get("demo", directory, device="cpu", dtype="fp32")
    params = SamplingParams(max_new_tokens=NEW_TOKENS)

    def once(fair: bool) -> tuple[float, float]:
        """(B's time to first token, time until every request ended), seconds."""
        first: dict[str, float] = {}

        def b_first_token() -> bool:  # asked after each of B's tokens: the first call is its first token
            first.setdefault("b", time.perf_counter())
            return False

        with Batcher(cache, max_batch_size=BATCH, max_wait_ms=2) as batcher:
            started = time.perf_counter()
            futures = [batcher.submit("demo", directory, None, params, device="cpu", dtype="fp32",
                                      messages=[{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                                      tag="project-a" if fair else "") for i in range(FLOOD)]
            b_sent = time.perf_counter()
            futures.append(batcher.submit("demo", directory, None, params, device="cpu", dtype="fp32",
                                          messages=[{"role": "user", "content": "Why is the sky blue?"}],
                                          tag="project-b" if fair else "",
                                          is_cancelled=b_first_token))
            for future in futures:
                future.result(timeout=900)
            ended = time.perf_counter()
        return first["b"] - b_sent, ended - started

    once(True)  # warm-up
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(ROUNDS):
        for fair in (False, True, True, False):
            runs[fair].append(once(fair))
    ours_ttft = statistics.median(r[0] for r in runs[True])
    base_ttft = statistics.median(r[0] for r in runs[False])
    ours_total = statistics.median(r[1] for r in runs[True])
    base_total = statistics.median(r[1] for r in runs[False])
    extra = {"flood": FLOOD, "batch_rows": BATCH, "new_tokens": NEW_TOKENS,
             "runs_s": {"ours": runs[True], "baseline": runs[False]}}
    return publish([
        result(name="serve_fairness_other_project_ttft", metric="B's time to first token behind A's flood",
               unit="s", value=ours_ttft, baseline_what="first come, first served", baseline_value=base_ttft,
               target="<= 0.5x", passed=ours_ttft <= 0.5 * base_ttft, extra=extra),
        result(name="serve_fairness_total", metric="time until all requests ended", unit="s", value=ours_total,
               baseline_what="first come, first served", baseline_value=base_total, target="<= 1.1x",
               passed=ours_total <= 1.1 * base_total, extra=extra),
    ])


if __name__ == "__main__":
    run()
