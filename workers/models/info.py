"""What inspection learns about a model without loading its weights."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelInfo:
    """The facts read from a model's metadata (config, safetensors headers, GGUF key-values).

    Fields that the metadata does not state are None. `as_dict()` is JSON-serializable.
    """

    format: str                        # "hf_dir" (a Hugging Face safetensors directory) or "gguf"
    path: str                          # the inspected directory or file
    architecture: str | None = None    # hf_dir: config "architectures"[0], e.g. "LlamaForCausalLM"; gguf: "llama"
    model_type: str | None = None      # the transformers model type, e.g. "llama"
    parameters: int = 0                # exact count from tensor shapes (tied weights stored once count once)
    dtype: str | None = None           # hf_dir: "bfloat16", "float32", ...; gguf: the file type, e.g. "Q4_1"
    context_length: int | None = None  # max_position_embeddings / <arch>.context_length
    vocab_size: int | None = None
    hidden_size: int | None = None
    layers: int | None = None
    heads: int | None = None
    kv_heads: int | None = None        # key/value heads (grouped-query attention); = heads when not stated
    head_dim: int | None = None
    intermediate_size: int | None = None
    chat_template: str | None = None
    has_tokenizer: bool = False
    licence: str | None = None
    quantization: str | None = None    # gguf only: "Q4_1", "Q8_0", "F16", ...
    files: list[dict[str, Any]] = field(default_factory=list)  # [{"name": ..., "size": bytes}], sorted by name

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
