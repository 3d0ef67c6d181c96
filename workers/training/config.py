"""TrainConfig: the one documented set of hyperparameters of a LoRA fine-tune.

It is stored on the job row (`as_dict`), read back (`from_dict`) and written beside every
adapter (workbench_train_config.json). `validate` checks ranges and enum values only; whether a
custom `target_modules` list names layers the model has is checked against the model by
`check_target_modules` (lora.py), which reads the safetensors headers only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("prompt_response", "chat")
LOSS_ON = ("response", "all")
TARGET_PRESETS = ("attention", "all_linear")
LR_SCHEDULERS = ("linear", "cosine", "constant")
PRECISIONS = ("auto", "bf16", "fp32")


class ConfigError(ValueError):
    """A config value is out of range, of the wrong type or unknown. `.field` names it (the key for an
    unknown key), `.message` says what is wrong in words for the user."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class TrainConfig:
    method: str = "sft"                    # a module of methods/: "sft" (supervised) | "dpo" (preference pairs: prompt, chosen, rejected)
    dpo_beta: float = 0.1                  # dpo: how far the policy may move from the reference (the base)
    # data
    format: str = "prompt_response"       # "prompt_response" (rows: prompt, response) or "chat" (rows: messages)
    prompt_template: str = "{prompt}"      # prompt_response: {prompt} is replaced by the row's prompt -> the user turn
    loss_on: str = "response"              # "response": only the responses / assistant turns are trained; "all": all
    # LoRA
    lora_r: int = 16                       # rank of the low-rank update
    lora_alpha: int = 32                   # scaling numerator: the update is scaled by alpha / r
    lora_dropout: float = 0.05             # dropout on the LoRA input, 0 <= p < 1
    # "attention" (the attention projections), "all_linear" (every Linear in the decoder blocks, never
    # lm_head or the embeddings) or a list of leaf module names such as ["q_proj", "v_proj"].
    target_modules: str | list[str] = "attention"
    # optimisation
    learning_rate: float = 2e-4            # peak learning rate of AdamW
    lr_scheduler: str = "cosine"           # "linear" | "cosine" | "constant" (each after warmup_steps of linear warmup)
    warmup_steps: int = 0                  # optimizer steps of linear warmup from 0
    epochs: int = 1                        # passes over the training rows (ignored when max_steps is set)
    max_steps: int | None = None           # optimizer steps to run; overrides epochs when set
    batch_size: int = 8                    # rows (packed sequences, or examples without packing) per micro-batch
    grad_accum: int = 1                    # micro-batches per optimizer step
    max_seq_len: int = 512                 # tokens per row; longer examples are truncated
    packing: bool = True                   # pack several examples into one row (they never attend to each other); sft only
    weight_decay: float = 0.0              # AdamW decoupled weight decay on the LoRA weights
    # evaluation
    eval_every: int | None = None          # optimizer steps between evaluations; None = only at the end
    eval_at_start: bool = True             # evaluate the base model before step 1: the baseline of loss and samples
    early_stopping_patience: int = 0       # evaluations without a better eval_loss before stopping; 0 = off
    sample_prompts: list[str] = field(default_factory=list)  # generated greedily at every evaluation
    sample_max_new_tokens: int = 48        # generation length cap for the sample prompts
    # run
    seed: int = 42                         # seeds LoRA init, dropout and the per-epoch shuffle
    precision: str = "auto"                # "auto" (bf16 on CUDA with bf16 support, else fp32) | "bf16" | "fp32"
    gradient_checkpointing: bool = False   # recompute activations in backward: less memory, about 30% slower
    checkpoint_every: int = 50             # optimizer steps between checkpoints; one is also written at the end
    device: str = "auto"                   # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:N" | "mps"

    def validate(self) -> None:
        """Raise ConfigError (naming the field) for the first value out of range or of an unknown kind."""
        from .methods import METHODS

        _choice(self, "method", tuple(METHODS))
        _number(self, "dpo_beta")
        if not 0 < self.dpo_beta <= 10:
            raise ConfigError("dpo_beta", "must be greater than 0 and at most 10.")
        METHODS[self.method].check(self)  # what the method cannot take (dpo: the chat format)
        _choice(self, "format", FORMATS)
        _choice(self, "loss_on", LOSS_ON)
        _choice(self, "lr_scheduler", LR_SCHEDULERS)
        _choice(self, "precision", PRECISIONS)
        _text(self, "prompt_template")
        if self.format == "prompt_response" and "{prompt}" not in self.prompt_template:
            raise ConfigError("prompt_template", "must contain {prompt}, where the row's prompt goes.")
        _integer(self, "lora_r", 1)
        _integer(self, "lora_alpha", 1)
        _number(self, "lora_dropout")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError("lora_dropout", "must be at least 0 and below 1.")
        _targets(self.target_modules)
        _number(self, "learning_rate")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", "must be greater than 0.")
        _integer(self, "warmup_steps", 0)
        _integer(self, "epochs", 1)
        _integer(self, "max_steps", 1, optional=True)
        _integer(self, "batch_size", 1)
        _integer(self, "grad_accum", 1)
        _integer(self, "max_seq_len", 8)
        _boolean(self, "packing")
        _number(self, "weight_decay")
        if self.weight_decay < 0:
            raise ConfigError("weight_decay", "must be at least 0.")
        _integer(self, "eval_every", 1, optional=True)
        _integer(self, "early_stopping_patience", 0)
        _boolean(self, "eval_at_start")
        if not isinstance(self.sample_prompts, list) or not all(isinstance(p, str) and p for p in self.sample_prompts):
            raise ConfigError("sample_prompts", "must be a list of non-empty strings.")
        _integer(self, "sample_max_new_tokens", 1)
        _integer(self, "seed", 0)
        _boolean(self, "gradient_checkpointing")
        _integer(self, "checkpoint_every", 1)
        _text(self, "device")
        kind, _, index = self.device.partition(":")
        if kind not in ("auto", "cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
            raise ConfigError("device", "must be auto, cpu, cuda, cuda:N or mps.")

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict of every field (lists copied)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """A config from `data`; missing keys take their defaults. Raises ConfigError naming the first
        unknown key. Values are not validated here: call validate()."""
        if not isinstance(data, dict):
            raise ConfigError("config", "must be a JSON object.")
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known:
                raise ConfigError(str(key), "is not a training option.")
        return cls(**data)


def _choice(config: TrainConfig, name: str, allowed: tuple[str, ...]) -> None:
    if getattr(config, name) not in allowed:
        raise ConfigError(name, f"must be one of {', '.join(allowed)}.")


def _text(config: TrainConfig, name: str) -> None:
    if not isinstance(getattr(config, name), str):
        raise ConfigError(name, "must be a string.")


def _boolean(config: TrainConfig, name: str) -> None:
    if not isinstance(getattr(config, name), bool):
        raise ConfigError(name, "must be true or false.")


def _integer(config: TrainConfig, name: str, minimum: int, *, optional: bool = False) -> None:
    value = getattr(config, name)
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(name, "must be a whole number" + (" or empty." if optional else "."))
    if value < minimum:
        raise ConfigError(name, f"must be at least {minimum}.")


def _number(config: TrainConfig, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:  # NaN != NaN
        raise ConfigError(name, "must be a number.")


def _targets(value: Any) -> None:
    if isinstance(value, str):
        if value not in TARGET_PRESETS:
            raise ConfigError("target_modules", f"must be {' or '.join(TARGET_PRESETS)}, or a list of module names.")
        return
    if not isinstance(value, list) or not value:
        raise ConfigError("target_modules", "must be a preset name or a non-empty list of module names.")
    for name in value:
        # Leaf names such as "q_proj": no dots or patterns, so they match the same layers in every block.
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError("target_modules", f"{name!r} is not a module name (like q_proj).")
