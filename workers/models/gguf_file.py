"""Inspect a single .gguf file from its key-value metadata and tensor table.

`gguf.GGUFReader` memory-maps the file and parses the header; tensor data is never read or
dequantized here. (Parsing a tokenizer of ~50k tokens takes a few seconds on a slow core:
the reader builds one small array per token string.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ModelFormatError
from .info import ModelInfo

GGUF_MAGIC = b"GGUF"
# llama.cpp architecture names transformers knows under another name (mirrors its
# load_gguf_checkpoint); a name not listed is used as it is.
ARCH_RENAMES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
                "t5encoder": "t5"}


def transformers_gguf_architectures() -> set[str]:
    """The GGUF architectures transformers can dequantize and load (imports transformers, no torch)."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    return set(GGUF_CONFIG_MAPPING) - {"general", "tokenizer"}


def inspect_gguf(path: Path) -> ModelInfo:
    """ModelInfo for a .gguf file. Raises ModelFormatError if it is not a readable GGUF file or
    its architecture is one transformers cannot load."""
    with path.open("rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            raise ModelFormatError(f"{path.name} is not a GGUF file (bad magic number).")
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, LlamaFileType

    try:
        reader = GGUFReader(path, "r")
    except Exception as exc:  # the reader raises ValueError, struct / numpy errors on a damaged file
        raise ModelFormatError(f"{path.name} is not a readable GGUF file ({type(exc).__name__}).") from None
    fields = reader.fields

    def value(key: str) -> Any:
        field = fields.get(key)
        if field is None or not field.types or field.types[0] == GGUFValueType.ARRAY or not field.data:
            return None
        part = field.parts[field.data[0]]
        if field.types[0] == GGUFValueType.STRING:
            return bytes(part).decode("utf-8", errors="replace")
        return part[0].item()

    arch = value("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFormatError(f"{path.name} has no general.architecture.")
    model_type = ARCH_RENAMES.get(arch, arch)
    supported = transformers_gguf_architectures()
    if arch not in supported and model_type not in supported:
        raise ModelFormatError(
            f"GGUF architecture {arch!r} cannot be loaded by transformers (supported: {', '.join(sorted(supported))})."
        )

    size = path.stat().st_size
    elements_by_type: dict[str, int] = {}
    for tensor in reader.tensors:
        if int(tensor.data_offset) + int(tensor.n_bytes) > size:
            raise ModelFormatError(f"{path.name} is truncated: tensor data lies past the end of the file.")
        name = GGMLQuantizationType(tensor.tensor_type).name
        elements_by_type[name] = elements_by_type.get(name, 0) + int(tensor.n_elements)
    file_type = value("general.file_type")
    try:
        quantization = LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        quantization = max(elements_by_type, key=elements_by_type.get) if elements_by_type else None

    hidden = value(f"{arch}.embedding_length")
    heads = value(f"{arch}.attention.head_count")
    tokens = fields.get("tokenizer.ggml.tokens")
    licence = value("general.license") or value("general.license.name")
    return ModelInfo(
        format="gguf",
        path=str(path),
        architecture=arch,
        model_type=model_type,
        parameters=sum(elements_by_type.values()),
        dtype=quantization,
        context_length=value(f"{arch}.context_length"),
        vocab_size=value(f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else None),
        hidden_size=hidden,
        layers=value(f"{arch}.block_count"),
        heads=heads,
        kv_heads=value(f"{arch}.attention.head_count_kv") or heads,
        head_dim=value(f"{arch}.attention.key_length") or (hidden // heads if hidden and heads else None),
        intermediate_size=value(f"{arch}.feed_forward_length"),
        chat_template=value("tokenizer.chat_template"),
        has_tokenizer=tokens is not None,
        licence=licence,
        quantization=quantization,
        files=[{"name": path.name, "size": size}],
    )
