"""Which layers get LoRA adapters: from the safetensors headers before launch, on the loaded model at
setup.

A layer is named by its leaf name ("q_proj"): PEFT matches a target against the end of each
module path, so one leaf name covers that projection in every decoder block. Only layers inside
the decoder blocks (`...layers.<N>....`) count: embeddings and lm_head are never adapted.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workers.models import ModelFormatError, inspect_model
from workers.models.hf_dir import weight_files
from workers.models.safetensors_header import read_safetensors_header

from .config import ConfigError, TrainConfig

# A decoder block in the module path: model.layers.3. (Llama, Qwen, Mistral ...), transformer.h.3.
# (GPT-2, Falcon), gpt_neox.layers.3., blocks.3., encoder.layer.3.
_BLOCK = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.\d+\.")
# A module path segment that is an attention block: self_attn, attn, attention, self_attention.
_ATTENTION = re.compile(r"(?:^|\.)[a-z_]*att(?:n|ention)[a-z_]*\.", re.IGNORECASE)


def target_module_names(model_dir: Path, *, roots: Iterable[os.PathLike | str] | None = None) -> set[str]:
    """The leaf names of the 2-D weight layers in the decoder blocks of a safetensors model directory,
    e.g. {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}.

    Reads the directory's safetensors headers only (no weights, no torch). The directory passes
    inspect_model's checks first. Raises ModelSafetyError / ModelFormatError as inspect_model does
    (ModelFormatError also for a GGUF file: convert it first).
    """
    info = inspect_model(Path(model_dir), roots=roots)
    if info.format != "hf_dir":
        raise ModelFormatError("Target layers are read from a safetensors directory; convert the GGUF file first.")
    top = {f["name"] for f in info.files if "/" not in f["name"]}
    names: set[str] = set()
    for path in weight_files(Path(info.path), top):
        for tensor, shape in read_safetensors_header(path).shapes.items():
            module, _, kind = tensor.rpartition(".")
            if kind == "weight" and len(shape) == 2 and _BLOCK.search(module + "."):
                names.add(module.rpartition(".")[2])
    return names


def check_target_modules(config: TrainConfig, model_dir: Path, *,
                         roots: Iterable[os.PathLike | str] | None = None) -> None:
    """Before launch: raise ConfigError("target_modules", ...) if an explicit list names a layer the
    model's decoder blocks do not have (presets always resolve). Reads headers only."""
    if isinstance(config.target_modules, str):
        return
    available = target_module_names(model_dir, roots=roots)
    _check_names(config.target_modules, available)


def resolve_target_modules(model: Any, target_modules: str | list[str]) -> list[str]:
    """The PEFT target list for a loaded model: leaf names of its decoder-block Linear layers.

    "attention": the Linear layers inside an attention block; when one of their leaf names is also
    used outside attention (GPT-2's c_proj), the full module paths instead, so the MLP is not
    adapted by accident. "all_linear": every Linear layer in the decoder blocks. A list: checked,
    returned sorted. Raises ConfigError("target_modules", ...) when nothing matches.
    """
    import torch

    linear = [name for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and _BLOCK.search(name + ".")]
    return _select_targets(linear, target_modules)


def _select_targets(linear: list[str], target_modules: str | list[str]) -> list[str]:
    """The PEFT target list from the module paths of the decoder blocks' linear layers."""
    leaves = {name.rpartition(".")[2] for name in linear}
    if target_modules == "all_linear":
        targets = sorted(leaves)
    elif target_modules == "attention":
        inside = [name for name in linear if _ATTENTION.search(name.rpartition(".")[0] + ".")]
        outside_leaves = {name.rpartition(".")[2] for name in linear if name not in inside}
        inside_leaves = {name.rpartition(".")[2] for name in inside}
        targets = sorted(inside if inside_leaves & outside_leaves else inside_leaves)
    else:
        _check_names(target_modules, leaves)
        targets = sorted(set(target_modules))
    if not targets:
        raise ConfigError("target_modules", f"{target_modules!r} matches no Linear layer of this model.")
    return targets


def lora_trainable_parameters(model_dir: Path, config: TrainConfig, *,
                              roots: Iterable[os.PathLike | str] | None = None) -> int:
    """The parameters a LoRA run of `config` trains on this safetensors directory, exactly as PEFT counts
    them, from the headers only (no torch, no weights): the same target resolution as add_lora, PEFT's
    rule for matching a target (the module path, or its end after a dot), and r x (in + out) per
    adapted layer (A is r x in, B is out x r; bias="none"); a classifier adds its head (hidden x classes)."""
    info = inspect_model(Path(model_dir), roots=roots)
    if info.format != "hf_dir":
        raise ModelFormatError("Trainable parameters are counted on a safetensors directory; convert the GGUF first.")
    top = {f["name"] for f in info.files if "/" not in f["name"]}
    shapes: dict[str, list[int]] = {}
    for path in weight_files(Path(info.path), top):
        for tensor, shape in read_safetensors_header(path).shapes.items():
            module, _, kind = tensor.rpartition(".")
            if kind == "weight" and len(shape) == 2:
                shapes[module] = shape
    # A 2-D weight in a decoder block is a Linear layer's (embeddings and lm_head are outside the blocks).
    targets = _select_targets([m for m in shapes if _BLOCK.search(m + ".")], config.target_modules)
    adapted = [m for m in shapes if any(m == t or m.endswith("." + t) for t in targets)]
    lora = sum(config.lora_r * (shapes[m][0] + shapes[m][1]) for m in adapted)
    if config.method == "classify" and info.hidden_size:  # the new head, trained whole (modules_to_save, no bias)
        lora += info.hidden_size * len(config.class_labels)
    return lora


def add_lora(model: Any, config: TrainConfig, *, modules_to_save: list[str] | None = None) -> Any:
    """Wrap `model` in a PEFT LoRA model (base weights frozen, adapters trainable). `modules_to_save`:
    modules trained fully and saved with the adapter (a classifier head). The LoRA init draws from
    torch's RNG: seed before calling for a reproducible start."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=resolve_target_modules(model, config.target_modules), bias="none",
                      task_type="CAUSAL_LM", modules_to_save=modules_to_save or None)
    with warnings.catch_warnings():
        # peft 0.21 reads transformers 5's deprecated `is_gradient_checkpointing`: noise in every job log.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, lora)


def _check_names(requested: list[str], available: set[str]) -> None:
    missing = [name for name in requested if name not in available]
    if missing:
        raise ConfigError("target_modules", f"the model has no layer named {', '.join(missing)}; "
                                            f"it has {', '.join(sorted(available)) or 'none'}.")


def decoder(model: Any) -> Any:
    """The transformer body under the LM head of a (PEFT-wrapped) causal LM; the LoRA layers are inside it."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return causal_lm.get_decoder()


def output_layer(model: Any) -> Any:
    """The LM head (hidden x vocabulary) of a (PEFT-wrapped) causal LM."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return causal_lm.get_output_embeddings()
