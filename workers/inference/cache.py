"""An LRU cache of loaded models (and adapters) under a memory budget, shared by threads."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.models import load_for_inference
from workers.models.errors import ModelFormatError

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PICKLE_ADAPTER_WEIGHTS = ("adapter_model.bin", "adapter_model.pt", "adapter_model.pth")


@dataclass
class _Entry:
    model: Any
    tokenizer: Any
    size_bytes: int


class ModelCache:
    """`get(key, path, ...)` returns (model, tokenizer), loading on a miss.

    Entries are keyed by (key, adapter_path, device, dtype). When the estimated sizes of the
    cached models (their parameter and buffer bytes) add up to more than `memory_budget_bytes`,
    the least recently used entries are dropped until the rest fits; the entry just loaded is
    never dropped (a single model over the budget stays, alone). Eviction only drops the cache's
    reference: a generation still running on an evicted model keeps it alive until it ends.

    An adapter is loaded with `PeftModel.from_pretrained` on top of its own fresh copy of the base
    model (PEFT injects its layers into the model it is given, so the cached base is never
    shared with an adapter); the adapter directory must hold adapter_model.safetensors.

    Thread-safe: concurrent gets of the same entry load it once; a load does not block gets of
    other, cached entries. `loader(path, device=..., dtype=...)` defaults to
    workers.models.load_for_inference (bind `roots=` with functools.partial to confine paths).
    """

    def __init__(self, memory_budget_bytes: int, loader: Callable[..., tuple[Any, Any]] = load_for_inference):
        self.memory_budget_bytes = int(memory_budget_bytes)
        self.loader = loader
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._loading: dict[tuple, Future] = {}
        self._lock = threading.Lock()

    def get(self, key: str, path: os.PathLike | str, adapter_path: os.PathLike | str | None = None,
            device: str = "auto", dtype: Any = None) -> tuple[Any, Any]:
        device = resolve_device(device)
        dtype = default_dtype(device) if dtype is None else dtype
        entry_key = (key, str(adapter_path) if adapter_path is not None else None, device, str(dtype))
        with self._lock:
            entry = self._entries.get(entry_key)
            if entry is not None:
                self._entries.move_to_end(entry_key)
                return entry.model, entry.tokenizer
            pending = self._loading.get(entry_key)
            owner = pending is None
            if owner:
                pending = self._loading[entry_key] = Future()
        if not owner:
            entry = pending.result()  # raises the loader's exception too
            return entry.model, entry.tokenizer
        try:
            model, tokenizer = self._load(Path(path), adapter_path, device, dtype)
            entry = _Entry(model, tokenizer, model_size_bytes(model))
        except BaseException as exc:
            with self._lock:
                del self._loading[entry_key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._loading[entry_key]
            self._entries[entry_key] = entry
            evicted = self._evict(keep=entry_key)
        pending.set_result(entry)
        if evicted and device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()
        return model, tokenizer

    def keys(self) -> list[tuple]:
        """Cached entries' keys, least recently used first."""
        with self._lock:
            return list(self._entries)

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return sum(e.size_bytes for e in self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _evict(self, *, keep: tuple) -> list[tuple]:
        evicted = []
        total = sum(e.size_bytes for e in self._entries.values())
        for entry_key in list(self._entries):
            if total <= self.memory_budget_bytes:
                break
            if entry_key == keep:
                continue
            total -= self._entries.pop(entry_key).size_bytes
            evicted.append(entry_key)
        return evicted

    def _load(self, path: Path, adapter_path, device: str, dtype: Any) -> tuple[Any, Any]:
        if adapter_path is not None:
            adapter_path = check_adapter_dir(Path(adapter_path))  # before loading anything
        model, tokenizer = self.loader(path, device=device, dtype=dtype)
        if adapter_path is None:
            return model, tokenizer
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_path), is_trainable=False)
        model.eval()
        return model, tokenizer


def check_adapter_dir(directory: Path) -> Path:
    """A LoRA adapter directory PEFT may load: adapter_config.json and adapter_model.safetensors.
    A pickle-only adapter (adapter_model.bin) is refused, since PEFT would unpickle it."""
    directory = Path(os.path.realpath(directory))
    if not directory.is_dir():
        raise ModelFormatError("The adapter directory does not exist.")
    if not (directory / ADAPTER_CONFIG).is_file():
        raise ModelFormatError(f"The adapter directory has no {ADAPTER_CONFIG}.")
    weights = directory / ADAPTER_WEIGHTS
    if not weights.is_file():
        if any((directory / name).exists() for name in PICKLE_ADAPTER_WEIGHTS):
            raise ModelFormatError("The adapter's weights are a pickle file; only safetensors adapters are loaded.")
        raise ModelFormatError(f"The adapter directory has no {ADAPTER_WEIGHTS}.")
    if os.path.realpath(weights) != str(weights):
        raise ModelFormatError("The adapter's weights file may not be a link.")
    return directory


def model_size_bytes(model: Any) -> int:
    """Parameter and buffer bytes (each tensor counted once: tied weights are shared)."""
    seen, total = set(), 0
    tensors = list(model.parameters()) + list(model.buffers())
    for tensor in tensors:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        total += tensor.numel() * tensor.element_size()
    return total


def resolve_device(device: str) -> str:
    """"auto" is cuda when available, then mps, then cpu; anything else is returned as given."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def default_dtype(device: str) -> str:
    """bf16 on a CUDA device that supports it, fp32 everywhere else."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bf16"
    return "fp32"
