"""Batched generation of a fixed set of prompts: one DecodeBatch (decode.py) that admits them all,
then steps until every row has finished.

    results = generate_batch(model, tokenizer, prompts, SamplingParams(max_new_tokens=64),
                             on_token=lambda i, delta: print(i, delta))

Left padding: every prompt ends at the last column, so each step appends one column for all
rows. Each row's position ids count its own tokens only (pads are masked), so a row's
positions, and under greedy decoding its tokens, are the ones it gets alone.
Prompts that start with the same tokens (the system prompt a chat template writes) run that
prefix once, at batch size 1; its KV cache is copied to every row and the rest of each prompt
follows, left-padded: columns [shared prefix][padding][rest of the prompt].
Rows that finish (an end-of-sequence token, a stop sequence, max_new_tokens) are dropped from
the batch and from the KV cache, and the loop ends when none is left. The micro-batcher
(batcher.py) drives the same DecodeBatch, letting new requests join between steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .decode import (
    MIN_SHARED_PREFIX,
    DecodeBatch,
    GenerationResult,
    eos_token_ids,
    shared_prefix_length,
)
from .decode import Sequence as DecodeSequence
from .errors import InferenceInputError
from .params import SamplingParams
from .prompts import encode_prompt

__all__ = ["MIN_SHARED_PREFIX", "GenerationResult", "context_length", "eos_token_ids", "generate_batch", "prepare",
           "shared_prefix_length"]

CONTEXT_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(model: Any) -> int | None:
    """The model's context in tokens (from its config), or None when the config does not say."""
    config = getattr(model, "config", None)
    for name in CONTEXT_ATTRIBUTES:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def prepare(model: Any, tokenizer: Any, prompts: Sequence[str],
            params: SamplingParams | Sequence[SamplingParams]) -> tuple[list[list[int]], list[SamplingParams]]:
    """Validate a batch and tokenize it: (ids per prompt, params per prompt). Raises
    InferenceInputError (with `index` for a batch of more than one) before any model work."""
    if isinstance(params, SamplingParams):
        params_list = [params] * len(prompts)
    else:
        params_list = list(params)
        if len(params_list) != len(prompts):
            raise InferenceInputError("params", f"{len(params_list)} sampling params for {len(prompts)} prompts.")
    limit = context_length(model)
    many = len(prompts) > 1
    encoded = []
    for i, (prompt, sp) in enumerate(zip(prompts, params_list)):
        where = i if many else None
        if not isinstance(sp, SamplingParams):
            raise InferenceInputError("params", "must be SamplingParams.", index=where)
        if not isinstance(prompt, str):
            raise InferenceInputError("prompt", "must be a string.", index=where)
        try:
            sp.validate(context_length=limit)
            ids = encode_prompt(tokenizer, prompt)
            if not ids:
                raise InferenceInputError("prompt", "is empty.")
            sp.validate(context_length=limit, prompt_tokens=len(ids))
        except InferenceInputError as exc:
            if where is None:
                raise
            raise InferenceInputError(exc.field, exc.message, index=where) from None
        encoded.append(ids)
    return encoded, params_list


def generate_batch(model: Any, tokenizer: Any, prompts: list[str], params: SamplingParams | list[SamplingParams], *,
                   on_token: Callable[[int, str], None] | None = None,
                   is_cancelled: Callable[[int], bool] | None = None,
                   share_prefix: bool = True) -> list[GenerationResult]:
    """Continue every prompt; one GenerationResult per prompt, in order.

    `params` is one SamplingParams for all or one per prompt (greedy and sampled rows mix).
    `on_token(index, text_delta)` is called as text becomes stable for a row; the deltas of a
    row concatenate to its final text. `is_cancelled(index)`, asked after each of a row's tokens,
    ends that row early with finish_reason "cancelled" (the others go on). Raises
    InferenceInputError before running the model for
    an invalid value or a prompt that does not fit the model's context with max_new_tokens.

    `share_prefix`: when the prompts start with the same tokens (at least MIN_SHARED_PREFIX,
    typically a chat template's system prompt), those run once and their KV cache is copied to
    every row; the rest of each prompt is left-padded after it. False runs plain left padding.
    """
    if not prompts:
        return []
    encoded, params_list = prepare(model, tokenizer, prompts, params)
    started = time.perf_counter()
    sequences = [DecodeSequence(ids, sp, started, on_token=_bind(on_token, i), is_cancelled=_bind(is_cancelled, i))
                 for i, (ids, sp) in enumerate(zip(encoded, params_list))]
    batch = DecodeBatch(model, tokenizer, max_rows=len(sequences), share_prefix=share_prefix)
    batch.admit(sequences)
    while batch.rows:
        batch.step()
    return [seq.result for seq in sequences]  # type: ignore[misc]


def _bind(callback: Callable | None, index: int) -> Callable | None:
    if callback is None:
        return None
    return lambda *args: callback(index, *args)
