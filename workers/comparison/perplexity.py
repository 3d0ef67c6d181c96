"""Perplexity of reference answers under a model: how surprised the model is by the answer
people wrote, given the prompt. Plain Python + torch, no Django."""

from __future__ import annotations

import math
from typing import Any

from workers.inference.generate import context_length
from workers.inference.prompts import encode_prompt

# Rows per forward pass. The logits of a pass are rows x length x vocabulary floats: 8 rows of
# 256 tokens on the demo model's 49k vocabulary is 400 MB, the most we want on a CPU worker.
PERPLEXITY_ROWS = 8


def reference_perplexity(model: Any, tokenizer: Any, prompts: list[str], references: list[str | None], *,
                         rows_per_pass: int = PERPLEXITY_ROWS) -> list[dict | None]:
    """For each (prompt text, reference): {"perplexity": exp(mean NLL of the reference tokens),
    "nll": summed negative log-likelihood, "tokens": reference tokens}, or None when there is
    no reference (or it has no tokens). The prompt text is what the model is prompted with (a
    rendered chat template); when prompt + reference exceed the context, the prompt is cut
    from the left."""
    import torch

    limit = context_length(model) or 2048
    encoded: list[tuple[list[int], int] | None] = []
    for prompt, reference in zip(prompts, references):
        if not reference:
            encoded.append(None)
            continue
        answer = list(tokenizer(reference, add_special_tokens=False)["input_ids"])[:limit - 1]
        if not answer:
            encoded.append(None)
            continue
        context = encode_prompt(tokenizer, prompt)[-(limit - len(answer)):]
        encoded.append((context + answer, len(answer)))
    results: list[dict | None] = [None] * len(encoded)
    todo = [i for i, item in enumerate(encoded) if item is not None]
    device = next(model.parameters()).device
    pad = getattr(tokenizer, "pad_token_id", None) or 0
    with torch.inference_mode():
        for start in range(0, len(todo), rows_per_pass):
            chunk = todo[start:start + rows_per_pass]
            width = max(len(encoded[i][0]) for i in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            target = torch.zeros((len(chunk), width), dtype=torch.bool)  # positions holding reference tokens
            for row, i in enumerate(chunk):
                tokens, answer = encoded[i]
                ids[row, :len(tokens)] = torch.tensor(tokens)
                mask[row, :len(tokens)] = 1
                target[row, len(tokens) - answer:len(tokens)] = True
            ids, mask, target = ids.to(device), mask.to(device), target.to(device)
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            # the logits at position t predict the token at t + 1
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
            wanted = target[:, 1:]
            for row, i in enumerate(chunk):
                count = int(wanted[row].sum())
                total = float(nll[row][wanted[row]].sum())
                results[i] = {"perplexity": math.exp(total / count), "nll": total, "tokens": count}
    return results
