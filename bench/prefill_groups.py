"""Prefill in groups of similar length (#18, TTFT under many clients): 16 chat prompts of mixed
lengths admitted at once into an empty running batch of the demo model, as they reach the
inference worker when 16 clients start together.

Ours: `DecodeBatch.admit` as it runs now — the prompts prefilled in groups of similar length,
shortest first (`prefill_groups`). Baseline, same run: the same admission as one left-padded
group (`group_prefills=False`, what the engine did before), where every prompt is computed to the
longest one's width. Rounds alternate baseline, ours, ours, baseline (ROUNDS of each side).

Two prompt sets: `serve_concurrent`'s (a quarter one-line questions, the rest 2, 4 or 6 copies
of one paragraph of notes before the question: prompts of a length share all but their last
sentence, so prefix reuse also helps within a group) and a set of distinct prompts of the same
lengths (no prefix longer than the chat template's in common). Greedy, NEW_TOKENS new tokens,
fp32 on the machine's CPU threads. Time to first token counts from the admit call (each row's
first token is chosen right after its group's forward); `end` is the whole generation. The
outputs of both sides are compared token for token.

The demo GGUF is converted once into $WORKBENCH_BENCH_CACHE (as for generate_batched).
"""

from __future__ import annotations

import os
import statistics
import time

from bench.generate_batched import QUESTIONS, demo_model_dir
from bench.report import publish, result
from bench.serve_concurrent import prompts as serve_concurrent_prompts

CLIENTS = 16
NEW_TOKENS = 16
ROUNDS = 2


def distinct_prompts(count: int) -> list[str]:
    """Lengths as serve_concurrent's (a quarter short, the rest longer and longer), but no two
    prompts share more than their chat template: each one's context is other questions, in its
    own order."""
    out = []
    for i in range(count):
        context = " ".join(QUESTIONS[(i * 7 + k) % len(QUESTIONS)] for k in range((i % 4) * 9))
        question = f"Answer the last one in two sentences: {QUESTIONS[i % len(QUESTIONS)]}"
        out.append(f"Here are some questions I was asked: {context} {question}" if context else question)
    return out


def run() -> list[dict]:
    import torch

    from workers.inference.cache import load_for_inference
    from workers.inference.decode import DecodeBatch, Sequence, prefill_groups
    from workers.inference.params import SamplingParams
    from workers.inference.prompts import render_prompt

    path = demo_model_dir()
    model, tokenizer = load_for_inference(path, roots=[path.parent])

    def encode(texts: list[str]) -> list[list[int]]:
        return [tokenizer(render_prompt(tokenizer, messages=[{"role": "user", "content": t}]),
                          add_special_tokens=False)["input_ids"] for t in texts]

    def admit_all(ids: list[list[int]], grouped: bool) -> dict:
        batch = DecodeBatch(model, tokenizer, max_rows=CLIENTS, group_prefills=grouped)
        started = time.perf_counter()
        sequences = [Sequence(row, SamplingParams(max_new_tokens=NEW_TOKENS), started=started) for row in ids]
        batch.admit(sequences)
        while batch.rows:
            batch.step()
        ttft = sorted(s.first_token_at for s in sequences)
        return {"ttft_p50": statistics.median(ttft), "ttft_max": ttft[-1], "end": time.perf_counter() - started,
                "prefills": batch.prefills, "tokens": [s.generated for s in sequences]}

    sets = {"shared": encode(serve_concurrent_prompts(CLIENTS)), "distinct": encode(distinct_prompts(CLIENTS))}
    for ids in sets.values():  # warm the model's kernels for these shapes
        admit_all(ids, True)
    rows, results = [], []
    for name, ids in sets.items():
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for _ in range(ROUNDS):
            for grouped in (False, True, True, False):
                runs[grouped].append(admit_all(ids, grouped))
        side = {grouped: {key: statistics.mean(r[key] for r in measured)
                          for key in ("ttft_p50", "ttft_max", "end")} for grouped, measured in runs.items()}
        identical = sum(a == b for a, b in zip(runs[False][0]["tokens"], runs[True][0]["tokens"]))
        lengths = [len(row) for row in ids]
        padded = len(ids) * max(lengths)
        grouped_columns = sum(len(g) * max(lengths[i] for i in g) for g in prefill_groups(lengths))
        rows.append((name, lengths, padded, grouped_columns, side, runs[True][0]["prefills"], identical))
        ratio = side[False]["ttft_max"] / side[True]["ttft_max"]
        results.append(result(
            name=f"prefill_groups_{name}", metric=f"largest TTFT, {CLIENTS} prompts admitted at once", unit="s",
            value=side[True]["ttft_max"], baseline_what="one left-padded prefill", baseline_value=side[False]["ttft_max"],
            target="faster than the baseline, outputs identical", passed=ratio > 1 and identical == len(ids),
            ratio=ratio,
            extra={"ttft_p50_s": round(side[True]["ttft_p50"], 3), "baseline_ttft_p50_s": round(side[False]["ttft_p50"], 3),
                   "end_s": round(side[True]["end"], 3), "baseline_end_s": round(side[False]["end"], 3),
                   "prompt_tokens": sum(lengths), "columns_padded_as_one": padded, "columns_grouped": grouped_columns,
                   "groups": runs[True][0]["prefills"], "identical": identical, "new_tokens": NEW_TOKENS,
                   "torch_threads": torch.get_num_threads(), "load_average": os.getloadavg()}))
    print(f"prefill_groups: {CLIENTS} chat prompts admitted at once, greedy x {NEW_TOKENS} new tokens, demo model "
          f"fp32 on {torch.get_num_threads()} CPU threads, mean of {ROUNDS * 2} runs a side")
    print("  prompts: shared = serve_concurrent's (a length's prompts share all but their question), "
          "distinct = the same lengths, nothing shared past the chat template")
    print(f"  {'prompts':<28} {'side':<22} {'columns':>8} {'TTFT p50':>9} {'TTFT max':>9} {'end':>7} {'ratio':>6} "
          f"{'identical':>9}")
    for name, lengths, padded, grouped_columns, side, groups, identical in rows:
        for grouped, label, columns in ((False, "one padded prefill", padded), (True, f"{groups} length groups", grouped_columns)):
            s = side[grouped]
            ratio = side[False]["ttft_max"] / s["ttft_max"]
            print(f"  {name:<28} {label:<22} {columns:>8} {s['ttft_p50']:>8.2f}s {s['ttft_max']:>8.2f}s "
                  f"{s['end']:>6.2f}s {ratio:>6.2f} {identical if grouped else '-':>6}/{len(lengths)}")
        print(f"  {'':<28} prompt tokens {sum(lengths)} ({min(lengths)}-{max(lengths)} a prompt)")
    return publish(results)


if __name__ == "__main__":
    run()
