"""Convert a GGUF model once into a cached safetensors directory.

transformers dequantizes a GGUF to float tensors on load (about 20-45 s for the 135M demo
model on two cores), but flags the loaded model as quantized: it refuses to save it and
`Trainer` refuses to train it. So the conversion builds a fresh model from the same config
(on the meta device: no random initialisation, no second copy of the weights), assigns it the
dequantized state dict and saves that with safetensors, float32 as dequantized. Later loads
of the directory take well under a second.

The directory is written under a temporary name next to `out_dir` and renamed into place only
when complete, with the marker file written last inside it: `out_dir` either does not exist or
is a finished conversion. Two workers converting the same file race harmlessly — the second
rename fails and that worker returns the first one's result.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from workers.durable import fsync_directory, fsync_tree

from .errors import ModelFormatError, ModelSafetyError
from .gguf_file import inspect_gguf

MARKER = ".workbench-converted.json"
# A temporary directory this old is left over from a killed conversion (one takes under a
# minute for the demo model, some minutes for a 7B model).
STALE_TEMP_SECONDS = 6 * 3600


def convert_gguf_to_safetensors(gguf_path: Path, out_dir: Path) -> Path:
    """Convert `gguf_path` into a safetensors model directory at `out_dir` and return `out_dir`.

    The directory holds config.json, generation_config.json, model.safetensors (float32),
    the tokenizer files (tokenizer.json, tokenizer_config.json, chat_template.jinja) and the
    marker. If `out_dir` already holds a finished conversion of the same file (same name and
    size), it is returned at once.

    Raises ModelFormatError if the GGUF is unreadable or of an architecture transformers
    cannot load, or if `out_dir` exists but is not a finished conversion of this file.
    """
    source_path = Path(os.path.realpath(gguf_path))
    out_dir = Path(os.path.abspath(out_dir))
    if not source_path.is_file():
        raise ModelSafetyError(f"The GGUF file {str(gguf_path)!r} does not exist.")
    source = {"gguf_file": source_path.name, "gguf_size": source_path.stat().st_size}
    if out_dir.exists():
        return _finished(out_dir, source)

    info = inspect_gguf(source_path)  # refuses a damaged file or an unsupported architecture up front
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(out_dir)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        parameters = _convert_into(source_path, work)
        import transformers

        marker = {**source, "parameters": parameters, "gguf_parameters": info.parameters,
                  "quantization": info.quantization, "transformers": transformers.__version__}
        fsync_tree(work)  # the weights reach the disk before the marker says they are there
        _write_durably(work / MARKER, json.dumps(marker, indent=2))
        try:
            os.rename(work, out_dir)
        except OSError:
            if out_dir.exists():  # another worker finished first
                return _finished(out_dir, source)
            raise
        fsync_directory(out_dir.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out_dir


def _convert_into(gguf_path: Path, target: Path) -> int:
    """Dequantize through transformers and save model and tokenizer into `target`; returns the
    parameter count of the saved model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    options = {"gguf_file": gguf_path.name, "local_files_only": True, "trust_remote_code": False}
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), **options)
    try:
        source = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), **options)
    except ValueError as exc:  # e.g. an architecture transformers' GGUF loader does not map
        raise ModelFormatError(f"transformers cannot load {gguf_path.name}: {exc}") from None
    fresh = rebuild_unquantized(source)
    parameters = sum(p.numel() for p in fresh.parameters())
    fresh.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    return parameters


def rebuild_unquantized(source: Any) -> Any:
    """A plain model of `source`'s class and config holding `source`'s tensors, without the
    quantization flag (and without copying the weights). `source` is a PreTrainedModel."""
    import torch

    config = copy.deepcopy(source.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with torch.device("meta"):
        fresh = type(source)(config)
    fresh.load_state_dict(source.state_dict(), strict=True, assign=True)
    # Non-persistent buffers (rotary inv_freq) are not in a state dict: take the source's.
    for name, buffer in source.named_buffers():
        module_name, _, attr = name.rpartition(".")
        module = fresh.get_submodule(module_name)
        if attr in module._buffers:
            module._buffers[attr] = buffer
    fresh.tie_weights()
    fresh.generation_config = copy.deepcopy(source.generation_config)
    left_on_meta = [n for n, t in [*fresh.named_parameters(), *fresh.named_buffers()] if t.is_meta]
    if left_on_meta:
        raise ModelFormatError(f"Conversion left tensors without values: {', '.join(left_on_meta[:5])}.")
    return fresh.eval()


def _finished(out_dir: Path, source: dict) -> Path:
    marker = out_dir / MARKER
    if not marker.is_file():
        raise ModelFormatError(f"{out_dir} exists but is not a finished conversion; remove it to convert again.")
    try:
        recorded = json.loads(marker.read_text())
    except (OSError, ValueError):
        raise ModelFormatError(f"{out_dir} has an unreadable conversion marker; remove it to convert again.") from None
    if {k: recorded.get(k) for k in source} != source:
        raise ModelFormatError(f"{out_dir} holds the conversion of another file ({recorded.get('gguf_file')}).")
    return out_dir


def _remove_stale_temps(out_dir: Path) -> None:
    cutoff = time.time() - STALE_TEMP_SECONDS
    for leftover in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        try:
            if leftover.is_dir() and leftover.stat().st_mtime < cutoff:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            pass


def _write_durably(path: Path, text: str) -> None:
    with path.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
