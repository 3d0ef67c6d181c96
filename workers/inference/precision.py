"""Serving precisions: a model loaded in fp32, bf16 or int8 (weight-only), and their measured
cost: decode tokens/s on fixed short prompts and perplexity on a fixed reference text
(reference_texts.py), so a serving precision is chosen by what it measures on the machine.

int8 is weight-only: the transformer blocks' nn.Linear weights in int8 with a scale per output
channel, activations in bf16 where the CPU runs bf16 natively, else fp32 (int8.py). torchao, whose
int8 weight-only quantization is the same, is not installed here; torch.ao's dynamic quantization
(activations in int8 too) tripled the demo model's perplexity. On CUDA, int8 is bitsandbytes',
as load_for_inference(quantization="int8") loads it. PEFT's LoRA layers wrap nn.Linear, which
quantization replaces: adapters are refused over int8.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .errors import InferenceInputError
from .reference_texts import DECODE_PROMPTS, REFERENCE_TEXTS

__all__ = ["PRECISIONS", "Measurement", "check_precision", "choose_precision", "decode_tokens_per_s",
           "load_in_precision", "measure_precisions", "perplexity", "precision_unsupported", "quantize_int8"]

PRECISIONS = ("fp32", "bf16", "int8")

# `auto` takes the fastest precision whose perplexity is at most this much above fp32's: the demo
# model's bf16 (-0.4%) and int8 weight-only (+1.2%) pass, torch.ao's dynamic int8 (+213%) would not
# (bench/serve_precision.py).
AUTO_MAX_PERPLEXITY_INCREASE = 0.02

# Decode speed is measured on this many new tokens a prompt (greedy, one batch of DECODE_PROMPTS).
DECODE_NEW_TOKENS = 24


def precision_unsupported(precision: str, device: str) -> str | None:
    """Why `precision` cannot run on `device` ("cpu", "cuda", "cuda:N", "mps"), or None when it can."""
    import torch

    if precision not in PRECISIONS:
        return f"Unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}."
    kind = device.split(":")[0]
    if precision == "bf16":
        if kind == "cuda" and not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()):
            return "This GPU has no bf16 support."
        # oneDNN runs bf16 matrix work natively on CPUs with AVX512-BF16 or AMX; elsewhere it is emulated, slower than fp32.
        if kind == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return "This CPU has no native bf16 (AVX512-BF16 or AMX)."
    if precision == "int8" and kind not in ("cpu", "cuda"):
        return f"int8 weights run on a CPU (or a CUDA device with bitsandbytes), not {kind}."
    if precision == "int8" and kind == "cuda" and importlib.util.find_spec("bitsandbytes") is None:
        return "int8 weights on a GPU need the bitsandbytes package: pip install '.[gpu]'."
    return None


def check_precision(precision: str, device: str, *, adapter: bool = False) -> None:
    """Raise InferenceInputError(field="precision") when `precision` cannot serve on `device`
    (or, with `adapter`, cannot carry a LoRA adapter)."""
    reason = precision_unsupported(precision, device)
    if reason is None and adapter and precision == "int8":
        reason = ("LoRA adapters are not served over int8 weights (PEFT wraps the linear layers int8 "
                  "replaces); serve the adapter in fp32 or bf16.")
    if reason is not None:
        raise InferenceInputError("precision", reason)


def quantize_int8(model: Any) -> Any:
    """The model with its transformer blocks' nn.Linear layers replaced by Int8WeightOnlyLinear
    (int8 weights, one scale per output channel; activations stay in the model's dtype), in place.
    The output head stays as it is: a vocabulary-wide projection, often tied to the embeddings."""
    import torch

    from .int8 import Int8WeightOnlyLinear

    head = model.get_output_embeddings()
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, torch.nn.Linear) and module is not head]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, child, Int8WeightOnlyLinear(linear))
    return model


def perplexity(model: Any, tokenizer: Any, texts: Sequence[str] = REFERENCE_TEXTS) -> float:
    """exp of the mean next-token negative log-likelihood over all tokens of `texts` (each text
    scored on its own, truncated to the model's context)."""
    import torch

    limit = getattr(model.config, "max_position_embeddings", None) or 2048
    total_nll, total_tokens = 0.0, 0
    device = next(model.parameters()).device
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").input_ids[:, :limit].to(device)
            if ids.shape[1] < 2:
                continue
            logits = model(input_ids=ids).logits[:, :-1].float()
            nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                    reduction="sum")
            total_nll += nll.item()
            total_tokens += ids.shape[1] - 1
    if total_tokens == 0:
        raise ValueError("The reference texts have no tokens to score.")
    return math.exp(total_nll / total_tokens)


def decode_tokens_per_s(model: Any, tokenizer: Any, prompts: Sequence[str] = DECODE_PROMPTS,
                        new_tokens: int = DECODE_NEW_TOKENS) -> float:
    """Generated tokens per second, greedy, the prompts decoded as one batch (after one warm-up)."""
    from .generate import generate_batch
    from .params import SamplingParams

    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    generate_batch(model, tokenizer, list(prompts[:1]), SamplingParams(max_new_tokens=2, temperature=0.0))
    started = time.perf_counter()
    results = generate_batch(model, tokenizer, list(prompts), params)
    seconds = time.perf_counter() - started
    return sum(r.completion_tokens for r in results) / seconds


@dataclass
class Measurement:
    """One precision's figures; `error` says why it was not measured (then the figures are None)."""

    precision: str
    tokens_per_s: float | None = None
    perplexity: float | None = None
    load_s: float | None = None
    error: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def measure_precisions(path: Any, *, device: str = "cpu", precisions: Sequence[str] = PRECISIONS,
                       loader: Callable[..., tuple[Any, Any]] | None = None,
                       on_progress: Callable[[int, int], bool] | None = None) -> list[Measurement]:
    """Load the model at `path` in each precision in turn and measure it. `loader(path, device=,
    dtype=)` defaults to workers.models.load_for_inference. `on_progress(done, total)` is called
    before and after each precision; when it returns True the measuring stops (the figures so far
    are returned). A precision the device cannot run is recorded with its reason, not raised."""
    if loader is None:
        from workers.models import load_for_inference as loader
    measured: list[Measurement] = []
    total = len(precisions)
    for index, precision in enumerate(precisions):
        if on_progress is not None and on_progress(index, total):
            return measured
        reason = precision_unsupported(precision, device)
        if reason is not None:
            measured.append(Measurement(precision, error=reason))
            continue
        started = time.perf_counter()
        model, tokenizer = load_in_precision(path, precision, device=device, loader=loader)
        load_s = time.perf_counter() - started
        measured.append(Measurement(precision, tokens_per_s=round(decode_tokens_per_s(model, tokenizer), 2),
                                    perplexity=round(perplexity(model, tokenizer), 4), load_s=round(load_s, 3)))
        del model
    if on_progress is not None:
        on_progress(total, total)
    return measured


def load_in_precision(path: Any, precision: str, *, device: str = "cpu",
                      loader: Callable[..., tuple[Any, Any]] | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) loaded by `loader` in `precision` on `device` (int8: loaded in bf16, or
    fp32 on a CPU without native bf16, then its linear weights quantized; bitsandbytes on CUDA)."""
    if loader is None:
        from workers.models import load_for_inference as loader
    check_precision(precision, device)
    if precision == "int8" and device.startswith("cuda"):
        return loader(path, device=device, dtype="bf16", quantization="int8")
    dtype = precision
    if precision == "int8":
        dtype = "bf16" if precision_unsupported("bf16", device) is None else "fp32"
    model, tokenizer = loader(path, device=device, dtype=dtype)
    if precision == "int8":
        model = quantize_int8(model)
    return model, tokenizer


def choose_precision(measured: Sequence[dict], *, adapter: bool = False,
                     max_increase: float = AUTO_MAX_PERPLEXITY_INCREASE) -> str:
    """What `auto` serves: the fastest measured precision whose perplexity is within `max_increase`
    of fp32's (int8 left out for an adapter); fp32 when fp32 or everything else was not measured."""
    rows = {m["precision"]: m for m in measured if m.get("tokens_per_s") and m.get("perplexity")}
    if "fp32" not in rows:
        return "fp32"
    ceiling = rows["fp32"]["perplexity"] * (1 + max_increase)
    fit = [m for m in rows.values() if m["perplexity"] <= ceiling and not (adapter and m["precision"] == "int8")]
    return max(fit, key=lambda m: m["tokens_per_s"])["precision"]
