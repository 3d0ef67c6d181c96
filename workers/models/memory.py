"""A rough memory estimate for inference and LoRA training, shown before anything is launched.

It is an estimate, not a measurement: it leaves out the framework's own overhead (CUDA
context, allocator fragmentation, temporary buffers of a kernel) and assumes the model is
held at `precision` (a GGUF model is dequantized to floats by transformers, so its weights
count at `precision` too). Every term is in bytes:

weights      parameters x bytes(precision); with a quantized base (QLoRA, bitsandbytes) the linear
             layers' weights at QUANTIZED_BYTES per parameter and the embedding matrix (vocab x
             hidden, which bitsandbytes leaves alone; a tied output layer is the same tensor) at
             bytes(precision). An untied output layer, also left alone, is counted as quantized.
kv_cache     inference only: 2 (K and V) x layers x batch x seq x kv_heads x head_dim x bytes
activations  lora:      layers x batch x seq x hidden x bytes x ACTIVATION_VALUES_PER_TOKEN
                        + batch x seq x vocab x 4 x LOGIT_COPIES_TRAINING
             inference: batch x seq x hidden x bytes x ACTIVATION_VALUES_PER_TOKEN (one layer's
                        working set during prefill: layers run one after another and nothing
                        is kept for a backward pass) + batch x vocab x 4 (last position's logits)
lora         trainable parameters: rank x (in + out) for each adapted linear layer, per layer
             (`lora_targets`: "all-linear" = q, k, v, o, gate, up, down; "attention" = q, k, v, o)
             weights and gradients at bytes(precision); AdamW state: two fp32 moments, plus an
             fp32 master copy when precision is 16-bit — of the LoRA parameters only, the base
             model is frozen.
"""

from __future__ import annotations

from typing import Any

from .info import ModelInfo

PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MODES = ("inference", "lora")
# bitsandbytes: NF4 is 4 bits plus, per block of 64, an 8-bit absmax, itself quantized in blocks of 256
# with an fp32 constant (double quantization): 4 + 8/64 + 32/(64*256) bits. LLM.int8: a byte plus an
# fp32 scale per row (negligible).
QUANTIZED_BYTES = {"nf4": (4 + 8 / 64 + 32 / (64 * 256)) / 8, "int8": 1.0}
LORA_TARGETS = ("all-linear", "attention")

# Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
# (arXiv:2205.05198) section 4.1: one transformer layer keeps s·b·h·(34 + 5·a·s/h) bytes of
# activations for the backward pass at 16-bit, i.e. 17 values per token per hidden unit. The
# 5·a·s/h term is the s×s attention matrix, which PyTorch's fused SDPA kernels do not store, so
# it is left out. With a frozen base model LoRA keeps somewhat less (no input is kept for a
# frozen weight's gradient), so for LoRA this is the upper end of the range.
ACTIVATION_VALUES_PER_TOKEN = 17
# The loss upcasts the logits to fp32 and keeps the fp32 log-softmax for backward: two fp32
# copies of batch x seq x vocab, which for small models with large vocabularies (the demo
# model: 576 hidden, 49k vocab) outweighs all the layers' activations.
LOGIT_COPIES_TRAINING = 2
ADAMW_MOMENT_BYTES = 2 * 4   # exp_avg and exp_avg_sq, fp32
MASTER_WEIGHT_BYTES = 4      # fp32 master copy of each trainable parameter under 16-bit training


def lora_parameter_count(info: ModelInfo, rank: int, targets: str = "all-linear") -> int:
    """Trainable parameters of a LoRA adapter of `rank` on `targets`; 0 if the sizes are unknown.

    A linear layer in→out gains A (rank×in) and B (out×rank). An unknown intermediate size is
    taken as 4 × hidden (the classic transformer MLP).
    """
    hidden, layers = info.hidden_size, info.layers
    if not hidden or not layers:
        return 0
    heads = info.heads or 1
    head_dim = info.head_dim or hidden // heads
    q_out = heads * head_dim
    kv_out = (info.kv_heads or heads) * head_dim
    per_layer = (hidden + q_out) + 2 * (hidden + kv_out) + (q_out + hidden)  # q, k, v, o
    if targets == "all-linear":
        intermediate = info.intermediate_size or 4 * hidden
        per_layer += 3 * (hidden + intermediate)  # gate, up, down
    return layers * rank * per_layer


def memory_estimate(
    info: ModelInfo,
    *,
    precision: str = "bf16",
    batch_size: int = 1,
    seq_len: int = 512,
    lora_rank: int = 16,
    mode: str = "inference",
    lora_targets: str = "all-linear",
    lora_parameters: int | None = None,
    quantization: str = "none",
) -> dict[str, Any]:
    """Estimated memory, in bytes, to run `info`'s model (see the module docstring for formulas).

    precision: "bf16" | "fp16" | "fp32"; mode: "inference" | "lora"; seq_len is the whole
    sequence (prompt + new tokens for inference). Returns a dict with weights_bytes,
    activations_bytes, kv_cache_bytes, lora_parameters (a count), lora_weights_bytes,
    lora_gradients_bytes, optimizer_bytes and total_bytes, the inputs, `estimate: True`,
    and `missing`: model sizes the metadata did not state (their terms count as 0).
    `lora_parameters`, when known (workers.training.lora_trainable_parameters counts them exactly from
    the headers for a job's target modules), replaces the count from rank and `lora_targets`.
    quantization: "none" | "nf4" | "int8", the frozen base's weights (see the module docstring).
    Raises ValueError for an unknown precision, mode, target set or quantization, or a non-positive size.
    """
    if precision not in PRECISION_BYTES:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_BYTES)}, not {precision!r}.")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}.")
    if lora_targets not in LORA_TARGETS:
        raise ValueError(f"lora_targets must be one of {', '.join(LORA_TARGETS)}, not {lora_targets!r}.")
    for name, number in (("batch_size", batch_size), ("seq_len", seq_len), ("lora_rank", lora_rank)):
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise ValueError(f"{name} must be a positive integer.")

    width = PRECISION_BYTES[precision]
    hidden, layers, vocab = info.hidden_size or 0, info.layers or 0, info.vocab_size or 0
    missing = [name for name in ("hidden_size", "layers", "vocab_size", "heads") if not getattr(info, name)]
    tokens = batch_size * seq_len

    if quantization != "none" and quantization not in QUANTIZED_BYTES:
        raise ValueError(f"quantization must be none or one of {', '.join(QUANTIZED_BYTES)}, not {quantization!r}.")
    weights = info.parameters * width
    if quantization != "none":
        kept = min(info.parameters, vocab * hidden)
        weights = round(kept * width + (info.parameters - kept) * QUANTIZED_BYTES[quantization])
    kv_cache = activations = lora_params = lora_weights = lora_grads = optimizer = 0
    if mode == "inference":
        head_dim = info.head_dim or (hidden // info.heads if info.heads else 0)
        kv_cache = 2 * layers * tokens * (info.kv_heads or info.heads or 0) * head_dim * width
        activations = tokens * hidden * width * ACTIVATION_VALUES_PER_TOKEN + batch_size * vocab * 4
    else:
        activations = (layers * tokens * hidden * width * ACTIVATION_VALUES_PER_TOKEN
                       + tokens * vocab * 4 * LOGIT_COPIES_TRAINING)
        lora_params = lora_parameters if lora_parameters is not None else lora_parameter_count(
            info, lora_rank, lora_targets)
        lora_weights = lora_grads = lora_params * width
        optimizer = lora_params * (ADAMW_MOMENT_BYTES + (MASTER_WEIGHT_BYTES if width < 4 else 0))

    return {
        "estimate": True,
        "mode": mode,
        "precision": precision,
        "quantization": quantization,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "lora_rank": lora_rank if mode == "lora" else None,
        "lora_targets": lora_targets if mode == "lora" else None,
        "weights_bytes": weights,
        "activations_bytes": activations,
        "kv_cache_bytes": kv_cache,
        "lora_parameters": lora_params,
        "lora_weights_bytes": lora_weights,
        "lora_gradients_bytes": lora_grads,
        "optimizer_bytes": optimizer,
        "total_bytes": weights + activations + kv_cache + lora_weights + lora_grads + optimizer,
        "missing": missing,
    }
