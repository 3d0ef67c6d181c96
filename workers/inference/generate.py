"""Batched generation: one explicit decode loop over a left-padded batch with the KV cache.

    results = generate_batch(model, tokenizer, prompts, SamplingParams(max_new_tokens=64),
                             on_token=lambda i, delta: print(i, delta))

Left padding: every prompt ends at the last column, so each step appends one column for all
rows. Each row's position ids count its own tokens only (pads are masked), so a row's
positions, and under greedy decoding its tokens, are the ones it gets alone.
Prompts that start with the same tokens (the system prompt a chat template writes) run that
prefix once, at batch size 1; its KV cache is copied to every row and the rest of each prompt
follows, left-padded: columns [shared prefix][padding][rest of the prompt].
Rows that finish (an end-of-sequence token, a stop sequence, max_new_tokens) are dropped from
the batch and from the KV cache, and the loop ends when none is left.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .detokenize import IncrementalText
from .errors import InferenceInputError
from .params import SamplingParams
from .prompts import encode_prompt

MIN_SHARED_PREFIX = 8
CONTEXT_ATTRIBUTES = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


@dataclass
class GenerationResult:
    """One sequence's outcome. `finish_reason` is "stop" (an end-of-sequence token or a stop
    sequence) or "length" (max_new_tokens reached). `completion_tokens` counts every token the
    model produced, the end-of-sequence token included (`token_ids` lists them); `text` is their
    decoded text without special tokens, cut before a stop sequence. Times are from the start
    of the generate_batch call that produced it."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    time_to_first_token_s: float
    total_s: float
    token_ids: list[int] = field(default_factory=list, repr=False)


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


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """The tokens that end a sequence: the generation config's (what model.generate stops on)
    and the tokenizer's end-of-sequence token."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)
            break
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


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
    import torch

    started = time.perf_counter()
    device = _device_of(model)
    n = len(encoded)
    pad_id = _pad_id(tokenizer)
    eos = eos_token_ids(model, tokenizer)
    texts = [IncrementalText(tokenizer, sp.stop) for sp in params_list]
    generators = [_generator(sp, device, torch) for sp in params_list]
    results: list[GenerationResult | None] = [None] * n
    first_token_at: list[float] = [0.0] * n
    generated: list[list[int]] = [[] for _ in range(n)]

    shared = shared_prefix_length(encoded) if share_prefix else 0
    cache_name, extra = _forward_arguments(model)
    past = None
    with torch.inference_mode():
        if shared:  # the prompts' common prefix (a chat template's system prompt) runs once
            prefix = torch.tensor([encoded[0][:shared]], dtype=torch.long, device=device)
            out = model(input_ids=prefix, attention_mask=torch.ones_like(prefix),
                        position_ids=torch.arange(shared, device=device).unsqueeze(0), use_cache=True,
                        **{cache_name: None}, **extra)
            past = _select_rows(getattr(out, cache_name), torch.zeros(n, dtype=torch.long, device=device))
    rest = [ids[shared:] for ids in encoded]
    width = max(len(ids) for ids in rest)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for row, ids in enumerate(rest):
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        mask[row, width - len(ids):] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = shared + (mask.cumsum(-1) - 1).clamp(min=0)
    if shared:  # columns: [shared prefix][left padding][rest of the prompt]
        mask = torch.cat([mask.new_ones((n, shared)), mask], dim=-1)
    next_position = mask.sum(-1, keepdim=True)  # each row's next position: its prompt length
    active = list(range(n))  # batch row -> request index

    with torch.inference_mode():
        while active:
            out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                        **{cache_name: past}, **extra)
            past = getattr(out, cache_name)
            logits = out.logits[:, -1, :]
            chosen = _choose(logits, [params_list[i] for i in active], [generators[i] for i in active], torch)
            now = time.perf_counter()
            keep = []
            for row, (i, token) in enumerate(zip(active, chosen)):
                if not generated[i]:
                    first_token_at[i] = now - started
                generated[i].append(token)
                text = texts[i]
                if token in eos:
                    reason = "stop"
                else:
                    delta = text.push(token)
                    if delta and on_token is not None:
                        on_token(i, delta)
                    if text.stopped:
                        reason = "stop"
                    elif len(generated[i]) >= params_list[i].max_new_tokens:
                        reason = "length"
                    elif is_cancelled is not None and is_cancelled(i):
                        reason = "cancelled"
                    else:
                        keep.append(row)
                        continue
                delta = text.finish()
                if delta and on_token is not None:
                    on_token(i, delta)
                results[i] = GenerationResult(
                    text=text.text, prompt_tokens=len(encoded[i]), completion_tokens=len(generated[i]),
                    finish_reason=reason, time_to_first_token_s=first_token_at[i],
                    total_s=time.perf_counter() - started, token_ids=generated[i])
            if not keep:
                break
            tokens = torch.tensor([chosen[row] for row in keep], dtype=torch.long, device=device).unsqueeze(-1)
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long, device=device)
                past = _select_rows(past, index)
                mask, next_position = mask.index_select(0, index), next_position.index_select(0, index)
                active = [active[row] for row in keep]
            input_ids = tokens
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)
            positions = next_position
            next_position = next_position + 1
    return results  # type: ignore[return-value]


def shared_prefix_length(encoded: list[list[int]]) -> int:
    """Tokens every prompt starts with, leaving each at least one token of its own (its last
    token gives the first logits); 0 for a single prompt or below MIN_SHARED_PREFIX."""
    if len(encoded) < 2:
        return 0
    first, length = encoded[0], min(len(ids) for ids in encoded) - 1
    for ids in encoded[1:]:
        k = 0
        while k < length and ids[k] == first[k]:
            k += 1
        length = k
    return length if length >= MIN_SHARED_PREFIX else 0


def _choose(logits, rows: list[SamplingParams], generators: list, torch) -> list[int]:
    chosen = logits.argmax(dim=-1).tolist()
    for row, sp in enumerate(rows):
        if not sp.greedy:
            chosen[row] = _sample(logits[row].float(), sp, generators[row], torch)
    return chosen


def _sample(logits, sp: SamplingParams, generator, torch) -> int:
    scores = logits / sp.temperature
    if 0 < sp.top_k < scores.shape[-1]:
        kth = torch.topk(scores, sp.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sp.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each one
        drop = before >= sp.top_p  # keep the smallest prefix whose mass reaches top_p (the top token always)
        scores = scores.index_fill(0, order[drop], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _generator(sp: SamplingParams, device, torch):
    if sp.greedy:
        return None
    generator = torch.Generator(device=device)
    if sp.seed is None:
        generator.seed()
    else:
        generator.manual_seed(sp.seed)
    return generator


def _select_rows(past, index):
    """Keep only the rows `index` of the KV cache."""
    if hasattr(past, "reorder_cache"):
        past.reorder_cache(index)
        return past
    return tuple(tuple(t.index_select(0, index) for t in layer) for layer in past)  # legacy tuple cache


def _pad_id(tokenizer: Any) -> int:
    for value in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if value is not None:
            return int(value)
    return 0


def _device_of(model: Any):
    device = getattr(model, "device", None)
    if device is not None:
        return device
    return next(model.parameters()).device


def _forward_arguments(model: Any) -> tuple[str, dict]:
    """(name of the KV cache argument, extra arguments) for the model's forward.

    transformers 5.x renamed `past_key_values` to `cache` (the old name still works, with a
    warning, until 5.40). Ask for the last position's logits only when the model supports it,
    not the prompt's whole [batch, length, vocabulary] tensor.
    """
    target = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PeftModel passes kwargs on
    try:
        parameters = inspect.signature(target.forward).parameters
    except (TypeError, ValueError):
        parameters = {}
    cache_name = "cache" if "cache" in parameters else "past_key_values"
    if "logits_to_keep" in parameters:
        return cache_name, {"logits_to_keep": 1}
    if "num_logits_to_keep" in parameters:
        return cache_name, {"num_logits_to_keep": 1}
    return cache_name, {}
