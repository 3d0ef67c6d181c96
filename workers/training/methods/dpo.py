"""Preference tuning (DPO) with LoRA: rows, pairs, loss and reward metrics.

A preference row is {prompt, response (the chosen answer), rejected}, as annotation and
comparison exports write them. Each becomes a pair of examples that share the prompt and are
trained on the response tokens only. The reference model is the base itself: the same network
with the LoRA adapter disabled, so no second copy of the weights is held.

    loss = -log σ(β · ((log π(chosen) - log π_ref(chosen)) - (log π(rejected) - log π_ref(rejected))))

where log π(·) sums the token log-probabilities of the response. With a fresh adapter (its B
matrices are zero) the policy equals the reference and the loss is exactly log 2.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError, TrainConfig
from ..data import IGNORE, DataStats, Example, Row, TrainingDataError, collate, make_rows, tokenize_rows
from .spec import Rows

NAME = "dpo"
# The rejected answer is what makes a row a preference pair; annotation and comparison exports write it.
ROWS = Rows(formats=("prompt_response",), extra=("rejected",), sequences=2,
            needs="a prompt, a response (the chosen one) and a “rejected” response, which preference tuning needs")
PACKING = False               # each answer is its own sequence
PERPLEXITY = False            # a DPO loss is no language-modelling loss
# Both sequences forward and back through the policy (4N) and forward once more through the
# reference, the base with the adapter off (2N); evaluation: policy and reference forward.
TRAIN_FLOPS_PER_TOKEN = 6
EVAL_FLOPS_PER_TOKEN = 4
EXAMPLES = ("training pairs", "eval pairs")
EARLY_STOPPING = ("loss", "min")
EVAL_ONLY: tuple[str, ...] = ()
MAX_REASONS = 5


@dataclass
class Pair:
    chosen: Row
    rejected: Row


def head(model: Any, config: TrainConfig) -> list[str]:
    """No module beyond the LoRA weights is trained."""
    return []


def check(config: TrainConfig) -> None:
    if config.format not in ROWS.formats:
        raise ConfigError("format", "preference tuning (dpo) takes prompt / response rows with a rejected "
                                    "response; use the prompt_response format.")
    if config.fused_loss in ("liger", "chunked"):
        raise ConfigError("fused_loss", "preference tuning (dpo) needs every token's log-probability, not a "
                                        "summed cross-entropy; choose auto or off.")


def prepare(rows: Sequence[dict], tokenizer: Any, config: TrainConfig, *,
            evaluation: bool) -> tuple[list[Pair], DataStats]:
    return tokenize_pairs(rows, tokenizer, config, what="eval rows" if evaluation else "training rows")


def batches(items: list[Pair], config: TrainConfig, *, epoch: int | None) -> list[list[Pair]]:
    return pair_batches(items, config, epoch=epoch)


def weight(batch: list[Pair]) -> int:
    """A step's loss is the mean over its pairs."""
    return len(batch)


def tokens(batch: list[Pair]) -> int:
    return sum(len(p.chosen.input_ids) + len(p.rejected.input_ids) for p in batch)


def loss(run: Any, batch: list[Pair]) -> tuple[Any, dict]:
    terms = dpo_terms(run.model, batch, beta=run.config.dpo_beta, pad_id=run.pad_id, device=run.device,
                      autocast=run.autocast)
    return terms["losses"].sum(), terms


def tokenize_pairs(rows: Sequence[dict], tokenizer: Any, config: TrainConfig,
                   what: str = "training rows") -> tuple[list[Pair], DataStats]:
    """Pairs of (chosen, rejected) rows, each the prompt plus one answer, loss on the answer only.
    Rows without a prompt, a chosen or a rejected answer are skipped (counted in the stats).
    Raises TrainingDataError when none is usable."""
    stats = DataStats(rows=len(rows))
    pairs: list[Pair] = []
    for index, row in enumerate(rows):
        rejected = row.get("rejected") if isinstance(row, dict) else None
        if not isinstance(rejected, str) or not rejected.strip():
            _skip(stats, index, "no rejected response")
            continue
        try:
            chosen_examples, _ = tokenize_rows([_as_sft(row, row.get("response"))], tokenizer, config, what)
            rejected_examples, _ = tokenize_rows([_as_sft(row, rejected)], tokenizer, config, what)
        except TrainingDataError as exc:
            _skip(stats, index, str(exc).split(": ", 1)[-1].rstrip("."))
            continue
        chosen, rejected_row = (_row(chosen_examples[0]), _row(rejected_examples[0]))
        stats.used += 1
        stats.tokens += len(chosen.input_ids) + len(rejected_row.input_ids)
        pairs.append(Pair(chosen, rejected_row))
    if not pairs:
        detail = "; ".join(stats.reasons) if stats.reasons else "there are no rows"
        raise TrainingDataError(f"No usable {what} for preference tuning (prompt, chosen response and rejected "
                                f"response): {detail}.")
    return pairs, stats


def _as_sft(row: dict, response: Any) -> dict:
    return {"prompt": row.get("prompt"), "response": response, "messages": row.get("messages")}


def _row(example: Example) -> Row:
    # One example per row (never packed): make_rows with packing off shifts the targets per example.
    return make_rows([example], _UNPACKED, shuffle_seed=None)[0]


_UNPACKED = TrainConfig(packing=False, max_seq_len=1 << 30)


def _skip(stats: DataStats, index: int, reason: str) -> None:
    stats.skipped += 1
    if len(stats.reasons) < MAX_REASONS:
        stats.reasons.append(f"row {index}: {reason}")


def pair_batches(pairs: list[Pair], config: TrainConfig, *, epoch: int | None) -> list[list[Pair]]:
    """Micro-batches of pairs for one epoch, a pure function of (seed, epoch); None: in order."""
    order = list(range(len(pairs)))
    if epoch is not None:
        random.Random(config.seed * 1_000_003 + epoch).shuffle(order)
    size = config.batch_size
    return [[pairs[i] for i in order[start:start + size]] for start in range(0, len(order), size)]


def response_logps(model: Any, rows: list[Row], pad_id: int, device: Any, autocast: Any) -> Any:
    """Summed log-probability of each row's trained tokens (a 1-D tensor, one value per row)."""
    import torch

    tensors = {k: v.to(device) for k, v in collate(rows, pad_id, packed=False).items()}
    targets = tensors.pop("targets")
    with autocast():
        logits = model(**tensors, use_cache=False).logits
    logps = torch.log_softmax(logits.float(), dim=-1)
    trained = targets != IGNORE
    picked = logps.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * trained).sum(dim=1)


def dpo_terms(model: Any, batch: list[Pair], *, beta: float, pad_id: int, device: Any, autocast: Any) -> dict:
    """For one micro-batch of pairs: per-pair losses (with grad through the adapter) and the
    implicit rewards β·(log π - log π_ref) of the chosen and rejected answers (detached)."""
    import torch

    rows = [pair.chosen for pair in batch] + [pair.rejected for pair in batch]
    policy = response_logps(model, rows, pad_id, device, autocast)
    with torch.no_grad(), model.disable_adapter():
        reference = response_logps(model, rows, pad_id, device, autocast)
    n = len(batch)
    chosen = beta * (policy[:n] - reference[:n])
    rejected = beta * (policy[n:] - reference[n:])
    losses = -torch.nn.functional.logsigmoid(chosen - rejected)
    return {"losses": losses, "chosen_rewards": chosen.detach(), "rejected_rewards": rejected.detach()}


def summarize(terms: list[dict]) -> dict:
    """Means over every pair of the given micro-batches: loss, reward margin, reward accuracy
    (the share of pairs whose chosen answer gets the higher implicit reward), each side's reward."""
    import torch

    losses = torch.cat([t["losses"].detach() for t in terms])
    chosen = torch.cat([t["chosen_rewards"] for t in terms])
    rejected = torch.cat([t["rejected_rewards"] for t in terms])
    margin = chosen - rejected
    return {"loss": losses.mean().item(), "reward_margin": margin.mean().item(),
            "reward_accuracy": (margin > 0).float().mean().item(), "chosen_reward": chosen.mean().item(),
            "rejected_reward": rejected.mean().item()}
