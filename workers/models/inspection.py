"""inspect_model: what a model is, from its metadata, without loading its weights."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .errors import ModelFormatError, ModelSafetyError
from .gguf_file import inspect_gguf
from .hf_dir import MAX_LISTED_FILES, PICKLE_SUFFIXES, inspect_hf_dir, refuse_pickle_only
from .info import ModelInfo
from .paths import is_within, real_roots, safe_realpath


def model_format(path: Path) -> str:
    """"hf_dir" or "gguf", from the shape of a resolved path alone: its kind and, for a directory,
    the names at its top (at most MAX_LISTED_FILES looked at). No file is opened, so a web request
    can afford it; `inspect_model`, which reads headers of any size, belongs in a worker.

    Raises ModelSafetyError for a pickle checkpoint (or a directory of only those) and
    ModelFormatError for anything that is neither a directory nor a .gguf file."""
    if path.is_dir():
        names = set()
        with os.scandir(path) as entries:
            for entry in entries:
                names.add(entry.name)
                if len(names) > MAX_LISTED_FILES:
                    raise ModelFormatError(f"The model directory holds more than {MAX_LISTED_FILES} files.")
        refuse_pickle_only(names)
        return "hf_dir"
    suffix = path.suffix.lower()
    if suffix == ".gguf":
        return "gguf"
    if suffix in PICKLE_SUFFIXES:
        raise ModelSafetyError(
            f"{path.name} is a pickle checkpoint, which can run code when loaded: pickle checkpoints are refused; "
            "convert to safetensors."
        )
    if suffix == ".safetensors":
        raise ModelFormatError("A lone .safetensors file is not a model: give its directory, with its config.json.")
    raise ModelFormatError(f"{path.name} is neither a Hugging Face model directory nor a .gguf file.")


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
    if model_format(real) == "hf_dir":
        return inspect_hf_dir(real, allowed or [real])
    return inspect_gguf(real)
