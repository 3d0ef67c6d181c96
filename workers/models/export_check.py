"""Check an exported model by loading it back and generating with it: greedy tokens for a few
prompts from the exported model and from a reference (the model that was exported, or the
served base + adapter), compared.

Both run the same prompt ids (the reference's tokenizer encodes them), so the check is about the
weights; both decode greedily for a fixed number of tokens (no stop at EOS), in float32. Two
measures: whether each prompt's free-running greedy tokens are identical, and the agreement, the
share of the reference's tokens the exported model also picks when given the same prefix (one
flip near a tie does not count every later token as a disagreement).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

CHECK_PROMPTS = ("The capital of France is", "Once upon a time", "def add(a, b):", "1, 2, 3, 4,")
CHECK_TOKENS = 12


def load_gguf_back(gguf_path: Path) -> Any:
    """The model of a GGUF file through transformers' GGUF loader, dequantized to float32."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                 local_files_only=True, trust_remote_code=False,
                                                 dtype=torch.float32)
    return model.eval()


def greedy_tokens(model: Any, prompt_ids: list[int], count: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids),
                             dtype=torch.long), do_sample=False, max_new_tokens=count, min_new_tokens=count,
                             pad_token_id=0)
    return out[0, len(prompt_ids):].tolist()


def forced_choices(model: Any, prompt_ids: list[int], continuation: list[int]) -> list[int]:
    """The model's greedy pick for each token of `continuation`, given the prompt and the tokens before it."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + continuation[:-1]])).logits[0]
    return logits[len(prompt_ids) - 1:].argmax(-1).tolist()


def compare_greedy(exported: Any, reference: Any, tokenizer: Any, *, prompts=CHECK_PROMPTS,
                   count: int = CHECK_TOKENS) -> dict:
    """{"prompts": [{"prompt", "reference", "exported", "agreeing"}], "tokens_compared", "agreement",
    "identical": every prompt's free-running tokens equal, "seconds"}."""
    started = time.monotonic()
    results = []
    for prompt in prompts:
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] or [0]
        expected = greedy_tokens(reference, prompt_ids, count)
        got = greedy_tokens(exported, prompt_ids, count)
        forced = forced_choices(exported, prompt_ids, expected)
        results.append({"prompt": prompt, "reference": expected, "exported": got,
                        "agreeing": sum(a == b for a, b in zip(expected, forced))})
    compared = count * len(results)
    return {"prompts": results, "tokens_compared": compared,
            "agreement": round(sum(r["agreeing"] for r in results) / compared, 4) if compared else 1.0,
            "identical": all(r["reference"] == r["exported"] for r in results),
            "seconds": round(time.monotonic() - started, 2)}
