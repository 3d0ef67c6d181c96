"""A training method defined outside the engine, as a new method module under
workers/training/methods/ would be (see tests/workers/test_training_methods.py): a language-model loss
on every token of prompt and response, one example per row, the loss of a step the mean over its rows."""

from __future__ import annotations

import dataclasses
from typing import Any

from workers.training.config import ConfigError
from workers.training.data import IGNORE, collate, make_rows, tokenize_rows
from workers.training.methods import Rows

NAME = "every_token"
ROWS = Rows(formats=("prompt_response",))
PACKING = False
PERPLEXITY = False
TRAIN_FLOPS_PER_TOKEN = 4
EVAL_FLOPS_PER_TOKEN = 2
EXAMPLES = ("training", "eval")
EARLY_STOPPING = ("loss", "min")
EVAL_ONLY: tuple[str, ...] = ()


def head(model, config) -> list[str]:
    return []


def check(config) -> None:
    if config.format not in ROWS.formats:
        raise ConfigError("format", "every_token takes prompt / response rows.")


def prepare(rows, tokenizer, config, *, evaluation):
    config = dataclasses.replace(config, loss_on="all", packing=False)
    examples, stats = tokenize_rows(rows, tokenizer, config, what="eval rows" if evaluation else "training rows")
    return make_rows(examples, config, shuffle_seed=None), stats


def batches(items, config, *, epoch):
    return [items[start:start + config.batch_size] for start in range(0, len(items), config.batch_size)]


def weight(batch) -> int:
    return len(batch)


def tokens(batch) -> int:
    return sum(len(row.input_ids) for row in batch)


def loss(run: Any, batch):
    import torch

    tensors = {k: v.to(run.device) for k, v in collate(batch, run.pad_id, packed=False).items()}
    targets = tensors.pop("targets")
    with run.autocast():
        logits = run.model(**tensors, use_cache=False).logits
    per_token = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), targets, ignore_index=IGNORE,
                                                  reduction="none")
    per_row = per_token.sum(dim=1) / (targets != IGNORE).sum(dim=1)
    return per_row.sum(), per_row.detach()


def summarize(outputs) -> dict:
    import torch

    losses = torch.cat(outputs)
    return {"loss": losses.mean().item(), "worst_row_loss": losses.max().item()}
