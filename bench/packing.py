"""How densely the engine packs training examples into rows (#21 item 6): no training, only the rows.

On train_lora's examples (its TRAIN_ROWS synthetic instruction rows tokenized by the engine with the
demo model's tokenizer and chat template, rows of up to MAX_SEQ_LEN tokens): the engine's packing
(`workers.training.data.make_rows`, best-fit decreasing) against the packing it replaced, in the
same run: examples taken in the seeded shuffle's order and a row closed as soon as the next example
does not fit. For each: rows, tokens per row, and the padding a training run carries — each
micro-batch is padded to its longest row, with train_lora's rule for the rows per batch (about
BATCH examples a step) — over every epoch-shuffled batch of 5 epochs. Fewer padded positions for the
same tokens is time saved in every step (time follows positions: bench/README.md, train_lora).
Target (the issue): padding from 17% to about 4%.
"""

from __future__ import annotations

import dataclasses

from bench.train_lora import BATCH, SEED, datasets, demo_model_dir, tokenized, train_config

EPOCHS = 5


def close_when_full(examples, config, *, shuffle_seed):
    """The packing replaced: in shuffled order, a row closed when the next example does not fit."""
    import random

    from workers.training.data import Row

    order = list(range(len(examples)))
    random.Random(shuffle_seed).shuffle(order)
    rows, current = [], Row([], [], [])
    for index in order:
        example = examples[index]
        if current.input_ids and len(current.input_ids) + len(example.input_ids) > config.max_seq_len:
            rows.append(current)
            current = Row([], [], [])
        current.input_ids += example.input_ids
        current.targets += example.labels[1:] + [-100]
        current.positions += list(range(len(example.input_ids)))
    return rows + ([current] if current.input_ids else [])


def measure(pack, examples, config) -> dict:
    from workers.training.data import epoch_batches

    rows = pack(examples, config, shuffle_seed=SEED)
    per_batch = max(1, round(BATCH * len(rows) / len(examples)))
    batched = dataclasses.replace(config, batch_size=per_batch)
    tokens = positions = 0
    for epoch in range(EPOCHS):
        for batch in epoch_batches(rows, batched, epoch=epoch):
            tokens += sum(len(row.input_ids) for row in batch)
            positions += len(batch) * max(len(row.input_ids) for row in batch)
    return {"rows": len(rows), "per_batch": per_batch, "tokens_per_row": sum(len(r.input_ids) for r in rows) / len(rows),
            "padding": 1 - tokens / positions, "positions": positions, "tokens": tokens}


def run() -> list[dict]:
    from transformers import AutoTokenizer

    from bench.report import publish, result
    from workers.training.data import make_rows

    train_rows, _ = datasets()
    examples = tokenized(AutoTokenizer.from_pretrained(demo_model_dir()), train_rows)
    config = train_config("fp32")
    before, after = measure(close_when_full, examples, config), measure(make_rows, examples, config)
    assert before["tokens"] == after["tokens"]  # the same tokens on both sides, only arranged differently
    print(f"\npacking: {len(examples)} examples, {sum(len(e.input_ids) for e in examples):,} tokens, rows of up to "
          f"{config.max_seq_len}, {EPOCHS} epochs of shuffled batches")
    print(f"  {'packing':<44} {'rows':>5} {'a batch':>7} {'tok/row':>7} {'padding':>8} {'positions':>10}")
    for name, m in (("close when full, shuffled order (baseline)", before), ("best-fit decreasing (ours)", after)):
        print(f"  {name:<44} {m['rows']:>5} {m['per_batch']:>7} {m['tokens_per_row']:>7.1f} {m['padding']:>8.1%} "
              f"{m['positions']:>10,}")
    return publish([result(
        name="packing_padding", metric="share of padded positions over 5 epochs' batches", unit="share",
        value=after["padding"], baseline_what="a row closed when the next example does not fit",
        baseline_value=before["padding"], target="about 0.04 (from 0.17)", passed=after["padding"] <= 0.05,
        extra={"positions_ratio": after["positions"] / before["positions"], "ours_rows": after, "baseline_rows": before})])


if __name__ == "__main__":
    raise SystemExit(0 if all(r["passed"] for r in run()) else 1)
