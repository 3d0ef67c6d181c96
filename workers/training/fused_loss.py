"""The summed next-token cross-entropy of hidden states through the output layer, without the
[tokens x vocabulary] logits of the whole micro-batch in memory (config.fused_loss).

At a 49k vocabulary the logits in fp32 are 196 KB a token, more than all of a small model's other
activations together. Two ways to avoid holding them:

- "liger": Liger-kernel's LigerFusedLinearCrossEntropyLoss (Triton, CUDA only): chunk by chunk, the
  logits, the loss and the input gradient in one pass, in forward.
- "chunked": plain PyTorch over chunks of CHUNK_LOGITS logits; each chunk runs under non-reentrant
  torch.utils.checkpoint, so backward recomputes its logits instead of keeping them (one more output
  layer matmul a token). Any device.

Both equal the plain `cross_entropy(linear(hidden).float(), targets, reduction="sum")` within float
rounding (tests/workers/test_training_fast_steps.py).
"""

from __future__ import annotations

from typing import Any

# Logits per chunk: 16 Mi elements is 64 MiB in fp32, about 340 tokens at a 49k vocabulary.
CHUNK_LOGITS = 2**24


def liger_available() -> bool:
    """Whether Liger-kernel's fused linear cross-entropy imports (it needs triton, hence CUDA)."""
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import (  # noqa: F401
            LigerFusedLinearCrossEntropyLoss,
        )
    except Exception:  # a missing package, missing triton, a triton without a GPU: all "no"
        return False
    return True


def resolve(fused_loss: str, device_type: str) -> str:
    """What config.fused_loss means on this device: "liger", "chunked" or "off". "auto" is Liger on CUDA
    when it imports, else the full logits (on the CPU chunking measured slower: bench/README.md). Raises
    ValueError (the caller names the field) for liger where it cannot run."""
    if fused_loss == "liger":
        if device_type != "cuda":
            raise ValueError(f"liger needs a CUDA GPU; this worker trains on {device_type}.")
        if not liger_available():
            raise ValueError("liger-kernel is not installed on this worker (pip install liger-kernel); "
                             "choose chunked, auto or off.")
        return "liger"
    if fused_loss == "auto":
        return "liger" if device_type == "cuda" and liger_available() else "off"
    return fused_loss


def linear_cross_entropy(kind: str, hidden: Any, layer: Any, targets: Any, *, ignore_index: int = -100) -> Any:
    """Summed cross-entropy of `layer(hidden)` (hidden: [tokens, hidden], layer: a torch.nn.Linear)
    against `targets` ([tokens]; ignore_index skipped), as kind ("off", "chunked", "liger") computes it."""
    import torch

    if kind == "liger":
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

        # The layer's own dtype for the input: under autocast the hidden states may be fp32 (an fp32 norm).
        weight = layer.weight
        return LigerFusedLinearCrossEntropyLoss(ignore_index=ignore_index, reduction="sum")(
            weight, hidden.to(weight.dtype), targets, layer.bias)
    if kind == "off":
        return _chunk_loss(hidden, targets, layer, ignore_index)
    from torch.utils.checkpoint import checkpoint

    rows = max(1, CHUNK_LOGITS // layer.out_features)
    total = hidden.new_zeros((), dtype=torch.float32)
    for start in range(0, hidden.shape[0], rows):
        total = total + checkpoint(_chunk_loss, hidden[start:start + rows], targets[start:start + rows], layer,
                                   ignore_index, use_reentrant=False)
    return total


def _chunk_loss(hidden: Any, targets: Any, layer: Any, ignore_index: int) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(layer(hidden).float(), targets, ignore_index=ignore_index,
                                             reduction="sum")
