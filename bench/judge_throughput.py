"""Judging comparison cells with the demo model as a pointwise judge (issue #20's
`judge_throughput`): cells/s with the judge run's concurrency (a local judge's: the batcher's row
limit, settings.INFERENCE_MAX_BATCH_SIZE calls in flight, which the engine's continuous batching runs
together: apps.evaluation.runner.items_in_flight) vs one request at a time, same cells, same run.

In process: the engine's own `workers.judging.run_judge` over a shared `workers.inference.Batcher`
(the one a judge run uses on the inference worker, demo model fp32 on CPU, greedy, answers of at most
MAX_TOKENS tokens), with a 1-5 rubric of one criterion. CELLS cells (BENCH_JUDGE_CELLS; the issue
names 256: ~10 minutes one at a time on 2 cores, so the default is 64), each a question of
bench.generate_batched with an answer. Runs alternate (one-at-a-time, concurrent, concurrent,
one-at-a-time); medians. The job and the worker around the engine (a Celery task, the verdicts
written per item) are not in the timing. Also reported: how many answers the judge's schema could
read (a 135M model is a poor judge; the bench measures speed). Target: ratio >= 4.
"""

from __future__ import annotations

import os
import statistics
import time

from bench.report import publish, result

CELLS = int(os.environ.get("BENCH_JUDGE_CELLS", "64"))
CONCURRENCY = int(os.environ.get("BENCH_JUDGE_CONCURRENCY", "32"))  # a local judge's: INFERENCE_MAX_BATCH_SIZE's default
MAX_TOKENS = 48
ROUNDS = 1  # each round: one at a time, concurrent, concurrent, one at a time


def run() -> list[dict]:
    from bench.generate_batched import QUESTIONS, demo_model_dir
    from workers.inference import Batcher, ModelCache, SamplingParams
    from workers.judging.rubric import check_rubric
    from workers.judging.run import PointItem, Reply, run_judge

    directory = demo_model_dir()
    cache = ModelCache(10**10)
    cache.get("demo", directory, device="cpu", dtype="fp32")
    params = SamplingParams(max_new_tokens=MAX_TOKENS)
    rubric = check_rubric({"kind": "pointwise", "criteria": [
        {"name": "helpful", "description": "answers the question correctly and briefly", "scale": "1-5"}]})
    answers = ["Paris.", "Red, yellow and blue.", "Eight.", "56.", "Shakespeare.", "100 degrees Celsius at sea level.",
               "Glad.", "Plants turning light into sugar.", "Rayleigh scattering of sunlight."]
    items = [PointItem(key=str(i), prompt=QUESTIONS[i % len(QUESTIONS)], response=answers[i % len(answers)])
             for i in range(CELLS)]

    def once(concurrency: int) -> tuple[float, int]:
        """(seconds for every cell, answers the schema could read)."""
        readable = []
        with Batcher(cache, max_batch_size=32, max_wait_ms=2) as batcher:
            def call(messages: list[dict]) -> Reply:
                out = batcher.submit("demo", directory, None, params, device="cpu", dtype="fp32",
                                     messages=messages).result(timeout=900)
                return Reply(text=out.text, prompt_tokens=out.prompt_tokens, completion_tokens=out.completion_tokens)

            def on_item(verdicts) -> bool:
                readable.extend(v.answer is not None for v in verdicts)
                return False

            started = time.perf_counter()
            run_judge(rubric, items, call=call, on_item=on_item, concurrency=concurrency)
            return time.perf_counter() - started, sum(readable)

    once(CONCURRENCY)  # warm-up
    runs: dict[int, list[tuple[float, int]]] = {1: [], CONCURRENCY: []}
    for _ in range(ROUNDS):
        for concurrency in (1, CONCURRENCY, CONCURRENCY, 1):
            runs[concurrency].append(once(concurrency))
            print(f"  concurrency {concurrency}: {runs[concurrency][-1][0]:.1f} s", flush=True)
    ours = statistics.median(r[0] for r in runs[CONCURRENCY])
    base = statistics.median(r[0] for r in runs[1])
    extra = {"cells": CELLS, "concurrency": CONCURRENCY, "max_tokens": MAX_TOKENS,
             "readable_answers": {"concurrent": runs[CONCURRENCY][0][1], "one_at_a_time": runs[1][0][1]},
             "runs_s": {"concurrent": [r[0] for r in runs[CONCURRENCY]], "one_at_a_time": [r[0] for r in runs[1]]}}
    return publish([result(
        name="judge_throughput", metric=f"cells judged per second, demo model as a pointwise judge, {CELLS} cells",
        unit="cells/s", value=CELLS / ours, baseline_what="the same cells one request at a time",
        baseline_value=CELLS / base, target=">= 4x", passed=base / ours >= 4, extra=extra)])


if __name__ == "__main__":
    run()
