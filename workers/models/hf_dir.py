"""Inspect a Hugging Face model directory from its JSON files and safetensors headers alone.

Nothing in the directory is imported, executed or unpickled: the only files opened are JSON
files, text files (chat template, README, LICENSE) and the first bytes of .safetensors files.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .errors import ModelFormatError, ModelSafetyError
from .info import ModelInfo
from .paths import is_within, safe_realpath
from .safetensors_header import DTYPE_NAMES, read_safetensors_header

# Files torch.load / pickle would read: refused as weights, never opened (unpickling runs code).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")
# JSON files whose `auto_map` would make transformers import code from the directory.
CODE_BEARING_JSON = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
                     "feature_extractor_config.json", "image_processor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
SINGLE_WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"

MAX_JSON_BYTES = 64 * 1024 * 1024     # tokenizer_config.json with a large added-token table stays well below
MAX_TEXT_BYTES = 1024 * 1024          # chat templates, README front matter, LICENSE first line
MAX_LISTED_FILES = 10_000             # a model directory, not a file system


def list_files(directory: Path, allowed: list[Path]) -> list[dict[str, Any]]:
    """Every file below `directory` (hidden folders such as .cache skipped) with its size.

    Raises ModelSafetyError when a file or folder resolves (through a symlink) outside
    `allowed`: a model directory may not reach out of the model roots.
    """
    files = []
    for current, dirs, names in os.walk(directory, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for entry in [*dirs, *names]:
            full = Path(current, entry)
            real = safe_realpath(full)
            if real is None or not any(is_within(real, root) for root in allowed):
                rel = full.relative_to(directory)
                raise ModelSafetyError(f"{rel} in the model directory links outside the configured model roots.")
            if entry in dirs:
                continue  # os.walk does not descend into symlinked folders; their target was checked
            if real.is_file():
                files.append({"name": str(full.relative_to(directory)), "size": real.stat().st_size})
            if len(files) > MAX_LISTED_FILES:
                raise ModelFormatError(f"The model directory holds more than {MAX_LISTED_FILES} files.")
    return sorted(files, key=lambda f: f["name"])


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from `path`; ModelFormatError if it is too large, not JSON or not an object."""
    if path.stat().st_size > limit:
        raise ModelFormatError(f"{path.name} is larger than {limit // (1024 * 1024)} MiB.")
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelFormatError(f"{path.name} is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path.name} is not a JSON object.")
    return data


def read_text(path: Path, limit: int = MAX_TEXT_BYTES) -> str:
    with path.open("rb") as fh:
        return fh.read(limit).decode("utf-8", errors="replace")


def refuse_pickle_only(top: set[str]) -> None:
    """ModelSafetyError when the top-level names hold pickle checkpoints and no safetensors."""
    pickles = sorted(n for n in top if n.lower().endswith(PICKLE_SUFFIXES))
    if pickles and not any(n.endswith(".safetensors") for n in top):
        raise ModelSafetyError(
            f"The directory holds only pickle checkpoints ({', '.join(pickles[:3])}), which can run code when "
            "loaded: pickle checkpoints are refused; convert to safetensors."
        )


def check_hf_dir(directory: Path, names: set[str]) -> tuple[dict[str, Any], list[Path]]:
    """The safety and format checks every use of a directory goes through (inspect and load).

    `names` are the directory's file names (relative). Returns (config, weight files that
    transformers would load). Raises ModelSafetyError for a pickle-only checkpoint or custom
    code; ModelFormatError for a missing config, unknown model type or missing/unsafe shards.
    """
    top = {n for n in names if "/" not in n}
    refuse_pickle_only(top)
    if "config.json" not in top:
        raise ModelFormatError("The directory has no config.json, so it is not a Hugging Face model directory.")
    config = read_json(directory / "config.json")
    for name in CODE_BEARING_JSON:
        if name in top and "auto_map" in (config if name == "config.json" else read_json(directory / name)):
            raise ModelSafetyError(
                f"{name} asks for custom code (auto_map); trust_remote_code is never enabled, so models "
                "that need their own Python code cannot be registered."
            )
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ModelFormatError("config.json has no model_type.")
    if not transformers_knows(model_type):
        raise ModelFormatError(
            f"model_type {model_type!r} is not one transformers knows; it would need custom code, which is never run."
        )
    return config, weight_files(directory, top)


def transformers_knows(model_type: str) -> bool:
    """Whether transformers has a built-in config class for `model_type`.

    transformers 5 keeps the names in `auto_mappings`, importable without torch (a second or
    two instead of several); the full `configuration_auto` (which imports torch and adds a few
    special names) is consulted only when that quick table does not have the type.
    """
    try:
        from transformers.models.auto.auto_mappings import CONFIG_MAPPING_NAMES as quick
    except ImportError:  # transformers 4
        quick = {}
    if model_type in quick:
        return True
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return model_type in CONFIG_MAPPING_NAMES


def weight_files(directory: Path, top: set[str]) -> list[Path]:
    """The safetensors files `from_pretrained(use_safetensors=True)` reads: the index's shards or
    model.safetensors."""
    if WEIGHTS_INDEX in top:
        index = read_json(directory / WEIGHTS_INDEX)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelFormatError(f"{WEIGHTS_INDEX} has no weight_map.")
        if not all(isinstance(shard, str) for shard in weight_map.values()):
            raise ModelFormatError(f"{WEIGHTS_INDEX} has a weight_map entry that is not a file name.")
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            # Shard names are plain file names in this directory: no folders, no "..", no absolute paths.
            if "/" in shard or "\\" in shard or shard.startswith(".") or not shard.endswith(".safetensors"):
                raise ModelSafetyError(f"{WEIGHTS_INDEX} names a shard outside the model directory.")
            if shard not in top:
                raise ModelFormatError(f"{WEIGHTS_INDEX} names the shard {shard}, which is missing.")
        return [directory / shard for shard in shards]
    if SINGLE_WEIGHTS in top:
        return [directory / SINGLE_WEIGHTS]
    raise ModelFormatError(
        f"The directory has no weights: neither {SINGLE_WEIGHTS} nor {WEIGHTS_INDEX} is present."
    )


def inspect_hf_dir(directory: Path, allowed: list[Path]) -> ModelInfo:
    """ModelInfo for a Hugging Face safetensors directory (see check_hf_dir for what is refused)."""
    files = list_files(directory, allowed)
    names = {f["name"] for f in files}
    config, weights = check_hf_dir(directory, names)

    parameters = 0
    by_dtype: dict[str, int] = {}
    for path in weights:
        summary = read_safetensors_header(path)
        parameters += summary.parameters
        for dtype, count in summary.elements_by_dtype.items():
            by_dtype[dtype] = by_dtype.get(dtype, 0) + count

    # Multimodal configs keep the language model's sizes in a nested config.
    scopes = [config] + [config[k] for k in ("text_config", "language_config", "llm_config")
                         if isinstance(config.get(k), dict)]
    hidden = _int(scopes, "hidden_size", "n_embd", "d_model")
    heads = _int(scopes, "num_attention_heads", "n_head", "num_heads")
    kv_heads = _int(scopes, "num_key_value_heads", "n_head_kv", "num_kv_heads") or heads
    head_dim = _int(scopes, "head_dim") or (hidden // heads if hidden and heads else None)
    dtype = config.get("dtype") or config.get("torch_dtype")
    if not isinstance(dtype, str) and by_dtype:
        dominant = max(by_dtype, key=by_dtype.get)
        dtype = DTYPE_NAMES.get(dominant, dominant)
    architectures = config.get("architectures")

    top = {n for n in names if "/" not in n}
    return ModelInfo(
        format="hf_dir",
        path=str(directory),
        architecture=architectures[0] if isinstance(architectures, list) and architectures else None,
        model_type=config["model_type"],
        parameters=parameters,
        dtype=dtype if isinstance(dtype, str) else None,
        context_length=_int(scopes, "max_position_embeddings", "n_positions", "n_ctx", "seq_length",
                            "max_sequence_length"),
        vocab_size=_int(scopes, "vocab_size"),
        hidden_size=hidden,
        layers=_int(scopes, "num_hidden_layers", "n_layer", "num_layers"),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_int(scopes, "intermediate_size", "n_inner", "ffn_dim"),
        chat_template=_chat_template(directory, top),
        has_tokenizer=any(name in top for name in TOKENIZER_FILES),
        licence=_licence(directory, top),
        quantization=None,
        files=files,
    )


def _int(scopes: list[dict[str, Any]], *keys: str) -> int | None:
    for scope in scopes:
        for key in keys:
            value = scope.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def _chat_template(directory: Path, top: set[str]) -> str | None:
    """The default chat template: chat_template.jinja (what transformers 5 writes and prefers),
    else tokenizer_config.json `chat_template` (a string, or a list of named templates), else
    chat_template.json. Only read here; rendering happens in transformers' sandboxed Jinja."""
    if "chat_template.jinja" in top:
        return read_text(directory / "chat_template.jinja")
    for name in ("tokenizer_config.json", "chat_template.json"):
        if name not in top:
            continue
        template = read_json(directory / name).get("chat_template")
        if isinstance(template, str) and template:
            return template
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            chosen = named.get("default") or next((t for t in named.values() if isinstance(t, str)), None)
            if isinstance(chosen, str):
                return chosen
    return None


_FRONT_MATTER_LICENCE = re.compile(r"^license(?:_name)?:\s*['\"]?([^'\"\n#]+?)['\"]?\s*$", re.MULTILINE)


def _licence(directory: Path, top: set[str]) -> str | None:
    """`license:` from README.md's YAML front matter, else the first line of a LICENSE file."""
    if "README.md" in top:
        text = read_text(directory / "README.md")
        if text.startswith("---"):
            end = text.find("\n---", 3)
            match = _FRONT_MATTER_LICENCE.search(text[3:end if end > 0 else len(text)])
            if match:
                return match.group(1).strip()
    for name in sorted(top):
        if name.upper().startswith(("LICENSE", "LICENCE")):
            for line in read_text(directory / name, 8192).splitlines():
                if line.strip():
                    return line.strip()[:200]
    return None
