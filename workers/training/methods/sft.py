"""Supervised fine-tuning: next-token cross-entropy on the responses (or on every token).

Rows are prompt/response pairs or chat messages (data.py); examples are packed into rows of up to
max_seq_len unless packing is off. A step's loss is the mean over every trained token of the step,
not a mean of per-micro-batch means: each micro-batch's summed loss is divided by the step's token
count, so grad_accum k x batch b gives the gradient of one batch of k*b.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import FORMATS, TrainConfig
from ..data import IGNORE, DataStats, Row, collate, epoch_batches, make_rows, tokenize_rows
from ..fused_loss import linear_cross_entropy
from ..lora import decoder, output_layer
from .spec import Rows

NAME = "sft"
PACKING = True
PERPLEXITY = True
TRAIN_FLOPS_PER_TOKEN = 4    # forward 2N + LoRA backward 2N (see estimate.py)
EVAL_FLOPS_PER_TOKEN = 2
EXAMPLES = ("training", "eval")
EARLY_STOPPING = ("loss", "min")
EVAL_ONLY: tuple[str, ...] = ()
ROWS = Rows(formats=FORMATS)  # prompt and response, or chat messages: nothing more


def head(model: Any, config: TrainConfig) -> list[str]:
    """No module beyond the LoRA weights is trained."""
    return []


def check(config: TrainConfig) -> None:
    """Every format and setting is fine."""


def prepare(rows: Sequence[dict], tokenizer: Any, config: TrainConfig, *,
            evaluation: bool) -> tuple[list[Row], DataStats]:
    """Examples tokenized and (training rows: in a shuffle by the seed) packed into Rows."""
    examples, stats = tokenize_rows(rows, tokenizer, config, what="eval rows" if evaluation else "training rows")
    return make_rows(examples, config, shuffle_seed=None if evaluation else config.seed), stats


def batches(items: list[Row], config: TrainConfig, *, epoch: int | None) -> list[list[Row]]:
    return epoch_batches(items, config, epoch=epoch)


def weight(batch: list[Row]) -> int:
    """Trained tokens."""
    return sum(int(t != IGNORE) for row in batch for t in row.targets)


def tokens(batch: list[Row]) -> int:
    return sum(len(row.input_ids) for row in batch)


def loss(run: Any, batch: list[Row]) -> tuple[Any, tuple[float, int]]:
    summed = summed_loss(run, batch)
    return summed, (summed.item(), weight(batch))


def summarize(outputs: list[tuple[float, int]]) -> dict:
    return {"loss": sum(total for total, _ in outputs) / sum(count for _, count in outputs)}


def summed_loss(run: Any, batch: list[Row]) -> Any:
    """Summed cross-entropy over the trained tokens of one micro-batch (a scalar tensor with grad)."""
    import torch

    tensors = {k: v.to(run.device) for k, v in collate(batch, run.pad_id, packed=run.config.packing).items()}
    targets = tensors.pop("targets")
    trained = targets != IGNORE
    with run.autocast():
        # use_cache=False: with a KV cache transformers ignores the packing in position_ids.
        if run.trained_logits_only:
            # The output layer (hidden x vocabulary) only where a token is trained: with the loss on
            # responses only, most prompt positions never need their logits. run.fused_loss: not even
            # those at once (fused_loss.py).
            hidden = decoder(run.model)(**tensors, use_cache=False).last_hidden_state
            return linear_cross_entropy(run.fused_loss, hidden[trained], output_layer(run.model), targets[trained])
        logits = run.model(**tensors, use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten(),
                                             ignore_index=IGNORE, reduction="sum")
