"""Serving precisions on this CPU: the demo model (SmolLM2-135M-Instruct) loaded in fp32, bf16 and
int8 (workers.inference.precision.load_in_precision, as the inference worker loads it): decode
tokens/s on the measurement's fixed prompts (4 short prompts in one batch, 24 new tokens, greedy),
perplexity on the fixed reference text, greedy tokens identical to fp32's, and what `auto` picks.

Baseline, same run: fp32. Speed rounds alternate (fp32, bf16, int8, int8, bf16, fp32) and
the median is kept, so a neighbour's load on the shared cores falls on every precision alike.
Ratios are precision / fp32.
"""

from __future__ import annotations

import statistics

ROUNDS = 1


def run() -> list[dict]:
    from bench.generate_batched import demo_model_dir
    from bench.report import publish, result
    from workers.inference import SamplingParams, generate_batch
    from workers.inference.precision import (
        PRECISIONS,
        choose_precision,
        decode_tokens_per_s,
        load_in_precision,
        perplexity,
        precision_unsupported,
    )
    from workers.inference.reference_texts import DECODE_PROMPTS

    source = demo_model_dir()
    precisions = [p for p in PRECISIONS if precision_unsupported(p, "cpu") is None]
    loaded = {p: load_in_precision(source, p, device="cpu") for p in precisions}
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0)
    tokens = {p: [r.token_ids for r in generate_batch(*loaded[p], list(DECODE_PROMPTS), greedy)] for p in precisions}
    speeds: dict[str, list[float]] = {p: [] for p in precisions}
    for _ in range(ROUNDS):
        for p in precisions + precisions[::-1]:
            speeds[p].append(decode_tokens_per_s(*loaded[p]))
    rows = {}
    for p in precisions:
        identical = sum(a == b for a, b in zip(tokens[p], tokens["fp32"]))
        rows[p] = {"precision": p, "tokens_per_s": statistics.median(speeds[p]), "perplexity": perplexity(*loaded[p]),
                   "identical": identical, "samples": [round(s, 2) for s in speeds[p]]}
    chosen = choose_precision(list(rows.values()))
    fp32 = rows["fp32"]

    print(f"\n{'precision':<10} {'tokens/s':>9} {'speed':>6} {'perplexity':>10} {'Δ ppl':>8} {'identical':>9}")
    for p, row in rows.items():
        print(f"{p:<10} {row['tokens_per_s']:>9.1f} {row['tokens_per_s'] / fp32['tokens_per_s']:>5.2f}x "
              f"{row['perplexity']:>10.3f} {100 * (row['perplexity'] / fp32['perplexity'] - 1):>7.2f}% "
              f"{row['identical']:>4}/{len(DECODE_PROMPTS)}")
    skipped = [p for p in PRECISIONS if p not in rows]
    print(f"auto picks {chosen}" + (f"; not measured here: {', '.join(skipped)}" if skipped else "") + "\n")
    results = []
    for p, row in rows.items():
        if p == "fp32":
            continue
        results.append(result(
            name=f"serve_precision_{p}", metric="decode tokens/s of the demo model (4 prompts x 24 tokens, greedy)",
            unit="tok/s", value=row["tokens_per_s"], baseline_what="fp32, same prompts, rounds alternating",
            baseline_value=fp32["tokens_per_s"], target="reported", passed=True,
            extra={"perplexity": round(row["perplexity"], 4), "baseline_perplexity": round(fp32["perplexity"], 4),
                   "perplexity_increase_pct": round(100 * (row["perplexity"] / fp32["perplexity"] - 1), 2),
                   "identical_to_fp32": row["identical"], "prompts": len(DECODE_PROMPTS), "samples": row["samples"],
                   "baseline_samples": fp32["samples"], "auto_picks": chosen}))
    return publish(results)


if __name__ == "__main__":
    run()
