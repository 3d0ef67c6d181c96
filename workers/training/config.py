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

# Each field's metadata is the one description of the option (the launch form is generated from
# it, `validate` reads its ranges and choices): label and help (for people), section (the launch
# form's fieldset; None: not on the form), choices ((value, label) pairs), min / max (with
# min_exclusive / max_exclusive for open bounds). See `option` and `form_fields`.
SECTIONS = ("Inputs", "Data format", "LoRA", "Optimisation", "Evaluation and checkpoints")


def option(default: Any = dataclasses.MISSING, *, label: str, help: str = "", section: str | None = None,
           choices: tuple[tuple[str, str], ...] | None = None, min: float | None = None, max: float | None = None,
           min_exclusive: bool = False, max_exclusive: bool = False, default_factory: Any = dataclasses.MISSING) -> Any:
    """A TrainConfig field with its metadata (plain data: the engine needs no form library)."""
    assert section is None or section in SECTIONS, section
    metadata = {"label": label, "help": help, "section": section, "choices": choices, "min": min, "max": max,
                "min_exclusive": min_exclusive, "max_exclusive": max_exclusive}
    return field(default=default, default_factory=default_factory, metadata=metadata)


METHOD_CHOICES = (("sft", "supervised (SFT): learn the responses"),
                  ("dpo", "preference (DPO): prefer the chosen over the rejected response"),
                  ("classify", "classifier: predict each row's label from its prompt"))
TARGET_PRESET_CHOICES = (("attention", "attention projections"), ("all_linear", "all linear layers"))
FORMAT_CHOICES = (("prompt_response", "prompt / response"), ("chat", "chat messages"))
FORMATS = tuple(value for value, _ in FORMAT_CHOICES)
FUSED_LOSS_CHOICES = (("auto", "auto (Liger on CUDA when installed, else the full logits)"),
                      ("off", "off (the full logits)"),
                      ("liger", "Liger-kernel fused linear + cross-entropy (CUDA)"),
                      ("chunked", "chunked linear + cross-entropy (any device)"))


class ConfigError(ValueError):
    """A config value is out of range, of the wrong type or unknown. `.field` names it (the key for an
    unknown key), `.message` says what is wrong in words for the user."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass
class TrainConfig:
    # a module of methods/: "sft" (supervised) | "dpo" (preference pairs: prompt, chosen, rejected)
    method: str = option("sft", label="Method", section="Inputs", choices=METHOD_CHOICES,
                         help="DPO needs rows with a prompt, a response (the chosen one) and a “rejected” column, "
                              "as annotation and comparison exports write them.")
    # dpo: how far the policy may move from the reference (the base)
    dpo_beta: float = option(0.1, label="DPO beta", section="Inputs", min=0, min_exclusive=True, max=10,
                             help="DPO only: how far the model may move from the base.")
    # classify: where each row's class is: "label" (the row's label column, what a classification
    # campaign's export writes) or a metadata key such as "annotation.topic"
    label_column: str = option("label", label="Label column", section="Inputs",
                               help="Classifier only: the row's label, or a metadata key holding the class.")
    # classify: the classes, in the order of the head's outputs; the launch fills it from the version's
    # labels (sorted). Written beside the adapter, it is how the served classifier names its outputs.
    class_labels: list[str] = option(label="Classes", default_factory=list)
    # classify: weigh each training row's loss by n / (classes x rows of its class), so rare classes count
    # as much as common ones
    class_weights: bool = option(False, label="Class weights (inverse frequency)", section="Inputs",
                                 help="Classifier only: rare classes weigh as much as common ones in the loss.")
    # classify: each row has a list of classes (none, one or several: what a multi-label annotation field
    # exports) and each class is a yes/no of its own (sigmoid, binary cross-entropy) instead of one of many
    multi_label: bool = option(False, label="Multi-label", section="Inputs",
                               help="Classifier only: each row has a list of classes (none, one or several). "
                                    "The launch sets it when the label column holds lists.")
    # data
    # "prompt_response" (rows: prompt, response) or "chat" (rows: messages)
    format: str = option("prompt_response", label="Format", section="Data format",
                         choices=FORMAT_CHOICES)
    # prompt_response: {prompt} is replaced by the row's prompt -> the user turn
    prompt_template: str = option("{prompt}", label="Prompt template", section="Data format",
                                  help="prompt / response only: {prompt} is replaced by the row's prompt.")
    # "response": only the responses / assistant turns are trained; "all": all
    loss_on: str = option("response", label="Loss on", section="Data format",
                          choices=(("response", "responses only (prompt masked)"), ("all", "every token")))
    # LoRA
    lora_r: int = option(16, label="LoRA rank", section="LoRA", min=1)  # rank of the low-rank update
    lora_alpha: int = option(32, label="LoRA alpha", section="LoRA", min=1)  # the update is scaled by alpha / r
    lora_dropout: float = option(0.05, label="LoRA dropout", section="LoRA", min=0, max=1,
                                 max_exclusive=True)  # dropout on the LoRA input
    # "attention" (the attention projections), "all_linear" (every Linear in the decoder blocks, never
    # lm_head or the embeddings) or a list of leaf module names such as ["q_proj", "v_proj"].
    target_modules: str | list[str] = option("attention", label="Target modules", section="LoRA",
                                             choices=TARGET_PRESET_CHOICES,
                                             help="Comma-separated module names, e.g. q_proj, v_proj.")
    # optimisation
    learning_rate: float = option(2e-4, label="Learning rate", section="Optimisation", min=0,
                                  min_exclusive=True)  # peak learning rate of AdamW
    # each after warmup_steps of linear warmup
    lr_scheduler: str = option("cosine", label="Scheduler", section="Optimisation",
                               choices=(("cosine", "cosine"), ("linear", "linear"), ("constant", "constant")))
    warmup_steps: int = option(0, label="Warm-up steps", section="Optimisation", min=0)  # linear warmup from 0
    # passes over the training rows (ignored when max_steps is set)
    epochs: int = option(1, label="Epochs", section="Optimisation", min=1)
    max_steps: int | None = option(None, label="Max steps", section="Optimisation", min=1,
                                   help="Overrides epochs when set.")  # optimizer steps to run
    # rows (packed sequences, or examples without packing) per micro-batch
    batch_size: int = option(8, label="Batch size", section="Optimisation", min=1)
    grad_accum: int = option(1, label="Gradient accumulation", section="Optimisation",
                             min=1)  # micro-batches per optimizer step
    # tokens per row; longer examples are truncated
    max_seq_len: int = option(512, label="Max sequence length", section="Data format", min=8)
    # pack several examples into one row (they never attend to each other); sft only
    packing: bool = option(True, label="Packing", section="Data format",
                           help="Several examples per row; they never attend to each other.")
    # AdamW decoupled weight decay on the LoRA weights
    weight_decay: float = option(0.0, label="Weight decay", section="Optimisation", min=0)
    # evaluation
    # optimizer steps between evaluations; None = only at the end
    eval_every: int | None = option(None, label="Evaluate every N steps", section="Evaluation and checkpoints",
                                    min=1, help="Empty: only at the end.")
    # evaluate the base model before step 1: the baseline of loss and samples
    eval_at_start: bool = option(True, label="Evaluate the base model first", section="Evaluation and checkpoints",
                                 help="Step 0 on the charts and the base model's samples.")
    # evaluations without a better eval_loss (classify: eval macro-F1) before stopping; 0 = off
    early_stopping_patience: int = option(0, label="Early-stopping patience", section="Evaluation and checkpoints",
                                          min=0, help="Evaluations without improvement before stopping; 0 is off.")
    # generated greedily at every evaluation
    sample_prompts: list[str] = option(label="Sample prompts", default_factory=list)
    # generation length cap for the sample prompts
    sample_max_new_tokens: int = option(48, label="Sample length (new tokens)", min=1)
    # run
    # seeds LoRA init, dropout and the per-epoch shuffle
    seed: int = option(42, label="Seed", section="Evaluation and checkpoints", min=0)
    # "auto" (bf16 on CUDA with bf16 support, else fp32) | "bf16" | "fp32"
    precision: str = option("auto", label="Precision", section="Optimisation",
                            choices=(("auto", "auto (bf16 on capable GPUs, fp32 on CPU)"), ("bf16", "bf16"),
                                     ("fp32", "fp32")))
    # the frozen base's weights: as `precision`, or quantized by bitsandbytes on CUDA (QLoRA: NF4 with
    # double quantization; or 8-bit); the LoRA weights stay in fp32 and compute in `precision`
    quantization: str = option("none", label="Base weights", section="Optimisation",
                               choices=(("none", "as the precision"),
                                        ("nf4", "4-bit NF4, double quantization (QLoRA, CUDA only)"),
                                        ("int8", "8-bit (CUDA only)")),
                               help="Quantizing the frozen base cuts its memory about 4x (4-bit) or 2x (8-bit) "
                                    "against bf16; it needs a CUDA GPU and the bitsandbytes package.")
    # recompute activations in backward: less memory, about 30% slower
    gradient_checkpointing: bool = option(False, label="Gradient checkpointing", section="Optimisation")
    # torch.compile of each decoder block (dynamic shapes: packed rows of any length reuse one graph);
    # off by default: on this project's CPU it measured slower (bench/train_step_options.py)
    compile: bool = option(False, label="Compile the model (torch.compile)", section="Optimisation",
                           help="Compiles each decoder block once at the start (a minute or more); faster "
                                "steps on some machines, slower on others (see bench/README.md).")
    # the loss without the [tokens x vocabulary] logits (sft): Liger-kernel's fused linear + cross-entropy
    # on CUDA, or chunks of the hidden states through the output layer, each recomputed in backward
    fused_loss: str = option("auto", label="Fused loss", section="Optimisation", choices=FUSED_LOSS_CHOICES,
                             help="Saves the memory of the full logits (vocabulary x tokens), which on small "
                                  "models is most of a step's activations. Liger needs a CUDA GPU.")
    # optimizer steps between checkpoints; one is also written at the end
    checkpoint_every: int = option(50, label="Checkpoint every N steps", section="Evaluation and checkpoints", min=1)
    # "auto" (cuda, then mps, then cpu) | "cpu" | "cuda" | "cuda:N" | "mps"
    device: str = option("auto", label="Device")
    # data-parallel processes (distributed.py: torchrun, one per GPU; gloo processes on CPU). batch_size
    # and grad_accum stay the global batch: each process trains its share of every micro-batch.
    devices: int = option(1, label="Devices", section="Optimisation", min=1,
                          help="Data-parallel processes, one per GPU (on CPU, one per core): each takes its share "
                               "of every batch, so the batch size and the loss curve stay those of one device.")
    # machines (distributed.py: one torchrun node each, `devices` processes per node, c10d rendezvous).
    # The global batch is still batch_size x grad_accum, shared by nodes x devices processes.
    nodes: int = option(1, label="Machines", section="Optimisation", min=1, max=8,
                        help="Machines the job runs on, each with `devices` processes: one gpu worker per machine "
                             "joins the run. Only where the deployment allows jobs across machines.")

    def validate(self) -> None:
        """Raise ConfigError (naming the field) for the first value out of range or of an unknown kind;
        the ranges and choices are the fields' metadata, what a method cannot take is its module's."""
        from .methods import METHODS

        _choice(self, "method", tuple(METHODS))  # the registry: a method is its module
        _number(self, "dpo_beta")
        _text(self, "label_column")
        if not isinstance(self.class_labels, list) or not all(isinstance(c, str) and c for c in self.class_labels):
            raise ConfigError("class_labels", "must be a list of non-empty strings.")
        _boolean(self, "class_weights")
        _boolean(self, "multi_label")
        METHODS[self.method].check(self)  # what the method cannot take (dpo: the chat format)
        _choice(self, "format")
        _choice(self, "loss_on")
        _choice(self, "lr_scheduler")
        _choice(self, "precision")
        _choice(self, "quantization")
        _text(self, "prompt_template")
        if self.format == "prompt_response" and "{prompt}" not in self.prompt_template:
            raise ConfigError("prompt_template", "must contain {prompt}, where the row's prompt goes.")
        _integer(self, "lora_r")
        _integer(self, "lora_alpha")
        _number(self, "lora_dropout")
        _targets(self.target_modules)
        _number(self, "learning_rate")
        _integer(self, "warmup_steps")
        _integer(self, "epochs")
        _integer(self, "max_steps")
        _integer(self, "batch_size")
        _integer(self, "grad_accum")
        _integer(self, "max_seq_len")
        _boolean(self, "packing")
        _number(self, "weight_decay")
        _integer(self, "eval_every")
        _integer(self, "early_stopping_patience")
        _boolean(self, "eval_at_start")
        if not isinstance(self.sample_prompts, list) or not all(isinstance(p, str) and p for p in self.sample_prompts):
            raise ConfigError("sample_prompts", "must be a list of non-empty strings.")
        _integer(self, "sample_max_new_tokens")
        _integer(self, "seed")
        _boolean(self, "gradient_checkpointing")
        _boolean(self, "compile")
        _choice(self, "fused_loss")
        _integer(self, "checkpoint_every")
        _text(self, "device")
        kind, _, index = self.device.partition(":")
        if kind not in ("auto", "cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
            raise ConfigError("device", "must be auto, cpu, cuda, cuda:N or mps.")
        if self.quantization != "none" and kind in ("cpu", "mps"):
            raise ConfigError("quantization", f"{self.quantization} base weights need a CUDA GPU (bitsandbytes), "
                                              f"not device {self.device}; choose none.")
        if self.fused_loss == "liger" and kind in ("cpu", "mps"):
            raise ConfigError("fused_loss", f"liger needs a CUDA GPU, not device {self.device}; "
                                            "choose chunked, auto or off.")
        _integer(self, "devices")
        if self.devices > 1:
            if index or kind == "mps":
                raise ConfigError("devices", f"more than one device needs device auto, cpu or cuda, not {self.device}.")
            if self.devices > self.batch_size:
                raise ConfigError("devices", f"at most the batch size ({self.batch_size}): each device takes its "
                                             "share of every batch.")
        _integer(self, "nodes")
        if self.nodes > 1:
            if index or kind == "mps":
                raise ConfigError("nodes", f"more than one machine needs device auto, cpu or cuda, not {self.device}.")
            if self.nodes * self.devices > self.batch_size:
                raise ConfigError("nodes", f"machines x devices at most the batch size ({self.batch_size}): each "
                                           "process takes its share of every batch.")

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


def metadata(name: str, config_class: type = TrainConfig) -> dict[str, Any]:
    """The metadata of the field `name` (see `option`)."""
    return {f.name: f.metadata for f in dataclasses.fields(config_class)}[name]


def choice_values(name: str, config_class: type = TrainConfig) -> tuple[str, ...]:
    return tuple(value for value, _ in metadata(name, config_class)["choices"])


def range_text(meta: dict[str, Any]) -> str:
    """The field's range in words ("at least 0 and below 1"); empty when it has none."""
    def number(value: float) -> str:
        return f"{value:g}"

    parts = []
    if meta.get("min") is not None:
        parts.append(("greater than " if meta.get("min_exclusive") else "at least ") + number(meta["min"]))
    if meta.get("max") is not None:
        parts.append(("below " if meta.get("max_exclusive") else "at most ") + number(meta["max"]))
    return " and ".join(parts)


def in_range(value: float, meta: dict[str, Any]) -> bool:
    low, high = meta.get("min"), meta.get("max")
    if low is not None and (value <= low if meta.get("min_exclusive") else value < low):
        return False
    return not (high is not None and (value >= high if meta.get("max_exclusive") else value > high))


def _optional(name: str) -> bool:
    """Whether the field may be None (its annotation says `| None`)."""
    return "None" in str({f.name: f.type for f in dataclasses.fields(TrainConfig)}[name])


def _choice(config: TrainConfig, name: str, allowed: tuple[str, ...] | None = None) -> None:
    allowed = allowed or choice_values(name)
    if getattr(config, name) not in allowed:
        raise ConfigError(name, f"must be one of {', '.join(allowed)}.")


def _text(config: TrainConfig, name: str) -> None:
    if not isinstance(getattr(config, name), str):
        raise ConfigError(name, "must be a string.")


def _boolean(config: TrainConfig, name: str) -> None:
    if not isinstance(getattr(config, name), bool):
        raise ConfigError(name, "must be true or false.")


def _integer(config: TrainConfig, name: str) -> None:
    value, optional = getattr(config, name), _optional(name)
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(name, "must be a whole number" + (" or empty." if optional else "."))
    _range(name, value)


def _number(config: TrainConfig, name: str) -> None:
    value = getattr(config, name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:  # NaN != NaN
        raise ConfigError(name, "must be a number.")
    _range(name, value)


def _range(name: str, value: float) -> None:
    meta = metadata(name)
    if not in_range(value, meta):
        raise ConfigError(name, f"must be {range_text(meta)}.")


def _targets(value: Any) -> None:
    presets = choice_values("target_modules")
    if isinstance(value, str):
        if value not in presets:
            raise ConfigError("target_modules", f"must be {' or '.join(presets)}, or a list of module names.")
        return
    if not isinstance(value, list) or not value:
        raise ConfigError("target_modules", "must be a preset name or a non-empty list of module names.")
    for name in value:
        # Leaf names such as "q_proj": no dots or patterns, so they match the same layers in every block.
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError("target_modules", f"{name!r} is not a module name (like q_proj).")
