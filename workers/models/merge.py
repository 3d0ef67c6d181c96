"""Merge a LoRA adapter into its base model: a standalone safetensors model directory.

The base is loaded through the one safe loader, the adapter checked as inference checks it
(safetensors only), the LoRA deltas folded into the base weights (PEFT's merge_and_unload),
and the result saved with safetensors in the base's own dtype, tokenizer included. As with
conversions, the directory is written under a temporary name, fsynced, and renamed into
place only when complete: `out_dir` either does not exist or holds a finished merge.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from workers.durable import fsync_directory, fsync_tree

from .errors import ModelFormatError
from .loading import load_for_inference

MARKER = ".workbench-merged.json"


def merge_adapter(base_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """Write base + adapter as one model to `out_dir` and return it. An `out_dir` that already
    holds a finished merge is returned as it is. Raises ModelFormatError for an adapter PEFT may
    not load safely or one that does not fit the base."""
    from peft import PeftModel

    from workers.inference.cache import check_adapter_dir

    out_dir = Path(os.path.abspath(out_dir))
    if (out_dir / MARKER).is_file():
        return out_dir
    adapter_dir = check_adapter_dir(Path(adapter_dir))
    model, tokenizer = load_for_inference(Path(base_dir), device="cpu")
    try:
        merged = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False).merge_and_unload()
    except (ValueError, KeyError, RuntimeError) as exc:  # shapes or module names that do not match the base
        raise ModelFormatError(f"The adapter does not fit this base model: {str(exc)[:200]}") from None
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        merged.save_pretrained(work, safe_serialization=True)
        tokenizer.save_pretrained(work)
        fsync_tree(work)
        with open(work / MARKER, "w") as handle:
            json.dump({"base": str(base_dir), "adapter": str(adapter_dir)}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.rename(work, out_dir)
        except OSError:
            if (out_dir / MARKER).is_file():  # another worker finished the same merge first
                return out_dir
            raise
        fsync_directory(out_dir.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out_dir
