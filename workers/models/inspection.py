"""inspect_model: what a model is, from its metadata, without loading its weights."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .errors import ModelFormatError, ModelSafetyError
from .gguf_file import inspect_gguf
from .hf_dir import PICKLE_SUFFIXES, inspect_hf_dir
from .info import ModelInfo
from .paths import is_within, real_roots, safe_realpath


def inspect_model(path: Path, *, roots: Iterable[os.PathLike | str] | None = None) -> ModelInfo:
    """Inspect a Hugging Face safetensors directory or a single .gguf file.

    Reads config.json, tokenizer_config.json / chat_template.jinja, README front matter and
    LICENSE, and the JSON headers of the safetensors weights (for a directory); the GGUF
    key-values and tensor table (for a .gguf). Never imports, executes or unpickles anything
    from the model, and never reads tensor data.

    `path` should come from `resolve_model_path`. Every file read must resolve inside the
    model directory itself, or inside `roots` when given (a Hugging Face cache snapshot links
    its files to ../../blobs, so pass the roots for those).

    Raises ModelSafetyError: pickle-only checkpoints, custom code (`auto_map`; trust_remote_code
    is never enabled), a path or a file inside it that resolves outside the allowed roots.
    ModelFormatError (a subclass): no config.json, no weights, a corrupted safetensors header,
    a damaged GGUF, an architecture or model type transformers cannot load.
    """
    real = safe_realpath(path)
    allowed = real_roots(roots) if roots is not None else None
    if real is None or (allowed is not None and not any(is_within(real, root) for root in allowed)):
        raise ModelSafetyError(f"{path} resolves outside the configured model roots.")
    if not real.exists():
        raise ModelSafetyError(f"The model path {str(path)!r} does not exist.")
    if real.is_dir():
        return inspect_hf_dir(real, allowed or [real])
    suffix = real.suffix.lower()
    if suffix == ".gguf":
        return inspect_gguf(real)
    if suffix in PICKLE_SUFFIXES:
        raise ModelSafetyError(
            f"{real.name} is a pickle checkpoint, which can run code when loaded: pickle checkpoints are refused; "
            "convert to safetensors."
        )
    if suffix == ".safetensors":
        raise ModelFormatError("A lone .safetensors file is not a model: give its directory, with its config.json.")
    raise ModelFormatError(f"{real.name} is neither a Hugging Face model directory nor a .gguf file.")
