"""Staggered streaming requests on the demo model, in process: what continuous batching is for.

CLIENTS chat requests (the first of generate_batched's questions), NEW_TOKENS new tokens each,
greedy, arrive GAP_S apart, each streaming its text — people opening the playground one after
another while the others still read their answers. Per request: time to first token (from the
submit to its first streamed text) and the whole answer; over the run: generated tokens / (last
answer - first submit).

Ours: `workers.inference.Batcher` (the inference worker's batcher: requests join the running
batch at the next decoding step). Run the same script with PYTHONPATH pointing at an older
checkout to measure that engine (the static micro-batcher measured "before" in bench/README.md).
Beside it, same run: transformers' own continuous batching (`model.init_continuous_batching`,
ContinuousBatchingManager with its paged cache, streaming requests added at the same times),
the alternative the issue asks to measure; BENCH_CB=0 skips it. Sides alternate (ours, theirs,
theirs, ours) so that load from other work falls on both; outputs are compared token by token
with one-at-a-time `generate_batch`. Reported (the issue's serving targets are for the HTTP
benchmark serve_concurrent).
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from bench.report import publish, result

CLIENTS = int(os.environ.get("BENCH_CB_CLIENTS", "8"))
GAP_S = float(os.environ.get("BENCH_CB_GAP_S", "0.25"))
NEW_TOKENS = 32


def run() -> list[dict]:
    import torch

    from bench.generate_batched import QUESTIONS, demo_model_dir
    from workers.inference import Batcher, ModelCache, SamplingParams, generate_batch, render_prompt
    from workers.inference.generate import eos_token_ids
    from workers.inference.prompts import encode_prompt

    directory = demo_model_dir()
    cache = ModelCache(10**10)
    model, tokenizer = cache.get("demo", directory, device="cpu", dtype="fp32")
    prompts = [render_prompt(tokenizer, messages=[{"role": "user", "content": q}]) for q in QUESTIONS[:CLIENTS]]
    params = SamplingParams(max_new_tokens=NEW_TOKENS)
    reference = [generate_batch(model, tokenizer, [p], params)[0].token_ids for p in prompts]

    def ours() -> dict:
        first, done, tokens = {}, {}, {}
        with Batcher(cache, max_batch_size=32, max_wait_ms=2) as batcher:
            submitted, futures = {}, {}
            for i, prompt in enumerate(prompts):
                time.sleep(max(0.0, (submitted[0] + i * GAP_S if submitted else 0) - time.perf_counter()))
                submitted[i] = time.perf_counter()
                futures[i] = batcher.submit("demo", directory, prompt, params, device="cpu", dtype="fp32",
                                            on_token=lambda delta, i=i: first.setdefault(i, time.perf_counter()))
                futures[i].add_done_callback(lambda _, i=i: done.setdefault(i, time.perf_counter()))
            for i, future in futures.items():
                tokens[i] = future.result(timeout=900).token_ids
        return _summary(submitted, first, done, tokens, reference)

    def theirs() -> dict:
        from transformers import GenerationConfig

        config = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=sorted(
            eos_token_ids(model, tokenizer)), pad_token_id=tokenizer.pad_token_id)
        manager = model.init_continuous_batching(generation_config=config)
        manager.start()
        # Its start-up (sizing and allocating the paged cache, first forward) is not counted:
        # one request runs to its end before the clock starts, as our side's model is warm too.
        warm_id = manager.add_request(encode_prompt(tokenizer, prompts[0]), request_id="warm", max_new_tokens=2)
        while not (warm := manager.get_result(request_id=warm_id, timeout=600)) or not warm.is_finished():
            pass
        first, done, tokens, names = {}, {}, {}, {}

        def read() -> None:
            for output in manager:
                i = names.get(output.request_id)
                if i is None:
                    continue
                if output.generated_tokens:
                    first.setdefault(i, time.perf_counter())
                if output.is_finished():
                    done[i], tokens[i] = time.perf_counter(), list(output.generated_tokens)
                    if len(done) == len(prompts):
                        return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        submitted = {}
        for i, prompt in enumerate(prompts):
            time.sleep(max(0.0, (submitted[0] + i * GAP_S if submitted else 0) - time.perf_counter()))
            submitted[i] = time.perf_counter()
            names[manager.add_request(encode_prompt(tokenizer, prompt), request_id=f"r{i}",
                                      max_new_tokens=NEW_TOKENS, streaming=True)] = i
        reader.join(timeout=900)
        manager.stop(block=True, timeout=30)
        manager.destroy()
        return _summary(submitted, first, done, tokens, reference)

    generate_batch(model, tokenizer, prompts[:2], SamplingParams(max_new_tokens=4))  # warm
    with_cb = os.environ.get("BENCH_CB", "1") != "0"
    order = ["ours", "theirs", "theirs", "ours"] if with_cb else ["ours", "ours"]
    runs: dict[str, list[dict]] = {"ours": [], "theirs": []}
    for side in order:
        runs[side].append(ours() if side == "ours" else theirs())
        print(f"  {side}: {runs[side][-1]}", flush=True)

    def mean(side: str, key: str) -> float | None:
        values = [r[key] for r in runs[side]]
        return statistics.fmean(values) if values else None

    print(f"continuous_batching: {CLIENTS} streaming chat requests {GAP_S:g} s apart, {NEW_TOKENS} new tokens, "
          f"greedy, fp32 on {torch.get_num_threads()} CPU threads; mean of {len(runs['ours'])} runs a side")
    print(f"  {'side':<40} {'TTFT p50':>9} {'TTFT max':>9} {'answer p50':>10} {'tok/s':>7} {'identical':>9}")
    for side, label in (("ours", "workers.inference.Batcher"), ("theirs", "transformers ContinuousBatchingManager")):
        if runs[side]:
            print(f"  {label:<40} {mean(side, 'ttft_p50_s'):>9.2f} {mean(side, 'ttft_max_s'):>9.2f} "
                  f"{mean(side, 'answer_p50_s'):>10.2f} {mean(side, 'tokens_per_s'):>7.1f} "
                  f"{min(r['identical'] for r in runs[side]):>6}/{CLIENTS}")
    extra = {"clients": CLIENTS, "gap_s": GAP_S, "new_tokens": NEW_TOKENS, "runs": runs,
             "load_average": os.getloadavg(), "torch_threads": torch.get_num_threads()}
    baseline = mean("theirs", "ttft_max_s")
    return publish([
        result(name="continuous_batching_ttft_max", metric=f"largest time to first token, {CLIENTS} staggered "
               "streaming requests", unit="s", value=mean("ours", "ttft_max_s"),
               baseline_what="transformers ContinuousBatchingManager, same requests" if baseline else "not run",
               baseline_value=baseline or 0.0, target="reported", passed=True, extra=extra),
        result(name="continuous_batching_tokens_per_s", metric="generated tokens / (last answer - first submit)",
               unit="tok/s", value=mean("ours", "tokens_per_s"),
               baseline_what="transformers ContinuousBatchingManager, same requests" if baseline else "not run",
               baseline_value=mean("theirs", "tokens_per_s") or 0.0, target="reported", passed=True),
    ])


def _summary(submitted: dict, first: dict, done: dict, tokens: dict, reference: list[list[int]]) -> dict:
    ttft = [first[i] - submitted[i] for i in submitted]
    answers = [done[i] - submitted[i] for i in submitted]
    generated = sum(len(t) for t in tokens.values())
    return {"ttft_p50_s": round(statistics.median(ttft), 3), "ttft_max_s": round(max(ttft), 3),
            "answer_p50_s": round(statistics.median(answers), 3),
            "tokens_per_s": round(generated / (max(done.values()) - min(submitted.values())), 2),
            "identical": sum(tokens.get(i) == ref for i, ref in enumerate(reference)),
            "ttft_s": [round(t, 3) for t in ttft]}


if __name__ == "__main__":
    run()
