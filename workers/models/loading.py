"""Load a safetensors model directory for inference: the one place weights are loaded.

Only safetensors (`use_safetensors=True`), never remote code (`trust_remote_code=False`),
never the network (`local_files_only=True`); the directory passes the same checks as
`inspect_model` first, so a pickle-only or custom-code directory is refused before
transformers sees it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import ModelFormatError
from .inspection import inspect_model

DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
                 "half": "float16", "fp32": "float32", "float32": "float32", "float": "float32"}


def load_for_inference(
    path: Path,
    device: str = "cpu",
    dtype: Any = None,
    *,
    roots: Iterable[os.PathLike | str] | None = None,
    quantization: str = "none",
) -> tuple[Any, Any]:
    """Load (model, tokenizer) from a safetensors directory, the model in eval mode on `device`.

    device: "cpu", "cuda", "cuda:N" or "mps". dtype: None keeps the checkpoint's dtype
    (config.json's), else "bf16"/"fp16"/"fp32" (or the torch names, or a torch.dtype).
    The tokenizer pads on the left (decoder-only batched generation) and pads with EOS when it
    has no pad token. `roots` as for inspect_model.

    Raises ModelSafetyError / ModelFormatError as inspect_model does, ModelFormatError for a
    GGUF file (convert it first) or a directory without tokenizer files, ValueError for an
    unavailable device or an unknown dtype. quantization "nf4" (4-bit, double quantization) or "int8"
    loads the linear layers' weights quantized by bitsandbytes, on a CUDA device only (ValueError
    elsewhere, or when bitsandbytes is not installed); compute runs in `dtype`.
    """
    info = inspect_model(path, roots=roots)
    if info.format != "hf_dir":
        raise ModelFormatError("Only safetensors directories are loaded; convert a GGUF file with "
                               "convert_gguf_to_safetensors first.")
    if not info.has_tokenizer:
        raise ModelFormatError("The model directory has no tokenizer files.")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = _device(device, torch)
    torch_dtype = _dtype(dtype, torch)
    directory = info.path
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
    # transformers renamed torch_dtype to dtype in 4.56.
    dtype_kw = "dtype" if _version(transformers.__version__) >= (4, 56) else "torch_dtype"
    placement = {}
    if quantization != "none":
        placement = {"quantization_config": _quantization_config(quantization, target, torch_dtype, torch),
                     "device_map": {"": target}}  # quantized weights are placed while loading, never moved
    model = AutoModelForCausalLM.from_pretrained(
        directory, use_safetensors=True, trust_remote_code=False, local_files_only=True, **{dtype_kw: torch_dtype},
        **placement,
    )
    if not placement:
        model.to(target)
    model.eval()
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def load_tokenizer(path: Path, *, roots: Iterable[os.PathLike | str] | None = None) -> Any:
    """Only the tokenizer of a safetensors model directory (same checks as load_for_inference)."""
    info = inspect_model(path, roots=roots)
    if info.format != "hf_dir" or not info.has_tokenizer:
        raise ModelFormatError("The model directory has no tokenizer files.")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(info.path, local_files_only=True, trust_remote_code=False)


def _device(device: str, torch: Any) -> Any:
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"Unknown device {device!r}; use cpu, cuda, cuda:N or mps.") from None
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("CUDA was requested but is not available on this machine.")
        if target.index is not None and target.index >= torch.cuda.device_count():
            raise ValueError(f"There is no CUDA device {target.index} on this machine.")
    elif target.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError("MPS was requested but is not available on this machine.")
    elif target.type != "cpu":
        raise ValueError(f"Unsupported device {device!r}; use cpu, cuda, cuda:N or mps.")
    return target


def _quantization_config(kind: str, target: Any, compute_dtype: Any, torch: Any) -> Any:
    if kind not in ("nf4", "int8"):
        raise ValueError(f"Unknown quantization {kind!r}; use none, nf4 or int8.")
    if target.type != "cuda":
        raise ValueError(f"{kind} weights need a CUDA device (bitsandbytes), not {target.type}.")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ValueError(f"{kind} weights need the bitsandbytes package: pip install '.[gpu]'.") from None
    from transformers import BitsAndBytesConfig

    if kind == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = compute_dtype if isinstance(compute_dtype, torch.dtype) else torch.bfloat16
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute)


def _dtype(dtype: Any, torch: Any) -> Any:
    if dtype is None:
        return "auto"
    if isinstance(dtype, torch.dtype):
        return dtype
    name = DTYPE_ALIASES.get(str(dtype).lower())
    if name is None:
        raise ValueError(f"Unknown dtype {dtype!r}; use bf16, fp16 or fp32.")
    return getattr(torch, name)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_loads(path: Path, *, roots: Iterable[os.PathLike | str] | None = None) -> None:
    """Load a safetensors model directory and generate one token greedily: the proof, run in a
    worker, that a model nobody has loaded yet (an upload) is usable before anyone is offered it.
    Raises what load_for_inference raises, and whatever transformers raises for broken weights."""
    import torch

    model, tokenizer = load_for_inference(path, dtype="fp32", roots=roots)
    inputs = tokenizer("Hello", return_tensors="pt")
    with torch.no_grad():
        model.generate(**inputs, max_new_tokens=1, do_sample=False, pad_token_id=tokenizer.pad_token_id)
